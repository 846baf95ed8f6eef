"""Alerts: rules an operator sets on what the database shows (dead jobs per handler, the
age of the oldest due job, start lag, a queue with due work and no live worker, a
dispatcher gone), evaluated every minute by beat. Each condition that holds opens one
incident per rule and key (a handler, a queue, a dispatcher) and sends one "firing"
notice by email and/or webhook; when it clears, one "resolved" notice. Nothing is
repeated while an incident stays open; a notice a channel failed to take is sent again at
the next evaluation (docs/OPERATIONS.md, "Alerts")."""
