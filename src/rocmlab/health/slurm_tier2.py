"""Tier 2 under Slurm, run as root by role slurm_health's Epilog and maintenance helper
(docs/health.md, "Tier 2 after a failed job, and maintenance"):

- ``after-job JOBID``: Slurm's node Epilog starts it detached after every job. It waits for the
  job's final state (``scontrol show job -o``: the node Epilog gets no exit code, Slurm gives
  SLURM_JOB_EXIT_CODE* to EpilogSlurmctld only), and only for a job that FAILED (a non-zero exit
  of its script; not cancelled, timed out, preempted, out of memory or lost with its node),
  outside the cooldown, drains the node with ``rocmlab: job_failed: ...``, runs tier 2 as the
  smoke account, and hands its report to the Slurm gate (rocmlab.health.slurm): a pass resumes
  the node only while the drain is still rocmlab's; a failure drains it with the check's reason;
- ``maintenance``: drains the node with ``rocmlab: maintenance: ...`` and asks Slurm to reboot
  it (``scontrol reboot``, no ASAP, no nextstate: Slurm's RESUME and ASAP clear the drain at
  boot, before tier 2 ran); ``--no-reboot`` only drains;
- ``after-boot``: tier 2 and the gate, when rocmlab's drain waits for tier 2 (maintenance, a
  failed job, a kernel log, RAS or replay failure: root's record says so) and the node has
  booted since it was drained; with ``--now`` (``rocmlab-slurm-maintenance --after``) at once,
  whatever drained the node. The health check wrapper starts it, and Slurm runs the health
  check once when slurmd starts after a reboot.

Every drain the runner makes is recorded by root (rocmlab.health.drains), as the gate's own.
Only the drain and resume decisions run as root. Tier 2 runs as the smoke account; its report is
read as hostile input: a regular file of that account (checked before it is opened), never
through a link, at most REPORT_LIMIT bytes, a JSON object of tier 2 with every check only a GPU
job makes. Then root runs tier 0 itself (the node's passive checks, after the account's GPU
work), and the gate decides on the two together: root's result stands for every check root ran,
the account's can add a failure but hide none (:func:`merge`). The decisions are the pure
functions here; :func:`after_job`, :func:`maintenance` and :func:`after_boot` run them with
injected commands and clock (tests/python/test_health_slurm_tier2.py).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import socket
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlab.common.hostread import (
    MIB,
    FileReplaced,
    NotRegularFile,
    read_at_most,
    read_regular,
)
from rocmlab.health import drains, slurm
from rocmlab.health.drains import Drain
from rocmlab.health.slurm import PREFIX, SlurmGateError, node_name
from rocmlab.health.state import write_atomically

REPORT_LIMIT = MIB
STATE_LIMIT = 64 * 1024
JOB_ID = re.compile(r"[1-9][0-9]{0,11}")
# Slurm 22.05's job states (squeue(1), JOB STATE CODES). FAILED: "Job terminated with non-zero
# exit code or other failure condition" - the one that says something about the node's GPUs.
TRIGGERS = frozenset({"FAILED"})
FINAL = frozenset(
    {
        "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
        "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT", "SPECIAL_EXIT",
    }
)  # fmt: skip
RUNNING = frozenset(
    {
        "COMPLETING", "RUNNING", "CONFIGURING", "PENDING", "REQUEUED", "REQUEUE_FED",
        "REQUEUE_HOLD", "RESIZING", "RESV_DEL_HOLD", "REVOKED", "SIGNALING", "STAGE_OUT",
        "STOPPED", "SUSPENDED",
    }
)  # fmt: skip
JOB_REASON = "job_failed"
MAINTENANCE_REASON = f"{PREFIX} maintenance: back in service when tier 2 passes"
STATE_FILE = "tier2-state.json"
# runuser is in /usr/sbin (util-linux); the account keeps the same PATH.
TIER2_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REPORT = "tier2.json"
# Root's own tier 0 after the account's tier 2, in root's state directory.
ROOT_REPORT = "tier2-tier0.json"
STATUS_ORDER = {"fail": 3, "error": 2, "warn": 1, "pass": 0, "skip": 0}


class Tier2Error(Exception):
    """Something this run needs could not be read or done: the node's state stays as it is."""


