#!/usr/bin/env python3
"""Which job of tools/test starts next: one queue served by N workers, longest job first.

The jobs and what is known of each (seconds of the last measured run, group, needs, when) are in
tools/test-jobs. The rules, in order:
  - a job starts only when every job it needs has ended;
  - no two jobs of one group run at the same time;
  - a job marked alone runs with nothing beside it, and starts as early as its needs allow: it
    and what it needs go first, and while it waits (for its needs, or for the running jobs to
    end) only jobs expected to end before it can start are started beside them, and the jobs
    marked first while its needs are still expected to run or another of them runs;
  - then the jobs marked first (the lint and pytest: quick to fail, no containers);
  - otherwise the longest job first, a job's length counting the jobs that wait for it.

tools/test asks once per free worker:
  schedule.py next --workers 2 --pending "a b c" --running "d=120" --done "e f" [--estimate J=S]
prints the job to start now, or nothing (wait for a running job to end). Also:
  schedule.py plan JOB...      the jobs a run of JOB... needs, needs added, in start order
  schedule.py seconds JOB      the seconds tools/test-jobs gives JOB
  schedule.py needs JOB        the jobs JOB needs
  schedule.py simulate [--workers N] [JOB...]   the run as the table predicts it
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

TABLE = Path(__file__).resolve().parent / "test-jobs"
# A job the table does not know (a scenario added since the last measured run).
UNKNOWN_SECONDS = 600


@dataclass(frozen=True)
class Job:
    name: str
    seconds: float = UNKNOWN_SECONDS
    group: str | None = None
    needs: tuple[str, ...] = ()
    alone: bool = False
    first: bool = False


@dataclass
class Table:
    jobs: dict[str, Job] = field(default_factory=dict)

    def get(self, name: str) -> Job:
        return self.jobs.get(name) or Job(name)


class TableError(ValueError):
    pass


def parse_table(text: str, source: str = "tools/test-jobs") -> Table:
    """The table's rows: job, seconds, group, needs (comma-separated), when (alone, first); "-"
    for none."""
    table = Table()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cells = line.split()
        where = f"{source} line {number}"
        if len(cells) != 5:
            raise TableError(
                f"{where}: {len(cells)} column(s) in {raw.strip()!r}; want 5: "
                "job seconds group needs when"
            )
        name, seconds, group, needs, alone = cells
        try:
            value = float(seconds)
        except ValueError:
            value = -1.0
        if value < 0:
            raise TableError(f"{where}: seconds {seconds!r} of {name} is not a number >= 0")
        if alone not in ("-", "alone", "first"):
            raise TableError(
                f"{where}: last column {alone!r} of {name}; want 'alone', 'first' or '-'"
            )
        if name in table.jobs:
            raise TableError(f"{where}: {name} is listed twice")
        table.jobs[name] = Job(
            name=name,
            seconds=value,
            group=None if group == "-" else group,
            needs=() if needs == "-" else tuple(n for n in needs.split(",") if n),
            alone=alone == "alone",
            first=alone == "first",
        )
    for job in table.jobs.values():
        for need in job.needs:
            if need not in table.jobs:
                raise TableError(f"{source}: {job.name} needs {need}, which is not listed")
    _check_acyclic(table, source)
    return table


def _check_acyclic(table: Table, source: str) -> None:
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise TableError(f"{source}: the needs go round: " + " -> ".join([*path, name]))
        state[name] = 1
        for need in table.get(name).needs:
            visit(need, [*path, name])
        state[name] = 2

    for name in table.jobs:
        visit(name, [])


def load_table(path: Path = TABLE) -> Table:
    return parse_table(path.read_text(), str(path))


def with_needs(requested: list[str], table: Table) -> list[str]:
    """REQUESTED and every job they need, each once, needs first."""
    found: list[str] = []

    def add(name: str) -> None:
        if name in found:
            return
        for need in table.get(name).needs:
            add(need)
        found.append(name)

    for name in requested:
        add(name)
    return found


def _estimates(table: Table, estimate: dict[str, float] | None) -> dict[str, float]:
    return {name: job.seconds for name, job in table.jobs.items()} | (estimate or {})


def _seconds(name: str, seconds: dict[str, float]) -> float:
    return seconds.get(name, UNKNOWN_SECONDS)


def _length(name: str, jobs: set[str], table: Table, seconds: dict[str, float]) -> float:
    """A job's seconds plus the longest chain of JOBS that wait for it."""
    after = [
        _length(other, jobs, table, seconds) for other in jobs if name in table.get(other).needs
    ]
    return _seconds(name, seconds) + max(after, default=0)


def _needed_by(name: str, table: Table, seen: set[str] | None = None) -> set[str]:
    """Every job NAME needs, directly or not."""
    seen = set() if seen is None else seen
    for need in table.get(name).needs:
        if need not in seen:
            seen.add(need)
            _needed_by(need, table, seen)
    return seen


def order(jobs: list[str], table: Table, estimate: dict[str, float] | None = None) -> list[str]:
    """JOBS in the order of preference: the jobs marked alone and what they need, then those
    marked first, then the longest first (a job's length counting the jobs that wait for it),
    then by name."""
    seconds = _estimates(table, estimate)
    names = set(jobs)
    urgent: set[str] = set()
    for name in jobs:
        if table.get(name).alone:
            urgent |= {name} | (_needed_by(name, table) & names)
    return sorted(
        jobs,
        key=lambda n: (
            n not in urgent,
            not table.get(n).first,
            -_length(n, names, table, seconds),
            n,
        ),
    )


