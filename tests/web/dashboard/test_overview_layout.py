"""The overview's order: what needs attention first; the dispatchers' internals (cost
score, partitions) in a collapsed section lower down; failure counts named precisely."""

import pytest

pytestmark = pytest.mark.django_db


def test_cost_and_partitions_are_in_a_collapsed_section_below_the_workers(viewer_client, activity):
    html = viewer_client.get("/").content.decode()
    internals = html.index('<details class="card mb-16" id="internals">')
    assert html.index('id="workers"') < internals < html.index('id="system"')
    assert (
        html.index('id="cost-chart"') > internals and html.index('class="partitions"') > internals
    )
    assert '<details class="card mb-16" id="internals" open' not in html  # closed at first


def test_the_failure_numbers_say_what_they_count(viewer_client, activity):
    html = viewer_client.get("/").content.decode()
    assert "<td>failed attempts<div" in html and "failed attempts</th>" in html
    assert "the same count as its <em>failed attempts</em>, added up" in html
    assert "jobs whose latest attempt failed" not in html  # jobs by state: the tiles
