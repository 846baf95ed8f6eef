"""The engine: jobs and the machinery that runs them. What a handler raises to say what
should happen next is importable from here: ``from tasksapp.engine import Snooze``."""

from tasksapp.engine.handlers import JobCancelled, Snooze

__all__ = ["JobCancelled", "Snooze"]
