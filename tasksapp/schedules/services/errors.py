class ScheduleInputError(ValueError):
    """Bad input to a schedule service; the message says what to fix."""
