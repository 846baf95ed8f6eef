"""The HTTP API (Django REST Framework): thin adapters over the services and selectors.
Routes in `urls.py`, the Prometheus endpoint in `metrics.py`; docs/DASHBOARD.md."""
