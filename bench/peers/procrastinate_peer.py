"""procrastinate (PostgreSQL) with scheduled jobs (`configure(schedule_at=...).defer`),
as a user sets it up. A worker:

    python -m bench.peers.procrastinate_peer

PEERS_DATABASE_URL names the database; PEERS_CONCURRENCY (5), PEERS_POLLING_SECONDS
(the worker's fetch_job_polling_interval, default 5 s) and PEERS_RETRY_STALLED (the
documented periodic task that retries the jobs of workers whose heartbeat stopped) tune
it.
"""

import os

from procrastinate import App, PsycopgConnector

from bench.peers import work

app = App(connector=PsycopgConnector(conninfo=os.environ.get("PEERS_DATABASE_URL", "")))

STALLED_WORKER_SECONDS = 10.0  # with the retry task: heartbeats every 2 s, 10 s of silence


@app.task(name="peers.execute", queue="peers")
def execute(job_id: int) -> None:
    work.execute(job_id)


if os.environ.get("PEERS_RETRY_STALLED"):

    @app.periodic(cron="* * * * * */2")  # every 2 seconds (croniter's seconds field)
    @app.task(name="peers.retry_stalled", queue="peers", queueing_lock="retry_stalled")
    async def retry_stalled(timestamp: int) -> None:
        stalled = await app.job_manager.get_stalled_jobs(
            seconds_since_heartbeat=STALLED_WORKER_SECONDS
        )
        for job in stalled:
            await app.job_manager.retry_job(job)


def worker_options() -> dict:
    options: dict = {"concurrency": int(os.environ.get("PEERS_CONCURRENCY", "5"))}
    if os.environ.get("PEERS_POLLING_SECONDS"):
        options["fetch_job_polling_interval"] = float(os.environ["PEERS_POLLING_SECONDS"])
    if os.environ.get("PEERS_RETRY_STALLED"):
        options["update_heartbeat_interval"] = 2.0
        options["stalled_worker_timeout"] = STALLED_WORKER_SECONDS
    return options


if __name__ == "__main__":
    app.run_worker(**worker_options())
