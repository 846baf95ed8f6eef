"""Tempo's handler for the peers bench: the same work, recorded the same way (on the
worker's own Django connection)."""

import datetime as dt
import time

from django.db import connection

from bench.peers.work import RECORD, WORK_SECONDS
from tasksapp.engine.handlers import job_handler


@job_handler
def peer_work(ctx):
    began = dt.datetime.now(dt.UTC)
    time.sleep(WORK_SECONDS)
    with connection.cursor() as cursor:
        cursor.execute(RECORD, [ctx.job_id, began])
