"""Wake the Celery worker's event loop when a pool thread frees a slot.

With the threads pool, a task finishing on a pool thread does not wake the worker's
event loop (kombu's hub): if its prefetch window was full, the hub keeps sleeping in
epoll and the next due job waits in Redis for the next unrelated timer (up to seconds).
A self-pipe registered with the hub, written whenever a task starts and once its message
is acknowledged (the moment its prefetch slot frees), lets the hub read the broker again
at once, without a polling tick that would wake every idle worker a hundred times a second.

A slot is given back as soon as its task's handlers have returned (`free_slot`), not
after their successes commit: the next message is read from the broker, and handed to
the pool, while the commit runs, and the pool thread takes it the moment it is free. The
message is acknowledged then, which is safe: recovery never depends on redelivery (a
running job's lease does it).
"""

from __future__ import annotations

import contextlib
import os

from celery import bootsteps
from celery.signals import task_postrun, task_prerun
from celery.worker.request import Request

_wake_read_fd: int | None = None
_wake_fd: int | None = None
# The requests whose tasks this process's pool threads run, by task id. (In a prefork
# child it stays empty: the parent holds the requests and acknowledges them.)
_in_pool: dict[str, WakingRequest] = {}


class HubWakeup(bootsteps.StartStopStep):
    """A worker step: the self-pipe, made once per worker before its pool starts."""

    requires = {"celery.worker.components:Hub"}

    def start(self, worker) -> None:
        global _wake_read_fd, _wake_fd
        if getattr(worker, "hub", None) is None:
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        _wake_read_fd, _wake_fd = read_fd, write_fd


class HubWakeupReader(bootsteps.StartStopStep):
    """A consumer step: the pipe read by the hub, registered each time the consumer starts.
    A lost broker connection resets the hub, which forgets every reader; without this the
    reconnected worker would read its queue only at its timers, one message every 2 s."""

    requires = {"celery.worker.consumer.connection:Connection"}

    def start(self, consumer) -> None:
        if consumer.hub is not None and _wake_read_fd is not None:
            consumer.hub.add_reader(_wake_read_fd, _drain, _wake_read_fd)


def _drain(read_fd: int) -> None:
    try:
        while os.read(read_fd, 4096):
            pass
    except BlockingIOError:
        pass


@task_prerun.connect
@task_postrun.connect
def _wake(**kwargs) -> None:
    if _wake_fd is not None:
        with contextlib.suppress(BlockingIOError):  # a full pipe: the hub is awake anyway
            os.write(_wake_fd, b"\0")


def free_slot(task_id: str | None) -> None:
    """The task's handlers have returned: acknowledge its message now (once; Celery's own
    acknowledgement after the task is then a no-op), which frees its prefetch slot and
    wakes the hub to read the next message."""
    request = _in_pool.get(task_id)  # None when the task was called directly
    if request is not None:
        request.acknowledge()


class WakingRequest(Request):
    """With acks_late the prefetch slot frees when the message is acknowledged (or
    rejected), on the pool thread after task_postrun or at `free_slot`: wake the hub then
    too."""

    def on_accepted(self, pid, time_accepted) -> None:
        # Called where the task is about to run: on its pool thread (or, in a prefork
        # worker, in the parent when a child reports it took the task).
        _in_pool[self.id] = self
        super().on_accepted(pid, time_accepted)

    def acknowledge(self) -> None:
        _in_pool.pop(self.id, None)
        super().acknowledge()
        _wake()

    def reject(self, requeue: bool = False) -> None:
        _in_pool.pop(self.id, None)
        super().reject(requeue=requeue)
        _wake()