def pick(
    pending: list[str],
    running: dict[str, float],
    done: set[str],
    workers: int,
    table: Table,
    estimate: dict[str, float] | None = None,
) -> str | None:
    """The job of PENDING to start now on a free worker, or None: wait until one of RUNNING
    (job -> seconds it has run) ends. DONE: the jobs that have ended, passed or failed."""
    if len(running) >= workers or any(table.get(name).alone for name in running):
        return None
    seconds = _estimates(table, estimate)
    busy_groups = {table.get(name).group for name in running} - {None}
    # The running jobs' expected end, from now.
    drained = max(
        (max(_seconds(name, seconds) - ran, 0.0) for name, ran in running.items()), default=0.0
    )
    waiting_alone = [name for name in order(pending, table, estimate) if table.get(name).alone]
    reserved: set[str] = set()
    if waiting_alone:
        first = waiting_alone[0]
        reserved = {first} | _needed_by(first, table)
    # What the job marked alone still waits for among the running jobs (its image being built).
    needs_left = max(
        (max(_seconds(n, seconds) - ran, 0.0) for n, ran in running.items() if n in reserved),
        default=0.0,
    )
    for name in order(pending, table, estimate):
        job = table.get(name)
        if any(need not in done for need in job.needs):
            continue
        if job.group is not None and job.group in busy_groups:
            continue
        if job.alone and running:
            continue
        # While a job marked alone waits, only its needs, a job that ends before the running
        # ones do (so before it can start), or a job marked first while one of its needs is
        # still expected to run or another job marked first runs, start.
        fits = _seconds(name, seconds) <= drained or (
            job.first and (needs_left > 0 or any(table.get(n).first for n in running))
        )
        if reserved and name not in reserved and not fits:
            continue
        return name
    return None


def simulate(
    jobs: list[str],
    table: Table,
    workers: int = 2,
    estimate: dict[str, float] | None = None,
) -> tuple[float, list[tuple[str, float, float]]]:
    """The run as the table predicts it: (its seconds, [(job, start, end)] in start order)."""
    seconds = _estimates(table, estimate)
    pending = with_needs(jobs, table)
    running: dict[str, float] = {}  # job -> start
    done: set[str] = set()
    timeline: list[tuple[str, float, float]] = []
    now = 0.0
    while pending or running:
        while True:
            name = pick(
                pending, {n: now - s for n, s in running.items()}, done, workers, table, estimate
            )
            if name is None:
                break
            pending.remove(name)
            running[name] = now
            timeline.append((name, now, now + _seconds(name, seconds)))
        if not running:
            raise RuntimeError(f"nothing can start: {pending}")  # a need outside the run
        name = min(running, key=lambda n: (running[n] + _seconds(n, seconds), n))
        now = running.pop(name) + _seconds(name, seconds)
        done.add(name)
    return now, timeline


def _names(text: str) -> list[str]:
    return [name for name in text.replace(",", " ").split() if name]


def _pairs(text: str, what: str) -> dict[str, float]:
    pairs: dict[str, float] = {}
    for item in _names(text):
        name, _, value = item.partition("=")
        try:
            pairs[name] = float(value)
        except ValueError:
            raise SystemExit(f"schedule.py: {what} {item!r}: want JOB=SECONDS") from None
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    sub = parser.add_subparsers(dest="command", required=True)
    nxt = sub.add_parser("next")
    nxt.add_argument("--workers", type=int, default=2)
    nxt.add_argument("--pending", default="")
    nxt.add_argument("--running", default="", help="JOB=SECONDS_RUN ...")
    nxt.add_argument("--done", default="")
    nxt.add_argument("--estimate", default="", help="JOB=SECONDS ... instead of the table's")
    plan = sub.add_parser("plan")
    plan.add_argument("jobs", nargs="*")
    plan.add_argument("--estimate", default="")
    sec = sub.add_parser("seconds")
    sec.add_argument("job")
    needs = sub.add_parser("needs")
    needs.add_argument("job")
    sim = sub.add_parser("simulate")
    sim.add_argument("jobs", nargs="*")
    sim.add_argument("--workers", type=int, default=2)
    sim.add_argument("--estimate", default="")
    args = parser.parse_args(argv)
    try:
        table = load_table(args.table)
    except (OSError, TableError) as err:
        print(f"schedule.py: {err}", file=sys.stderr)
        return 2
    if args.command == "next":
        if args.workers < 1:
            print(f"schedule.py: --workers {args.workers}: want 1 or more", file=sys.stderr)
            return 2
        name = pick(
            _names(args.pending),
            _pairs(args.running, "--running"),
            set(_names(args.done)),
            args.workers,
            table,
            _pairs(args.estimate, "--estimate"),
        )
        if name:
            print(name)
    elif args.command == "plan":
        estimate = _pairs(args.estimate, "--estimate")
        print("\n".join(order(with_needs(args.jobs or list(table.jobs), table), table, estimate)))
    elif args.command == "seconds":
        print(f"{table.get(args.job).seconds:g}")
    elif args.command == "needs":
        for need in table.get(args.job).needs:
            print(need)
    else:
        total, timeline = simulate(
            args.jobs or list(table.jobs), table, args.workers, _pairs(args.estimate, "--estimate")
        )
        for name, start, end in timeline:
            print(f"{start:7.0f} {end:7.0f}  {name}")
        print(f"{total:7.0f}  whole run, {args.workers} worker(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