@dataclass(frozen=True)
class Job:
    """A job as ``scontrol show job -o ID`` describes it."""

    job_id: str
    state: str
    exit_code: int
    signal: int


def job_id(text: str) -> str:
    """A Slurm job id as this runner accepts one (it goes into a command's argument)."""
    if not isinstance(text, str) or not JOB_ID.fullmatch(text):
        raise Tier2Error(
            f"job id {text!r} is not accepted: a whole number from 1, 12 digits at most"
        )
    return text


# The fields Slurm 22.05's `scontrol show job -o` prints from UserId to ExitCode, in its order
# (src/api/job_info.c, slurm_sprint_job_info), each value one word: the user's own words (the
# job name before them; comment, work directory, command after them) can hold spaces and "=".
_JOB_FIELDS = re.compile(
    r" UserId=\S+ GroupId=\S+ MCS_label=\S+ Priority=\d+ Nice=-?\d+ Account=\S+ QOS=\S+"
    r"(?: WCKey=\S+)? JobState=(?P<state>[A-Z_]+) Reason=\S+ Dependency=\S+ Requeue=\d+"
    r" Restarts=\d+ BatchFlag=\d+ Reboot=\d+ ExitCode=(?P<code>\d{1,3}):(?P<signal>\d{1,3})(?= |$)",
    re.M,
)


def parse_job(text: str, wanted: str) -> Job:
    """The job ``wanted`` from ``scontrol show job -o`` (hostile input: bounded, the line must be
    that job's, the state one of Slurm's, ExitCode ``N:S``). The state and exit code are read
    from Slurm's own run of fields, which must appear exactly once: a job name (or any other
    text of the job's owner) that holds ``JobState=FAILED``, or the whole run of fields, is
    refused, never read as the job's state."""
    text = text[: slurm.OUTPUT_LIMIT]
    line = next((ln for ln in text.splitlines() if ln.startswith(f"JobId={wanted} ")), None)
    if line is None:
        raise Tier2Error(f"scontrol show job -o {wanted} did not describe job {wanted}")
    found = list(_JOB_FIELDS.finditer(text))
    if len(found) != 1:
        raise Tier2Error(
            f"scontrol's description of job {wanted} has {len(found) or 'no'} run(s) of the "
            "fields UserId= ... JobState= ... ExitCode=N:S; a job name or comment that holds "
            "them is refused: nothing was done"
        )
    fields = found[0]
    if fields["state"] not in FINAL | RUNNING:
        raise Tier2Error(f"scontrol's line for job {wanted} has no JobState this runner knows")
    return Job(wanted, fields["state"], int(fields["code"]), int(fields["signal"]))


def triggers(job: Job) -> tuple[bool, str]:
    """Whether the job's end calls for tier 2 on its node, and why (one line)."""
    said = f"job {job.job_id} ended {job.state} (exit {job.exit_code}:{job.signal})"
    if job.state in TRIGGERS:
        return True, f"{said}: tier 2 checks the node"
    if job.state == "COMPLETED":
        return False, f"{said}: nothing to do"
    return False, f"{said}: not the node's fault as far as Slurm tells, nothing to do"


def job_reason(job: Job) -> str:
    """The drain reason while tier 2 runs after ``job`` (it names no check: only tier 2 clears
    it)."""
    return f"{PREFIX} {JOB_REASON}: job {job.job_id} exit {job.exit_code}:{job.signal}, tier 2 runs"


def cooldown_left(last: float | None, now: float, cooldown: float) -> float:
    """Seconds until tier 2 may run again after one that started at ``last`` (0: it may now).
    A start in the future (a clock set back) counts as long ago."""
    if last is None or last > now:
        return 0.0
    return max(0.0, last + cooldown - now)


