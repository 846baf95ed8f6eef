"""The dashboard's value formats: JSON pretty-printed (escaped, with a copy button), one
timestamp format with a relative time, durations."""

import datetime as dt

import time_machine

from tasksapp.web.templatetags.tempo import jsonline, pretty, took, when

NOW = dt.datetime(2026, 11, 29, 6, 0, tzinfo=dt.UTC)


def test_pretty_prints_json_not_python_reprs():
    html = pretty({"fail_rate": 1.0, "ok": True, "none": None})
    assert (
        "{\n  &quot;fail_rate&quot;: 1.0,\n  &quot;none&quot;: null,\n  &quot;ok&quot;: true\n}"
        in html
    )
    assert "True" not in html and "None" not in html
    assert "data-copy" in html and html.startswith('<div class="json">')
    assert pretty(None).endswith("<pre>null</pre></div>")


def test_pretty_escapes_markup_and_keeps_unicode():
    html = pretty({"x": "<script>alert(1)</script>", "name": "Zoë"})
    assert "<script>" not in html and "&lt;script&gt;" in html and "Zoë" in html


def test_jsonline_is_one_line_of_json():
    assert jsonline({"b": [1, None], "a": False}) == '{"a": false, "b": [1, null]}'
    assert jsonline("text") == '"text"'


@time_machine.travel(NOW, tick=False)
def test_when_shows_utc_and_how_long_ago():
    html = when(NOW - dt.timedelta(minutes=3))
    assert '>2026-11-29 05:57:00 UTC <span class="rel">· 3 min ago</span></time>' in html
    assert "· in 2.0 h" in when(NOW + dt.timedelta(hours=2))
    plus_one = dt.timezone(dt.timedelta(hours=1))
    assert "2026-11-29 05:00:00 UTC" in when(dt.datetime(2026, 11, 29, 6, 0, tzinfo=plus_one))
    assert when(None) == "—"


def test_took_is_a_duration_between_two_times():
    assert took(NOW, NOW + dt.timedelta(seconds=1.25)) == "1.25 s"
    assert took(NOW, NOW + dt.timedelta(minutes=3)) == "3.0 min"
    assert took(NOW, None) == "—"
