"""Degraded mode: why only jobs at or above the critical priority may be claimed now, or
"" while every job may (docs/ROUTING.md). A pure decision, made each turn from what the
dispatcher sees; the loop records it and tells the limited claimer."""

from __future__ import annotations

from collections.abc import Callable


class DegradedMode:
    """An operator's switch, an unreachable Redis due index, or a backlog: over
    `threshold` due jobs held unclaimed for `after_seconds`, only critical jobs are
    claimed for as long again; then every job is claimed again (highest priority
    first), until the backlog has stayed over the threshold for another such spell. A
    backlog that persists thus alternates between the two. `threshold` 0: never."""

    def __init__(self, *, threshold: int, after_seconds: float) -> None:
        self.threshold = threshold
        self.after_seconds = after_seconds
        self._over_since: float | None = None  # the backlog over the threshold since (ms)
        self._until: float | None = None  # degraded by the backlog until (ms)

    def reason(
        self,
        *,
        now_ms: float,
        operator: str,
        index_unreachable: bool,
        waiting: Callable[[], int],
    ) -> str:
        if operator:
            return f"switched on by an operator: {operator}"
        if index_unreachable:
            return "the Redis due index cannot be reached"
        return self._backlog(now_ms, waiting)

    def _backlog(self, now: float, waiting: Callable[[], int]) -> str:
        if self.threshold <= 0:
            return ""
        spell = self.after_seconds * 1000
        reason = (
            f"more than {self.threshold} due jobs waited unclaimed for over "
            f"{self.after_seconds:g} s"
        )
        if self._until is not None:
            if now < self._until:
                return reason
            self._until = self._over_since = None
        if waiting() <= self.threshold:
            self._over_since = None
            return ""
        if self._over_since is None:
            self._over_since = now
        if now - self._over_since < spell:
            return ""
        self._until = now + spell
        return reason
