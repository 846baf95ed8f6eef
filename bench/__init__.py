"""Benchmarks. Every bench runs as ``python -m bench.<name>``, so this runs first: the
bench process and the dispatchers and workers it starts (which inherit its environment)
register the handlers the benches schedule."""

import os

os.environ.setdefault(
    "TEMPO_HANDLER_MODULES",
    "tasksapp.demo.handlers,tasksapp.recurring.handlers,"
    "tests.handlers.recording,bench.practice.handlers,bench.routing.handlers",
)

# A key the settings accept outside DEBUG (50+ characters, not a published one); benches
# sign nothing that outlives them.
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-key-" * 4)