def drain_decision(node: slurm.Node, reason: str, record: Drain | None = None) -> slurm.Action:
    """Whether to drain the job's node before tier 2: only a node in service, or one rocmlab
    drained (root's ``record`` says so); an operator's drain, DOWN and FAIL stay as they are
    (tier 2 still runs, and its gate keeps them)."""
    if node.base == "DOWN" or "FAIL" in node.flags:
        return slurm.Action(slurm.NONE, f"{node.name} is {node.state}: left as it is")
    if node.drained and not slurm.ours(node, record):
        return slurm.Action(
            slurm.NONE, f"{node.name} is drained by someone else ({node.reason!r}): left as it is"
        )
    if node.drained:  # rocmlab's own drain: kept, tier 2 decides
        return slurm.Action(slurm.NONE, f"{node.name} is drained by rocmlab already: {node.reason}")
    return slurm.Action(slurm.DRAIN, f"drain {node.name}: {reason}", reason)


def _owned(path: Path, info: os.stat_result, owner: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise Tier2Error(f"{path}: refused, {NotRegularFile(info.st_mode)}; root follows no link "
                         "there")  # fmt: skip
    if info.st_uid != owner:
        raise Tier2Error(
            f"{path}: refused, owned by uid {info.st_uid}, not the smoke account's {owner}"
        )


def read_owned(path: Path, owner: int, limit: int = REPORT_LIMIT) -> bytes:
    """At most ``limit`` bytes of ``path``, a regular file of ``owner``: its owner and kind are
    checked on the name (never through a link) before it is opened, and again on what was opened
    (``O_NOFOLLOW``, the same inode), so root never opens a file of someone else's there."""
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        raise Tier2Error(f"{path}: tier 2 wrote no report") from None
    except OSError as exc:
        raise Tier2Error(f"{path}: cannot read it ({exc.strerror or exc})") from None
    _owned(path, before, owner)
    if before.st_size > limit:
        raise Tier2Error(f"{path}: refused, over {limit} bytes")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:  # replaced by a link, or removed, since the look
        raise Tier2Error(f"{path}: refused, changed while it was read ({exc.strerror})") from None
    try:
        now = os.fstat(fd)
        _owned(path, now, owner)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise Tier2Error(f"{path}: refused, replaced by another file while it was read")
        data = read_at_most(fd, limit)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Tier2Error(f"{path}: refused, over {limit} bytes")
    return data


def gpu_checks() -> tuple[str, ...]:
    """The checks only a GPU job makes (tiers 1 and 2: the smoke account's to report)."""
    from rocmlab.health.table import CHECKS

    return tuple(spec.name for spec in CHECKS if spec.tier >= 1)


def read_report(path: Path, owner: int, tier: int = 2) -> dict[str, Any]:
    """A health report as root reads it: a regular file of ``owner`` (checked before it is
    opened), never through a link, at most REPORT_LIMIT bytes, a JSON object of ``tier`` with a
    verdict and its checks, each a name and a status; tier 2's must hold every check only a GPU
    job makes. Raises Tier2Error naming the file and why."""
    data = read_owned(path, owner)
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Tier2Error(f"{path}: refused, not JSON ({str(exc)[:80]})") from None
    if not isinstance(doc, dict) or doc.get("tier") != tier or "checks" not in doc:
        raise Tier2Error(f"{path}: refused, not a tier-{tier} rocmlab health report")
    if doc.get("verdict") not in ("pass", "warn", "fail") or not isinstance(doc["checks"], list):
        raise Tier2Error(f"{path}: refused, no verdict pass, warn or fail and no checks")
    checks = doc["checks"]
    if not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and c.get("status") in STATUS_ORDER
        for c in checks
    ):
        raise Tier2Error(f"{path}: refused, a check without a name or a status of rocmlab's")
    missing = [name for name in gpu_checks() if tier == 2 and name not in checks_by_name(doc)]
    if missing:
        raise Tier2Error(f"{path}: refused, not a whole tier-2 report: no {', '.join(missing)}")
    return doc


