"""Process-wide settings of the engine's long-running processes (dispatchers, workers)."""

import gc


def freeze_startup_heap() -> None:
    """Put every object alive after start-up (Django, Celery, kombu: some 90,000) out of
    the cyclic garbage collector's reach; they live as long as the process anyway. A full
    collection otherwise scans them all: about 50 ms on the development VM, with every
    thread of the process stopped — running handlers included, which then execute that
    much late. Later collections only scan what was allocated since."""
    gc.collect()
    gc.freeze()
