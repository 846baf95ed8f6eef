"""`{% load tempo %}` in any project: the dashboard's template library, found where Django
looks for an installed app's libraries."""

from tasksapp.web.templatetags.tempo import register

__all__ = ["register"]
