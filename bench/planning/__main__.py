"""Probabilistic planning: the cost of planning one slice, and how even the load is.

    python -m bench.planning [--sizes 1000000 10000000] [--slice-members 33333] [--repeats 3]

1. Slice planning against a fresh database of its own (tempo_bench_planning_…, dropped at
   the end): members are filled with set-based SQL (generate_series, golden-ratio phases,
   as `manage.py demo_members` would give them), then `slice_plan` — the service the beat
   task runs — plans slices of ~33,000 members: 1/30 of 1M and 1/300 of 10M. The claim
   under test: the cost follows the slice, not the member count.
2. Evenness, pure arithmetic over phases (no database): 1,000,000 members of a daily task,
   members starting per second and per minute over the day, peak/mean, for the golden-
   ratio and the random strategy, without churn, after 30 % churn (deleted at random and
   replaced by as many new members), and after 30 % deletions. A plot of the load over
   the day goes to docs/images/planning-load.png.

Results: bench/results/planning.json and the "Planning" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta

from bench.common import ROOT, BenchDatabase, machine, table, write_json
from tasksapp.recurring import phases

DOC = ROOT / "docs" / "BENCHMARKS.md"
PLOT = ROOT / "docs" / "images" / "planning-load.png"
SECTION = "## Planning (`bench/planning`)"
FILL_CHUNK = 500_000
DAY_SECONDS = 86_400
EVENNESS_MEMBERS = 1_000_000
SLICE_SCAN = "SELECT id FROM tasksapp_member m WHERE m.active AND m.phase >= %s AND m.phase < %s"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--slice-members", type=int, default=33_333)
    parser.add_argument("--repeats", type=int, default=5, help="slices timed per size")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-doc", action="store_true", help="do not touch BENCHMARKS.md")
    return parser.parse_args()


# --- slice planning against PostgreSQL ------------------------------------------------------


def fill(conn, start: int, stop: int) -> dict:
    """Members start..stop-1 in chunks, with a live progress line (Django set up)."""
    from tasksapp.recurring import sql as planning_sql

    began = time.perf_counter()
    # The fill hands out ordinals itself: it takes the ones a deleted member freed, too.
    conn.execute("DELETE FROM tasksapp_freeordinal WHERE ordinal >= %s", [start])
    for chunk in range(start, stop, FILL_CHUNK):
        conn.execute(
            planning_sql.INSERT_GOLDEN_MEMBERS,
            {"prefix": "member-", "start": chunk, "stop": min(chunk + FILL_CHUNK, stop)},
        )
        done = min(chunk + FILL_CHUNK, stop)
        rate = (done - start) / (time.perf_counter() - began)
        print(f"\r  members {done:>12,} / {stop:,}  ({rate:,.0f} rows/s)", end="", flush=True)
    print()
    conn.execute("VACUUM ANALYZE tasksapp_member")
    seconds = time.perf_counter() - began
    return {"rows": stop - start, "seconds": seconds, "rows_per_s": (stop - start) / seconds}


def time_slices(size: int, slices: int, repeats: int) -> dict:
    """Plan `repeats` slices of a fresh task through the service and time each call."""
    from django.db import connection

    from tasksapp.recurring.services import recurring_task_create, slice_plan

    epoch = datetime(2030, 1, 1, tzinfo=UTC)  # far ahead: every member is planned
    task = recurring_task_create(
        name=f"bench-{size}",
        handler="tasksapp.recurring.handlers.sync_member",
        period=timedelta(days=30),
        slices=slices,
        epoch=epoch,
    )
    runs, before = [], epoch - timedelta(days=1)
    for index in range(repeats):
        slice_index = index * (slices // repeats)
        scan_ms = time_scan(slice_index + 1, slices)
        began = time.perf_counter()
        plan = slice_plan(task=task, period=0, slice_index=slice_index, now=before)
        seconds = time.perf_counter() - began
        runs.append(
            {
                "slice": slice_index,
                "jobs": plan.jobs_planned,
                "seconds": seconds,
                "scan_ms": scan_ms,
            }
        )
        print(
            f"  {size:,} members, slice {slice_index}/{slices}: {plan.jobs_planned:,} jobs"
            f" in {seconds:.2f} s ({plan.jobs_planned / seconds:,.0f} rows/s;"
            f" member scan alone {scan_ms:.0f} ms)"
        )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + SLICE_SCAN, [0.0, 1 / slices])
        scan = cursor.fetchone()[0]
        cursor.execute("TRUNCATE tasksapp_job CASCADE")  # graph runs refer to jobs
    median = statistics.median(r["seconds"] for r in runs)
    jobs = statistics.median(r["jobs"] for r in runs)
    return {
        "members": size,
        "slices": slices,
        "runs": runs,
        "median_s": median,
        "median_scan_ms": statistics.median(r["scan_ms"] for r in runs),
        "median_jobs": jobs,
        "rows_per_s": jobs / median,
        "scan": scan.strip(),
    }


def time_scan(slice_index: int, slices: int) -> float:
    """The member scan of MEMBER_SLICE alone, on a slice not read yet (ms)."""
    from django.db import connection

    with connection.cursor() as cursor:
        began = time.perf_counter()
        cursor.execute(
            f"SELECT count(*) FROM ({SLICE_SCAN}) AS slice",
            [slice_index / slices, (slice_index + 1) / slices],
        )
        cursor.fetchone()
        return (time.perf_counter() - began) * 1000


def time_member_ops(size: int) -> dict:
    """One member created (ordinal, catch-up) and deleted (cancellation) at this size."""
    from tasksapp.recurring.services import member_create, member_delete

    began = time.perf_counter()
    member = member_create(external_id=f"late-{size}")
    created = time.perf_counter() - began
    began = time.perf_counter()
    member_delete(member=member)
    deleted = time.perf_counter() - began
    return {"members": size, "create_ms": created * 1000, "delete_ms": deleted * 1000}


def planning_costs(args) -> tuple[list[dict], list[dict], list[dict]]:
    with BenchDatabase("tempo_bench_planning") as db, db.connect() as conn:
        os.environ["DATABASE_URL"] = db.url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")
        import django
        from django.db import connections

        django.setup()
        fills, costs, ops = [], [], []
        have = 0
        try:
            for size in sorted(args.sizes):
                print(f"filling {size:,} members")
                fills.append({"members": size, **fill(conn, have, size)})
                have = size
                slices = max(1, round(size / args.slice_members))
                costs.append(time_slices(size, slices, args.repeats))
                ops.append(time_member_ops(size))
        finally:
            connections.close_all()
    return fills, costs, ops


# --- evenness: pure arithmetic over phases --------------------------------------------------


def scenarios(members: int, seed: int) -> dict[str, dict[str, list[float]]]:
    """Phases per strategy and scenario. Churn deletes 30 % at random and creates as
    many members; golden hands the freed ordinals to the new members (as member_create
    does), `golden, no reuse` would append new ordinals instead."""
    rng = random.Random(seed)
    gone = set(rng.sample(range(members), members * 3 // 10))
    kept = [n for n in range(members) if n not in gone]
    fresh = range(members, members + len(gone))
    uniform = [rng.random() for _ in range(members)]
    replacements = [rng.random() for _ in gone]
    golden_all = [phases.golden_phase(n) for n in range(members)]
    golden_kept = [golden_all[n] for n in kept]
    return {
        "golden": {
            "none": golden_all,
            "30 % replaced": golden_kept + [golden_all[n] for n in sorted(gone)],
            "30 % deleted": golden_kept,
        },
        "golden, no reuse": {
            "30 % replaced": golden_kept + [phases.golden_phase(n) for n in fresh],
        },
        "random": {
            "none": uniform,
            "30 % replaced": [uniform[n] for n in kept] + replacements,
            "30 % deleted": [uniform[n] for n in kept],
        },
    }


def evenness(members: int, seed: int) -> tuple[list[dict], dict[str, list[int]]]:
    rows, per_minute = [], {}
    for strategy, cases in scenarios(members, seed).items():
        for churn, values in cases.items():
            seconds = phases.load_profile(values, buckets=DAY_SECONDS)
            minutes = phases.load_profile(values, buckets=DAY_SECONDS // 60)
            rows.append(
                {
                    "strategy": strategy,
                    "churn": churn,
                    "members": len(values),
                    "mean_per_s": len(values) / DAY_SECONDS,
                    "peak_per_s": max(seconds),
                    "peak_mean_s": phases.peak_to_mean(seconds),
                    "peak_per_min": max(minutes),
                    "peak_mean_min": phases.peak_to_mean(minutes),
                    "idle_seconds": seconds.count(0),
                }
            )
            if churn == "none":
                per_minute[strategy] = minutes
                per_minute[f"{strategy} (per second)"] = seconds
    return rows, per_minute


def plot(per_minute: dict[str, list[int]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (day, zoom) = plt.subplots(2, 1, figsize=(10, 7))
    for strategy, color in (("random", "tab:orange"), ("golden", "tab:blue")):
        day.plot(
            [m / 60 for m in range(len(per_minute[strategy]))],
            per_minute[strategy],
            color=color,
            linewidth=0.7,
            label=strategy,
        )
        window = per_minute[f"{strategy} (per second)"][12 * 3600 : 12 * 3600 + 600]
        zoom.step(
            range(len(window)), window, where="post", color=color, linewidth=0.8, label=strategy
        )
    day.set(
        title=f"{EVENNESS_MEMBERS:,} members of a daily task: runs per minute",
        xlabel="hour of the day",
        ylabel="runs per minute",
        xlim=(0, 24),
    )
    zoom.set(title="runs per second, 12:00 to 12:10", xlabel="second", ylabel="runs per second")
    for axis in (day, zoom):
        axis.legend(loc="upper right")
        axis.grid(alpha=0.3)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    plt.close(fig)


# --- report --------------------------------------------------------------------------------


def render(args, data: dict) -> str:
    costs = table(
        [
            {
                "members": f"{c['members']:,}",
                "slices": c["slices"],
                "jobs per slice": f"{c['median_jobs']:,.0f}",
                "median time (s)": c["median_s"],
                "member scan (ms)": c["median_scan_ms"],
                "rows/s": f"{c['rows_per_s']:,.0f}",
                "runs (s)": ", ".join(f"{r['seconds']:.2f}" for r in c["runs"]),
            }
            for c in data["planning"]
        ],
        [
            "members",
            "slices",
            "jobs per slice",
            "median time (s)",
            "member scan (ms)",
            "rows/s",
            "runs (s)",
        ],
    )
    fills = table(
        [
            {
                "members": f"{f['members']:,}",
                "rows added": f"{f['rows']:,}",
                "seconds": f["seconds"],
                "rows/s": f"{f['rows_per_s']:,.0f}",
            }
            for f in data["fill"]
        ],
        ["members", "rows added", "seconds", "rows/s"],
    )
    ops = table(
        [
            {
                "members": f"{o['members']:,}",
                "member_create (ms)": o["create_ms"],
                "member_delete (ms)": o["delete_ms"],
            }
            for o in data["member_ops"]
        ],
        ["members", "member_create (ms)", "member_delete (ms)"],
    )
    even = table(
        [
            {
                "strategy": r["strategy"],
                "churn": r["churn"],
                "members": f"{r['members']:,}",
                "mean/s": r["mean_per_s"],
                "peak/s": r["peak_per_s"],
                "peak/mean (s)": r["peak_mean_s"],
                "peak/min": r["peak_per_min"],
                "peak/mean (min)": r["peak_mean_min"],
                "idle seconds": f"{r['idle_seconds']:,}",
            }
            for r in data["evenness"]
        ],
        [
            "strategy",
            "churn",
            "members",
            "mean/s",
            "peak/s",
            "peak/mean (s)",
            "peak/min",
            "peak/mean (min)",
            "idle seconds",
        ],
    )
    sizes = " ".join(str(s) for s in args.sizes)
    m = data["machine"]
    return f"""{SECTION}