def checks_by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's checks by name (the first of a name counts)."""
    found: dict[str, dict[str, Any]] = {}
    for check in doc["checks"]:
        found.setdefault(check["name"], check)
    return found


def merge(root: dict[str, Any], account: dict[str, Any]) -> dict[str, Any]:
    """The report the gate decides on after tier 2: root's tier-0 result for every check root
    ran, the account's for the checks only a GPU job makes, and the account's failure where it
    failed a check root passed (it can add a failure, never hide one); tier 2, its verdict
    computed here from those checks (the account's own verdict is not taken)."""
    mine = checks_by_name(root)
    theirs = checks_by_name(account)
    merged = []
    for name, check in mine.items():
        other = theirs.get(name)
        worse = other and STATUS_ORDER[other["status"]] > STATUS_ORDER[check["status"]]
        merged.append(other if worse and other["status"] == "fail" else check)
    merged += [check for name, check in theirs.items() if name not in mine]
    statuses = {check["status"] for check in merged}
    verdict = "fail" if "fail" in statuses else "warn" if statuses & {"warn", "error"} else "pass"
    return {"tier": 2, "verdict": verdict, "checks": merged}


def read_state(path: Path) -> dict[str, Any]:
    """The runner's own state (root's file): ``last_tier2`` (epoch seconds; an older version
    also kept ``maintenance_boot`` here). Anything unreadable counts as empty."""
    try:
        data = read_regular(path, STATE_LIMIT, follow_links=False)
        doc = json.loads(data[:STATE_LIMIT].decode("utf-8"))
    except (OSError, ValueError, NotRegularFile, FileReplaced):
        return {}
    return doc if isinstance(doc, dict) else {}


def write_state(path: Path, doc: dict[str, Any]) -> None:
    """Atomically, root's alone (the health state's own writer: a temporary file created
    exclusively, flushed and renamed over it, removed on failure)."""
    write_atomically(path, json.dumps(doc) + "\n", mode=0o600)


def lock(path: Path) -> int | None:
    """An exclusive lock on ``path`` (created root's, never through a link), None when another
    run holds it. The descriptor stays open for the run."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


Run = Callable[[Sequence[str]], Any]


@dataclass
class Settings:
    """What role slurm_health's templates pass (docs/health.md)."""

    node: str
    state_dir: Path
    report_dir: Path
    account: str
    account_uid: int
    rocmlab: str
    tier2_args: tuple[str, ...] = ()
    tier0_args: tuple[str, ...] = ()
    python: str = sys.executable
    cooldown: float = 3600.0
    job_wait: float = 60.0
    idle_wait: float = 600.0
    tier2_timeout: int = 900
    scontrol: str = "scontrol"


@dataclass
class Io:
    """The world: commands, the clock, sleeping, printing (tests replace them)."""

    run: Run
    now: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    say: Callable[[str], None] = print
    boot_id: Callable[[], str] = drains.this_boot


def _ok(done: Any, what: str) -> str:
    if done is None:
        raise Tier2Error(f"{what}: the command is not installed")
    if done.returncode != 0:
        raise Tier2Error(f"{what} exited {done.returncode}: {slurm._clean(done.stderr)[:200]}")
    return str(done.stdout)


def show_node(s: Settings, io: Io) -> slurm.Node:
    out = _ok(io.run([s.scontrol, "show", "node", "-o", s.node]), f"scontrol show node {s.node}")
    try:
        return slurm.parse_node(out, s.node)
    except SlurmGateError as exc:
        raise Tier2Error(str(exc)) from None


