"""Number and time formats for the dashboard's templates."""

from __future__ import annotations

import datetime as dt
import json

from django import template
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()
PALETTE = ["#2f6fde", "#1f9d55", "#7c5cd6", "#d97706", "#0e9aa7", "#c2417b", "#5b6b8c", "#8a6d1f"]


@register.filter
def num(value) -> str:
    """12345 → 12,345; None → —."""
    if value is None or value == "":
        return "—"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


@register.filter
def ms(value) -> str:
    """A duration in milliseconds, in the unit that reads best."""
    if value is None:
        return "—"
    value = float(value)
    if abs(value) < 10:
        return f"{value:.1f} ms"
    if abs(value) < 1000:
        return f"{value:.0f} ms"
    if abs(value) < 60_000:
        return f"{value / 1000:.2f} s"
    return f"{value / 60_000:.1f} min"


@register.filter
def age(seconds) -> str:
    """Seconds since something, short: 4 s, 3 min, 2 h."""
    if seconds is None:
        return "—"
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@register.filter
def duration(value) -> str:
    """A timedelta as 1 day, 6 h, 30 min, 45 s."""
    if not isinstance(value, dt.timedelta):
        return "—"
    total = int(value.total_seconds())
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [
        f"{days} day{'s' if days != 1 else ''}" if days else "",
        f"{hours} h" if hours else "",
        f"{minutes} min" if minutes else "",
        f"{seconds} s" if seconds else "",
    ]
    return ", ".join(p for p in parts if p) or "0 s"


@register.filter
def color(index) -> str:
    """A stable colour for the index-th dispatcher."""
    return PALETTE[int(index) % len(PALETTE)]


@register.filter
def get(mapping, key):
    return mapping.get(key) if isinstance(mapping, dict) else None


# --- values as people read them ---------------------------------------------------------

TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"


def _relative(seconds: float) -> str:
    """3 min ago / in 2 h."""
    words = age(abs(seconds))
    return f"in {words}" if seconds < 0 else f"{words} ago"


@register.filter
def when(value) -> str:
    """One format for every timestamp: `2026-11-29 06:03:12 UTC · 3 min ago`, the
    relative part as of rendering (UTC, with the exact time in the title)."""
    if not isinstance(value, dt.datetime):
        return "—"
    value = value.astimezone(dt.UTC) if value.tzinfo else value.replace(tzinfo=dt.UTC)
    exact = value.strftime(TIME_FORMAT)
    ago = (timezone.now() - value).total_seconds()
    return format_html(
        '<time datetime="{}" title="{}">{} <span class="rel">· {}</span></time>',
        value.isoformat(),
        exact,
        exact,
        _relative(ago),
    )


@register.filter
def clock(value) -> str:
    """A time of day in a table cell: `06:03:12` (UTC, the date and zone in the title),
    marked like `when` so the page's script adds the reader's local time."""
    if not isinstance(value, dt.datetime):
        return "—"
    value = value.astimezone(dt.UTC) if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        value.strftime(TIME_FORMAT),
        value.strftime("%H:%M:%S"),
    )


@register.filter
def took(start, end) -> str:
    """The time from `start` to `end` (two datetimes), as a duration: 1.25 s, 3.0 min."""
    if not isinstance(start, dt.datetime) or not isinstance(end, dt.datetime):
        return "—"
    return ms((end - start).total_seconds() * 1000)


def json_text(value) -> str:
    """A JSON value as indented JSON text (keys sorted); a value JSON cannot hold: str."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


@register.filter
def pretty(value) -> str:
    """A JSON value (payload, result, policy, audit detail) pretty-printed in a block
    with a copy button. None → `null`, True → `true`."""
    text = json_text(value)
    return format_html(
        '<div class="json"><button type="button" class="copy" data-copy '
        'title="Copy to the clipboard">copy</button><pre>{}</pre></div>',
        text,
    )


@register.filter
def jsonline(value) -> str:
    """A JSON value on one line (a table cell): `{"fail_rate": 1.0}`, `true`, `null`."""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)
