"""One run of ``rocmlab health``: the tier's phases, each check in its own process under its
budget, then the checks made from what they found, and the state saved for the next run."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from rocmlab.common.hostread import HostRead
from rocmlab.doctor.checks_system import check_host_files
from rocmlab.doctor.model import ERROR, Result, passed, warned
from rocmlab.health import state as state_file
from rocmlab.health.context import BOOT_ID, HealthContext
from rocmlab.health.runner import Done, Task, run_tasks
from rocmlab.health.table import STATEFUL, Spec, phases, tier_budget


@dataclass
class CheckRun:
    """A check's result (named) with its tier, how long it took and its budget (None for the
    checks the run makes itself)."""

    result: Result
    tier: int
    seconds: float | None = None
    budget: float | None = None


@dataclass
class Run:
    """What a run found, and when."""

    tier: int
    checks: list[CheckRun]
    started: float  # time.time()
    finished: float
    budget: float

    @property
    def results(self) -> list[Result]:
        return [check.result for check in self.checks]

    @property
    def duration(self) -> float:
        return self.finished - self.started


def _work(spec: Spec, h: HealthContext, deadline: float) -> dict[str, Any]:
    """In the check's process: run it, and send back its result, the state it wants kept and
    the host files it could not read whole."""
    outcome = spec.work(h, deadline)
    unread = [
        {
            "path": str(read.path),
            "error": read.error,
            "refused": read.refused,
            "truncated": read.truncated,
            "size": len(read.data or b""),
        }
        for read in h.doctor.unread.values()
    ]
    return {"result": outcome.result.as_dict(), "state": outcome.state, "unread": unread}


def _result(spec: Spec, done: Done) -> Result:
    if done.cut:
        return Result(
            ERROR,
            f"stopped after {done.seconds:.1f} s: the check did not finish within its budget "
            f"({spec.budget:g} s); a read or command hangs (a GPU off the bus, a dead mount, a "
            "command waiting on the GPU)",
            "run it again; if it is cut again, `rocmlab doctor` as root shows which read hangs: "
            "drain the node and reboot it",
        )
    if done.error:
        return Result(
            ERROR,
            f"the check crashed: {done.error}",
            "this is a rocmlab bug: report it with this line; the other checks still ran",
        )
    payload = done.payload if isinstance(done.payload, dict) else {}
    doc = payload.get("result")
    if not isinstance(doc, dict):
        return Result(ERROR, "the check ended without a result", "this is a rocmlab bug: report it")
    return Result(doc["status"], doc["saw"], doc["fix"], list(doc["evidence"]))


def _unread(payload: Any) -> dict[str, HostRead]:
    found = {}
    for item in (payload or {}).get("unread", []):
        data = bytes(item["size"]) if item["truncated"] else None
        found[item["path"]] = HostRead(
            Path(item["path"]), data, item["truncated"], item["error"], item["refused"]
        )
    return found


def run(h: HealthContext, state_dir: Path, tier: int) -> Run:
    """Run ``tier`` (and the tiers below) on the host ``h`` describes."""
    started = time.time()
    start = time.monotonic()
    budget = tier_budget(tier)
    end = start + budget
    loaded = state_file.load(state_dir)
    h.boot_id = (h.doctor.read(BOOT_ID) or "").strip()
    h.previous = loaded.checks
    checks: list[CheckRun] = []
    records: dict[str, dict[str, Any]] = {}
    unread: dict[str, HostRead] = dict(h.doctor.unread)
    for _phase, phase_budget, specs in phases(tier):
        phase_end = min(time.monotonic() + phase_budget, end)
        at = time.time()
        tasks = [Task(spec.name, spec.budget, partial(_work, spec, h)) for spec in specs]
        done = run_tasks(tasks, phase_end)
        for spec in specs:
            item = done[spec.name]
            result = _result(spec, item)
            result.name = spec.name
            checks.append(CheckRun(result, spec.tier, round(item.seconds, 3), spec.budget))
            if item.payload is None:
                continue
            unread.update(_unread(item.payload))
            kept = item.payload.get("state")
            if spec.name in STATEFUL and isinstance(kept, dict):
                records[spec.name] = state_file.record(kept, h.boot_id, at)
    files = check_host_files(replace(h.doctor, unread=unread))
    files.name = "host_files"
    checks.append(CheckRun(files, 0))
    saved = _save(state_dir, records, loaded)
    saved.name = "health_state"
    checks.append(CheckRun(saved, 0))
    return Run(tier, checks, started, time.time(), budget)


def _save(state_dir: Path, records: dict[str, dict[str, Any]], loaded: state_file.Loaded) -> Result:
    try:
        state_file.save(state_dir, records)
    except OSError as exc:
        return warned(
            f"cannot save the state in {state_dir} ({exc.strerror or exc}): the next run cannot "
            "tell new errors and log lines from old ones",
            "run as root (the timer and Slurm roles do), or give --state-dir a directory this "
            "account can write",
        )
    if loaded.problem:
        return warned(
            f"{loaded.problem}: taken as no earlier run (counters and log lines compared with "
            "nothing); a new state was saved",
            f"nothing to do if a crash cut the file; if it comes back, find what else writes "
            f"{state_dir}",
        )
    last = f"last run's state saved {loaded.saved}" if loaded.saved else "first run here"
    return passed(f"state saved in {state_dir / state_file.STATE_FILE} ({last})")
