"""The operator dashboard: server-rendered pages over the dashboard selectors, and
operator actions (POST, CSRF, permission-checked) over the audited services."""