def wait_for_job(job: str, s: Settings, io: Io) -> Job:
    """The job once it has left RUNNING and COMPLETING (the Epilog itself holds it in
    COMPLETING until it returns), at most ``s.job_wait`` seconds."""
    deadline = io.now() + s.job_wait
    while True:
        out = _ok(io.run([s.scontrol, "show", "job", "-o", job]), f"scontrol show job {job}")
        found = parse_job(out, job)
        if found.state in FINAL:
            return found
        if io.now() >= deadline:
            raise Tier2Error(f"job {job} is still {found.state} after {s.job_wait:g} s")
        io.sleep(1.0)


def wait_idle(s: Settings, io: Io) -> slurm.Node:
    """The node once no job runs on it (drained: no new one starts), at most ``s.idle_wait``."""
    deadline = io.now() + s.idle_wait
    while True:
        node = show_node(s, io)
        if node.base not in ("ALLOCATED", "MIXED") and "COMPLETING" not in node.flags:
            return node
        if io.now() >= deadline:
            raise Tier2Error(
                f"{s.node} still runs jobs after {s.idle_wait:g} s; tier 2 did not run and the "
                "node stays drained (run rocmlab-slurm-maintenance --after later)"
            )
        io.sleep(2.0)


def tier2_argv(s: Settings) -> list[str]:
    """Tier 2 as the smoke account, never root, under timeout, with none of the job's or root's
    environment (runuser sets the account's HOME, SHELL, USER and LOGNAME)."""
    return [
        "env", "-i", f"PATH={TIER2_PATH}", "LANG=C.UTF-8",
        "runuser", "-u", s.account, "--", "timeout", "-k", "10", str(s.tier2_timeout),
        s.rocmlab, "health", "--tier", "2", "--state-dir", str(s.report_dir),
        "--json", str(s.report_dir / REPORT), *s.tier2_args,
    ]  # fmt: skip


def tiers() -> dict[str, int]:
    """Check name -> the tier that clears its drain (as ``rocmlab health --slurm-gate``)."""
    from rocmlab.health.table import resume_tiers

    return resume_tiers()


def root_tier0_argv(s: Settings) -> list[str]:
    """Root's own tier 0 (isolated Python, the health check's arguments), its report in root's
    state directory."""
    return [
        s.python, "-I", "-m", "rocmlab", "health", "--tier", "0", "--state-dir", str(s.state_dir),
        "--json", str(s.state_dir / ROOT_REPORT), *s.tier0_args,
    ]  # fmt: skip


def _remove_old(report: Path) -> None:
    try:
        os.unlink(report)  # an old report must not stand for this run (unlink follows no link)
    except FileNotFoundError:
        pass
    except OSError as exc:  # the account put a directory there
        raise Tier2Error(f"{report}: cannot remove the old report ({exc.strerror})") from None


def tier2_and_gate(s: Settings, io: Io) -> slurm.Action:
    """Run tier 2 as the account and read its report as hostile input, then tier 0 as root;
    hand the two, merged, to the gate."""
    report, own = s.report_dir / REPORT, s.state_dir / ROOT_REPORT
    _remove_old(report)
    _remove_old(own)
    done = io.run(tier2_argv(s))
    io.say(f"tier 2 as {s.account} exited {getattr(done, 'returncode', 'not run')}")
    theirs = read_report(report, s.account_uid)
    io.say(f"tier 2 verdict: {theirs['verdict']}")
    done = io.run(root_tier0_argv(s))
    if done is None or done.returncode not in (0, 1):
        said = slurm._clean(getattr(done, "stderr", "") or "")[:200]
        code = getattr(done, "returncode", "not run")
        raise Tier2Error(f"root's tier 0 exited {code}: {said or 'no message'}")
    mine = read_report(own, os.geteuid(), tier=0)
    doc = merge(mine, theirs)
    io.say(f"root's tier 0 verdict: {mine['verdict']}; together: {doc['verdict']}")
    try:
        action = slurm.gate(
            doc, s.node, io.run, tiers(), s.scontrol, state_dir=s.state_dir, boot_id=io.boot_id()
        )
    except SlurmGateError as exc:
        raise Tier2Error(str(exc)) from None
    io.say(f"slurm: {action.why}")
    return action


