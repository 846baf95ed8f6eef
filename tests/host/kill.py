"""A transactional Task whose worker is SIGKILLed mid-run, driven from inside the new
project (run with its venv's python, in its folder): `enqueue MARKER` prints the task
result's id; `result ID` waits for it and prints its status and the rows it wrote."""

import json
import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostproj.settings")
import django  # noqa: E402

django.setup()

from shop import tasks  # noqa: E402
from shop.models import Run  # noqa: E402

WAIT_SECONDS = 90
LABEL = "held"

if sys.argv[1] == "enqueue":
    print(tasks.hold.enqueue(LABEL, sys.argv[2]).id)
else:
    result = tasks.hold.get_result(sys.argv[2])
    deadline = time.monotonic() + WAIT_SECONDS
    while not result.is_finished and time.monotonic() < deadline:
        time.sleep(0.2)
        result.refresh()
    done = {
        "status": result.status,
        "return_value": result.return_value if result.status == "SUCCESSFUL" else None,
        "rows": Run.objects.filter(name=LABEL).count(),
    }
    json.dump(done, sys.stdout, default=str)
