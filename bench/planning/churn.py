"""Member churn: deleting, deactivating and re-activating 30 % of a population.

    python -m bench.planning.churn [--populations 200000 2000000] [--slices 24 1440]

For each population and slice count, against a fresh database of its own (dropped at the
end): members filled by set-based SQL (golden-ratio phases), a daily task whose first
period, all slices of it, is planned ahead (one job per member), then 30 % of the members
chosen at random:

1. a sample deleted one at a time (`member_delete`), wall and CPU time per call;
2. all of them deactivated, then activated again, then deleted, by the batch
   (`member_deactivate_many`, `member_activate_many`, `member_delete_many`, --batch ids per
   call), wall and CPU time of each pass; the jobs cancelled and restored are checked.

Results: bench/results/planning-churn.json and its section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from datetime import UTC, datetime, timedelta

from bench.common import RESULTS, ROOT, BenchDatabase, table, write_json
from bench.planning.__main__ import fill, postgres_version

DOC = ROOT / "docs" / "BENCHMARKS.md"
SECTION = "## `bench/planning/churn.py`: members leaving and coming back"
ANCHOR = '<a id="bench-planning-churn"></a>'
NEXT = '<a id="bench-graphs"></a>'  # the section after it
CHURN = 0.3


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--populations", type=int, nargs="+", default=[200_000, 2_000_000])
    parser.add_argument("--slices", type=int, nargs="+", default=[24, 1440])
    parser.add_argument("--batch", type=int, default=10_000, help="member ids per call")
    parser.add_argument("--singles", type=int, default=300, help="members deleted one by one")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-doc", action="store_true", help="do not touch BENCHMARKS.md")
    parser.add_argument(
        "--doc-only",
        action="store_true",
        help="write the BENCHMARKS.md section from bench/results/planning-churn.json, run nothing",
    )
    return parser.parse_args()


def timed(call) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result) of `call()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def plan_period(slices: int) -> tuple[float, int]:
    """A daily task starting in an hour, every slice of its first period planned."""
    from tasksapp.recurring.services import recurring_task_create, slice_plan

    now = datetime.now(UTC)
    task = recurring_task_create(
        name=f"churn-{slices}",
        handler="tasksapp.recurring.handlers.sync_member",
        period=timedelta(days=1),
        slices=slices,
        epoch=now + timedelta(hours=1),
    )
    began, jobs = time.perf_counter(), 0
    for index in range(slices):
        jobs += slice_plan(task=task, period=0, slice_index=index, now=now).jobs_planned
    return time.perf_counter() - began, jobs


def in_batches(action, ids: list[int], size: int):
    from tasksapp.recurring.services import MemberBatch

    members = jobs = 0
    for start in range(0, len(ids), size):
        done: MemberBatch = action(member_ids=ids[start : start + size])
        members, jobs = members + done.members, jobs + done.jobs
    return members, jobs


def churn(population: int, slices: int, args) -> dict:
    from django.db import connection

    from tasksapp.engine.models import Job, JobState
    from tasksapp.recurring.models import Member
    from tasksapp.recurring.services import (
        member_activate_many,
        member_deactivate_many,
        member_delete,
        member_delete_many,
    )

    plan_s, jobs = plan_period(slices)
    connection.cursor().execute("VACUUM ANALYZE")
    print(f"  {population:,} members, {slices} slices: {jobs:,} jobs planned in {plan_s:.1f} s")
    ids = list(Member.objects.values_list("id", flat=True))
    chosen = random.Random(args.seed).sample(ids, round(population * CHURN))
    singles, chosen = chosen[: args.singles], chosen[args.singles :]
    wall, cpu, _ = timed(lambda: [member_delete(member=Member(id=i)) for i in singles])
    single = {"calls": len(singles), "wall_ms": wall * 1000 / len(singles)}
    single["cpu_ms"] = cpu * 1000 / len(singles)
    print(f"  member_delete one by one: {single['wall_ms']:.2f} ms a call")
    passes = []
    left = len(singles)  # their jobs were cancelled one by one
    for name, action, cancelled in (
        ("member_deactivate_many", member_deactivate_many, left + len(chosen)),
        ("member_activate_many", member_activate_many, left),
        ("member_delete_many", member_delete_many, left + len(chosen)),
    ):
        wall, cpu, (members, moved) = timed(lambda a=action: in_batches(a, chosen, args.batch))
        passes.append(
            {"call": name, "members": members, "jobs": moved, "wall_s": wall, "cpu_s": cpu}
        )
        assert members == moved == len(chosen), (name, members, moved)
        assert Job.objects.filter(state=JobState.CANCELLED).count() == cancelled, name
        print(f"  {name}: {members:,} members, {moved:,} jobs in {wall:.2f} s (CPU {cpu:.2f} s)")
    return {
        "population": population,
        "slices": slices,
        "churned": len(chosen),
        "plan_s": plan_s,
        "single": single,
        "passes": passes,
    }


def run(args) -> list[dict]:
    runs = []
    for population in sorted(args.populations):
        for slices in args.slices:
            with BenchDatabase("tempo_bench_churn") as db, db.connect() as conn:
                os.environ["DATABASE_URL"] = db.url
                os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")
                import django
                from django.db import connections

                django.setup()
                connections["default"].settings_dict["NAME"] = db.name
                print(f"filling {population:,} members")
                fill(conn, 0, population)
                try:
                    runs.append(churn(population, slices, args))
                finally:
                    connections.close_all()
    return runs


def render(args, data: dict) -> str:
    rows = []
    for r in data["runs"]:
        passes = {p["call"]: p for p in r["passes"]}
        delete, single = passes["member_delete_many"], r["single"]
        rows.append(
            {
                "members": f"{r['population']:,}",
                "slices": r["slices"],
                "churned": f"{r['churned']:,}",
                "one by one, ms a call (CPU)": f"{single['wall_ms']:.1f} ({single['cpu_ms']:.2f})",
                "one by one, all churned (s)": f"{single['wall_ms'] * r['churned'] / 1000:,.0f}",
                "deactivate_many (s)": f"{passes['member_deactivate_many']['wall_s']:.1f}",
                "activate_many (s)": f"{passes['member_activate_many']['wall_s']:.1f}",
                "delete_many (s) (CPU)": f"{delete['wall_s']:.1f} ({delete['cpu_s']:.2f})",
                "delete, ms a member": f"{delete['wall_s'] * 1000 / r['churned']:.2f}",
            }
        )
    m = data["machine"]
    return f"""{ANCHOR}
{SECTION}

