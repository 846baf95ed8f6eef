"""The timer of the raw Celery peer: sends each task of a steady stream when it is due
(`noop.delay`), as an application that keeps its own timers would.

    python -m bench.steady.timer --rate 1000 --seconds 60 --at EPOCH
"""

import argparse
import time

from bench.steady.celery_app import noop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--at", type=float, required=True, help="epoch the first is due")
    args = parser.parse_args()
    for key in range(int(args.rate * args.seconds)):
        due = args.at + key / args.rate
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        noop.delay(key, due)


if __name__ == "__main__":
    main()
