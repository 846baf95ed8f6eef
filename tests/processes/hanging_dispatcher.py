"""A real dispatcher process whose broker never takes a message: it claims its due jobs,
says so, and hangs in the publish, so a test can kill it between claim and publish.

    python -m tests.processes.hanging_dispatcher <name>
"""

import os
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")
django.setup()

from tasksapp.engine.dispatcher.loop import DispatcherLoop  # noqa: E402

CLAIMED = "claimed, publishing never"


class HangingPublisher:
    def __call__(self, batches, queue=None) -> None:
        print(CLAIMED, sum(len(batch) for batch in batches), flush=True)
        time.sleep(3600)


if __name__ == "__main__":
    DispatcherLoop(name=sys.argv[1], publisher=HangingPublisher()).run()