30 % of a population, chosen at random, deactivated, activated again and deleted by the
batch (`member_deactivate_many`, `member_activate_many`, `member_delete_many`:
{args.batch:,} ids a call, 5,000 a statement); a daily task has every slice of its first
period planned ahead, one waiting job per member, so each pass cancels or restores one job
per member (checked). Before that, {args.singles} other members are deleted one call each
(`member_delete`); "all churned" is that rate times the members churned. CPU is the
bench process's (Python's); the rest is the database's.

    .venv/bin/{data["command"].replace(" --no-doc", "")}

Latest: {data["date"][:16].replace("T", " ")} UTC, {m["cores"]} cores, {m["memory_gib"]} GiB,
Python {m["python"]}, {data["postgres"]}; the machine was shared.

{table(rows, list(rows[0]))}
{before(data)}{phase_lookup(data)}"""


def before(data: dict) -> str:
    """The single call before and after the batch statements, measured apart (the
    results file's `single_calls`, written by hand: the former code is in git only)."""
    calls = data.get("single_calls")
    if not calls:
        return ""
    rows = [
        {
            "code": c["code"],
            "members": f"{c['members']:,}",
            "slices": c["slices"],
            "ms a call": f"{c['wall_ms']:.1f}",
            "CPU ms a call": f"{c['cpu_ms']:.2f}",
            "statements": c["statements"],
        }
        for c in calls
    ]
    return f"""
One `member_delete` a call, the former code beside this one, in one sitting
({calls[0]["date"]}; {calls[0]["note"]}):

{table(rows, list(rows[0]))}

The former call read every slice plan with jobs pending and cancelled job by job, so its
cost grew with the slices planned; the batch statement finds each job by its key through
the member's slice, and its cost stays with the members and their jobs. The spread
between the rows of the first table is mostly the shared machine's (the same single call
took 4.6 to 29 ms in one run).
"""


def phase_lookup(data: dict) -> str:
    """The batch passes before and after the statements looked each member up at its
    phase in each task (the results file's `phase_lookup`, written by hand from two runs
    of the command: the former code is in git only)."""
    found = data.get("phase_lookup")
    if not found:
        return ""
    rows = []
    for r in found["runs"]:
        passes = {p["call"]: p["wall_s"] for p in r["passes"]}
        rows.append(
            {
                "code": r["code"],
                "members": f"{r['population']:,}",
                "slices": r["slices"],
                "one by one, ms a call": f"{r['single']['wall_ms']:.1f}",
                "deactivate_many (s)": f"{passes['member_deactivate_many']:.1f}",
                "activate_many (s)": f"{passes['member_activate_many']:.1f}",
                "delete_many (s)": f"{passes['member_delete_many']:.1f}",
            }
        )
    return f"""
Each member's jobs looked up at its own phase in every task, and at its phase in each
task (an audience task's shifted or random phase, read from the member's audience-member
rows in the same statement), the same command twice in one sitting ({found["date"]};
{found["note"]}):

    .venv/bin/{found["command"]}

{table(rows, list(rows[0]))}

The task without audience costs what it did: the statements join its plans to their task
once and look its members up in its grids alone.
"""


def update_doc(section: str) -> None:
    """Replace the section, or add it before the next bench's (bench/graphs)."""
    text = DOC.read_text()
    own = re.escape(f"{ANCHOR}\n{SECTION}")
    pattern = re.compile(own + r".*?(?=\n<a id=|\n## |\Z)", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section.rstrip("\n") + "\n", text, count=1)
    else:
        text = text.replace(NEXT, section.rstrip("\n") + "\n\n" + NEXT, 1)
    DOC.write_text(text)


def main() -> None:
    args = parse()
    if args.doc_only:
        data = json.loads((RESULTS / "planning-churn.json").read_text())
        update_doc(render(args, data))
        print(f"updated: {DOC.relative_to(ROOT)}")
        return
    runs = run(args)
    data = {
        "command": " ".join(["python -m bench.planning.churn", *sys.argv[1:]]),
        "postgres": postgres_version(),
        "runs": runs,
    }
    path = write_json("planning-churn", data)
    data = json.loads(path.read_text())
    print(f"results: {path.relative_to(ROOT)}")
    if not args.no_doc:
        update_doc(render(args, data))
        print(f"updated: {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