def record(s: Settings) -> Drain | None:
    """Root's record of rocmlab's drain of this node (None when there is none to trust)."""
    found, _problem = drains.load(s.state_dir, s.node)
    return found


def drain(s: Settings, io: Io, node: slurm.Node, reason: str, earlier: Drain | None) -> None:
    """Drain the node with ``reason`` (no check: only tier 2 clears it) and record it."""
    argv = [s.scontrol, "update", f"NodeName={s.node}", "State=DRAIN", f"Reason={reason}"]
    _ok(io.run(argv), "scontrol update State=DRAIN")
    kept = earlier if slurm.ours(node, earlier) else None
    drains.save(s.state_dir, drains.made(s.node, reason, None, 2, tiers(), io.boot_id(), kept))


def after_job(job: str, s: Settings, io: Io) -> str:
    """The Epilog's run; returns what it did, in one line (also said)."""
    found = wait_for_job(job_id(job), s, io)
    go, why = triggers(found)
    io.say(why)
    if not go:
        return "nothing"
    state_path = s.state_dir / STATE_FILE
    state = read_state(state_path)
    last = state.get("last_tier2")
    left = cooldown_left(last if isinstance(last, (int, float)) else None, io.now(), s.cooldown)
    if left > 0:
        io.say(f"cooldown: tier 2 ran {io.now() - last:.0f} s ago, next in {left:.0f} s: skipped")
        return "cooldown"
    node, earlier = show_node(s, io), record(s)
    action = drain_decision(node, job_reason(found), earlier)
    io.say(action.why)
    if action.kind == slurm.DRAIN:
        drain(s, io, node, action.reason, earlier)
    wait_idle(s, io)
    write_state(state_path, {**state, "last_tier2": io.now()})
    return tier2_and_gate(s, io).kind


def maintenance(s: Settings, io: Io, reboot: bool = True) -> str:
    """Drain with the maintenance reason (recorded with this boot), ask Slurm to reboot the
    node."""
    node, earlier = show_node(s, io), record(s)
    if node.drained and not slurm.ours(node, earlier):
        raise Tier2Error(
            f"{s.node} is drained by someone else ({node.reason!r}): resume it or put it in "
            "maintenance yourself; nothing was changed"
        )
    drain(s, io, node, MAINTENANCE_REASON, earlier)
    io.say(f"drain {s.node}: {MAINTENANCE_REASON}")
    if not reboot:
        return "drained"
    # No ASAP and no nextstate: both clear the drain when the node registers after the boot.
    _ok(io.run([s.scontrol, "reboot", s.node]), f"scontrol reboot {s.node}")
    io.say(f"scontrol reboot {s.node}: Slurm reboots it when idle (RebootProgram)")
    return "reboot"


def _legacy_maintenance(s: Settings, io: Io, state: dict[str, Any]) -> Drain | None:
    """A maintenance an older version noted in its state (``maintenance_boot``, root's file),
    as the record it now keeps, while Slurm still shows its drain."""
    asked = state.get("maintenance_boot")
    if not isinstance(asked, str) or not asked:
        return None
    node = show_node(s, io)
    if not (node.drained and node.reason.startswith(MAINTENANCE_REASON)):
        return None
    kept = drains.made(s.node, MAINTENANCE_REASON, None, 2, tiers(), asked)
    drains.save(s.state_dir, kept)
    return kept


