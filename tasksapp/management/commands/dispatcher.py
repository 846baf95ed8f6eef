"""`manage.py dispatcher`: the former name of `manage.py tempo_dispatcher`."""

from tasksapp.management.commands.tempo_dispatcher import Command

__all__ = ["Command"]
