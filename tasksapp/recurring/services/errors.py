class PlanningInputError(ValueError):
    """Bad input to a planning service; the message says what to fix."""