Command: `.venv/bin/python -m bench.planning --sizes {sizes} --slice-members \
{args.slice_members} --repeats {args.repeats} --seed {args.seed}` (results in
`bench/results/planning.json`). Run on {data["date"]}, {m["cores"]} cores, {m["memory_gib"]} GiB,
Python {m["python"]}, {data["postgres"]}; the machine was shared with other work.

**Planning one slice.** A database of the bench's own is filled with members by set-based
SQL (`generate_series`, golden-ratio phases), vacuumed and analysed; then `slice_plan` — the
service the beat task calls — plans {args.repeats} slices of a 30-day task whose slice count
makes each slice about {args.slice_members:,} members: 1/30 of 1M, 1/300 of 10M. Times are
the whole service call (task row lock, plan row, one `INSERT … SELECT` of the jobs with the
jobs table's NOTIFY trigger, commit). The member scan is
`{data["planning"][-1]["scan"]}`.

{costs}

Filling the members (not part of planning; four indexes maintained during the insert):

{fills}

One member created (ordinal, phase, jobs in the slices already planned) and deleted
(ordinal freed, waiting jobs cancelled) at each size:

{ops}

**Evenness.** {EVENNESS_MEMBERS:,} members of a daily task: how many start in each second and
each minute of the day; peak/mean is the busiest bucket over the average one (1.00 is
perfectly even). Churn: 30 % of the members deleted at random and as many created ("replaced"),
or only deleted. `golden, no reuse` is the golden-ratio sequence without handing freed
ordinals to new members, for comparison; the service reuses them.

{even}

![Runs per minute and per second over a day, golden vs random](images/planning-load.png)

{interpretation(data)}
"""


def interpretation(data: dict) -> str:
    costs = data["planning"]
    small, large = costs[0], costs[-1]
    ratio = large["median_s"] / small["median_s"]
    month_day = large["members"] / 30 / large["rows_per_s"]
    rows = {(r["strategy"], r["churn"]): r for r in data["evenness"]}
    golden, uniform = rows[("golden", "none")], rows[("random", "none")]
    deleted, random_deleted = rows[("golden", "30 % deleted")], rows[("random", "30 % deleted")]
    no_reuse = rows[("golden, no reuse", "30 % replaced")]
    return f"""What it shows:

- Planning a slice costs what the slice costs, not what the population costs. For the same
  ~{small["median_jobs"]:,.0f} jobs, {large["members"]:,} members took {ratio:.2f}x the time of
  {small["members"]:,} ({large["median_s"]:.2f} s against {small["median_s"]:.2f} s), not 10x. The
  member scan itself — one range of the partial index on `phase` — took
  {large["median_scan_ms"]:.0f} ms against {small["median_scan_ms"]:.0f} ms; nearly all the rest is
  inserting the jobs (the jobs table's indexes and NOTIFY trigger), which depends on the
  slice alone, and the runs vary as much between slices of one size as between the sizes
  (the machine was shared). At the 10M rate, one day of a monthly task over 10M members
  (333,333 jobs) is about {month_day:.0f} s of planning.
- Golden-ratio phases are far more even than random ones. The busiest second of the day
  carries {golden["peak_mean_s"]:.2f}x the mean with golden phases against
  {uniform["peak_mean_s"]:.2f}x with random ones; the busiest minute
  {golden["peak_mean_min"]:.3f}x against {uniform["peak_mean_min"]:.3f}x. Random phases leave
  {uniform["idle_seconds"]:,} seconds of the day without any start, golden ones
  {golden["idle_seconds"]:,}.
- Churn: reusing freed ordinals gives the replacing members exactly the phases that were
  freed, so after 30 % replaced the golden load is identical to the load without churn.
  Appending new ordinals instead would leave the holes ({no_reuse["peak_mean_s"]:.2f}x per
  second). Deleting 30 % without replacement thins the golden sequence at random
  ({deleted["peak_mean_s"]:.2f}x per second, random phases
  {random_deleted["peak_mean_s"]:.2f}x), and the next members created fill those holes
  first. Random phases stay random through churn: replacing members changes nothing, and
  fewer members only widen the relative spread."""


def reflow(markdown: str, width: int = 92) -> str:
    """Re-wrap prose paragraphs and bullets; tables, images and headings stay as they are."""
    blocks = []
    for block in markdown.split("\n\n"):
        if block.startswith(("|", "!", "#")):
            blocks.append(block)
            continue
        items = re.split(r"\n(?=- )", block)
        blocks.append(
            "\n".join(
                textwrap.fill(
                    " ".join(item.split()),
                    width,
                    break_on_hyphens=False,
                    break_long_words=False,
                    subsequent_indent="  " if item.startswith("- ") else "",
                )
                for item in items
            )
        )
    return "\n\n".join(blocks)


def update_doc(section: str) -> None:
    text = DOC.read_text()
    pattern = re.compile(re.escape(SECTION) + r".*?(?=\n## |\Z)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{DOC}: section {SECTION!r} not found")
    DOC.write_text(pattern.sub(lambda _: section.rstrip("\n") + "\n", text, count=1))


def postgres_version() -> str:
    import psycopg

    from bench.common import SERVER_URL

    with psycopg.connect(f"{SERVER_URL}/postgres") as conn:
        return "PostgreSQL " + conn.execute("SHOW server_version").fetchone()[0].split()[0]


def main() -> None:
    args = parse()
    print(f"evenness over a day, {EVENNESS_MEMBERS:,} members")
    rows, per_minute = evenness(EVENNESS_MEMBERS, args.seed)
    plot(per_minute)
    fills, costs, ops = planning_costs(args)
    data = {
        "command": " ".join(["python -m bench.planning", *sys.argv[1:]]),
        "postgres": postgres_version(),
        "fill": fills,
        "planning": costs,
        "member_ops": ops,
        "evenness": rows,
    }
    path = write_json("planning", data)
    data = {
        **data,
        "date": datetime.now(UTC).strftime("%a %b %d %H:%M UTC %Y"),
        "machine": machine(),
    }
    print(f"results: {path.relative_to(ROOT)}")
    if not args.no_doc:
        update_doc(reflow(render(args, data)))
        print(f"updated: {DOC.relative_to(ROOT)} and {PLOT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
