"""A project's own app, as a Django project that installs Tempo would write it: @task
functions (Django's Tasks API) in `tasks`, a Tempo handler in `job_handlers`. Copied into
a new project by tests/host/test_host_project.py; never installed in Tempo's settings."""