def after_boot(s: Settings, io: Io, now: bool = False) -> str:
    """Tier 2 and the gate when rocmlab's drain waits for tier 2 and the node booted since it
    was drained; with ``now`` (an operator's ``--after``), at once whatever drained it."""
    state_path = s.state_dir / STATE_FILE
    state = read_state(state_path)
    pending = record(s) or _legacy_maintenance(s, io, state)
    if "maintenance_boot" in state:
        state.pop("maintenance_boot")
        write_state(state_path, state)
    if pending is None:
        io.say(f"no drain of rocmlab's on {s.node}: nothing to do")
        return "nothing"
    if not now:
        if pending.needs < 2:
            io.say(f"{pending.reason!r} needs tier {pending.needs}: the health check resumes it")
            return "nothing"
        if pending.boot_id == io.boot_id():
            io.say(
                f"{pending.reason!r} waits for tier 2 after a reboot; the node has not rebooted "
                "since: nothing to do yet"
            )
            return "waiting"
    node = show_node(s, io)
    if not slurm.ours(node, pending):
        drains.clear(s.state_dir)
        io.say(f"{s.node} is {node.state} ({node.reason!r}): not rocmlab's drain now: nothing")
        return "nothing"
    wait_idle(s, io)
    write_state(state_path, {**state, "last_tier2": io.now()})
    return tier2_and_gate(s, io).kind


def _settings(args: argparse.Namespace) -> Settings:
    import pwd

    try:
        uid = pwd.getpwnam(args.account).pw_uid
    except KeyError:
        raise Tier2Error(f"--account {args.account}: no such account") from None
    if uid == 0:
        raise Tier2Error(f"--account {args.account}: tier 2 never runs as root")
    node = args.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        node = node_name(node)
    except SlurmGateError as exc:
        raise Tier2Error(str(exc)) from None
    return Settings(
        node=node,
        state_dir=args.state_dir,
        report_dir=args.report_dir,
        account=args.account,
        account_uid=uid,
        rocmlab=args.rocmlab,
        tier2_args=tuple(args.tier2_arg),
        tier0_args=tuple(args.tier0_arg),
        cooldown=args.cooldown,
        job_wait=args.job_wait,
        idle_wait=args.idle_wait,
        tier2_timeout=args.tier2_timeout,
        scontrol=args.scontrol,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rocmlab.health.slurm_tier2 MODE ...`` (role slurm_health's templates)."""
    import subprocess

    parser = argparse.ArgumentParser(prog="rocmlab.health.slurm_tier2")
    parser.add_argument("mode", choices=("after-job", "maintenance", "after-boot"))
    parser.add_argument("--job", default="")
    parser.add_argument("--node", default="")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--report-dir", type=Path, required=True)
    parser.add_argument("--account", required=True)
    parser.add_argument("--rocmlab", required=True)
    parser.add_argument("--tier2-arg", action="append", default=[])
    parser.add_argument("--tier0-arg", action="append", default=[])
    parser.add_argument("--cooldown", type=float, default=3600.0)
    parser.add_argument("--job-wait", type=float, default=60.0)
    parser.add_argument("--idle-wait", type=float, default=600.0)
    parser.add_argument("--tier2-timeout", type=int, default=900)
    parser.add_argument("--scontrol", default="scontrol")
    parser.add_argument("--no-reboot", action="store_true")
    parser.add_argument("--now", action="store_true")
    args = parser.parse_args(argv)

    def run(cmd: Sequence[str]) -> Any:
        try:
            return subprocess.run(
                list(cmd), capture_output=True, text=True, errors="replace", check=False,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except FileNotFoundError:
            return None

    def say(line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(f"{stamp} {args.mode}: {line}", flush=True)

    io = Io(run=run, say=say)
    try:
        s = _settings(args)
        held = lock(s.state_dir / "tier2.lock")
        if held is None:
            io.say("another tier-2 run holds the lock: skipped")
            # An operator's request (maintenance, --after) says so with its exit status.
            return 1 if args.mode == "maintenance" or args.now else 0
        if args.mode == "after-job":
            after_job(args.job, s, io)
        elif args.mode == "maintenance":
            maintenance(s, io, reboot=not args.no_reboot)
        else:
            after_boot(s, io, now=args.now)
    except Tier2Error as exc:
        io.say(f"stopped: {exc}")
        return 1
    except OSError as exc:  # the state directory missing or not writable
        io.say(f"stopped: {exc.filename or ''}: {exc.strerror or exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
