"""procrastinate for the steady peers: one no-op task that records its start
(bench.steady.lags), a worker of concurrency 1 with procrastinate's defaults otherwise
(LISTEN/NOTIFY on, polling every 5 s). STEADY_DATABASE_URL names the database.

    python -m bench.steady.procrastinate_app
"""

import os

from procrastinate import App, PsycopgConnector

from bench.steady import lags

app = App(connector=PsycopgConnector(conninfo=os.environ.get("STEADY_DATABASE_URL", "")))


@app.task(name="steady.noop", queue="steady")
def noop(key: int, due: float) -> None:
    lags.record(key, due)


if __name__ == "__main__":
    app.run_worker(queues=["steady"], concurrency=1)
