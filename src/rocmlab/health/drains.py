"""The record root keeps of the drains rocmlab made (docs/health.md, "Under Slurm").

A drain is rocmlab's when root recorded it, never because its reason starts with ``rocmlab:``
(an operator may type that): ``<state dir>/slurm-drain.json``, written by the gate when its
``scontrol update State=DRAIN`` succeeded, removed when its resume did, in root's directory
(mode 0700 under role slurm_health), as root's 0600 file::

    {"schema_version": 1, "node": "gpu1", "reason": "rocmlab: kernel_log: reboot; ...",
     "checks": ["kernel_log"], "tier": 0, "needs": 2, "boot_id": "0f4b...", "at": 1767225600.0}

``checks`` are the checks whose failure drained the node while it stayed drained (none for a
failed job or maintenance), ``tier`` the highest tier of the reports that drained it, ``needs``
the tier a run must reach to resume it, ``boot_id`` the boot it was drained in (tier 2 runs by
itself once the node has booted since). The node is rocmlab's while Slurm shows it drained with
exactly the recorded reason (Slurm may append " : reboot issued" and the like to it). The file
is read as only its owner's: a regular file of the account running the gate (root), not through
a link, with one link, writable by its owner only, at most RECORD_LIMIT bytes; anything else is
no record, and the gate says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rocmlab.common.hostread import FileReplaced, NotRegularFile, read_bounded, read_regular
from rocmlab.health.state import write_atomically

RECORD = "slurm-drain.json"
RECORD_LIMIT = 64 * 1024
SCHEMA_VERSION = 1
# What Slurm appends to a node's reason around a reboot (scontrol(1), "reboot").
_SLURM_SUFFIX = r"(?: : reboot (?:issued|complete|timed out))*"


@dataclass(frozen=True)
class Drain:
    """A drain rocmlab made, as root recorded it."""

    node: str
    reason: str
    checks: tuple[str, ...] = ()
    tier: int = 0
    needs: int = 2
    boot_id: str = ""
    at: float = field(default=0.0, compare=False)

    def shown_by(self, reason: str) -> bool:
        """Whether Slurm's reason is this drain's (with what Slurm appends at a reboot)."""
        return re.fullmatch(re.escape(self.reason) + _SLURM_SUFFIX, reason) is not None


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def this_boot() -> str:
    """This boot's id ("" when it cannot be read): the node's own, whatever --root says."""
    read = read_bounded(BOOT_ID, 64)
    return (read.text() or "").strip()


def needs(tier: int, checks: tuple[str, ...], tiers: dict[str, int]) -> int:
    """The tier a run must reach to resume a drain: the tier of the report that made it, and the
    tier that reruns each check (``tiers``: check -> tier; an unknown check, or none, needs 2)."""
    if not checks:
        return 2
    return max([tier, *(tiers.get(check, 2) for check in checks)])


def made(
    node: str,
    reason: str,
    check: str | None,
    tier: int,
    tiers: dict[str, int],
    boot_id: str,
    earlier: Drain | None = None,
) -> Drain:
    """The record of a drain just made; a node rocmlab had drained already keeps the checks and
    the tier of the earlier drain (each must pass again before it is resumed)."""
    checks = tuple(earlier.checks) if earlier else ()
    if check and check not in checks:
        checks += (check,)
    tier = max(tier, earlier.tier if earlier else 0)
    wanted = max(needs(tier, checks, tiers), earlier.needs if earlier else 0)
    return Drain(node, reason, checks, tier, wanted, boot_id, time.time())


def _problem(info: os.stat_result) -> str:
    if not stat.S_ISREG(info.st_mode):
        return str(NotRegularFile(info.st_mode))
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by uid {os.geteuid()}, which runs the gate"
    if info.st_mode & 0o022:
        return f"mode {stat.S_IMODE(info.st_mode):04o}: others may write it"
    if info.st_nlink != 1:
        return f"{info.st_nlink} links to it"
    return ""


def load(state_dir: Path, node: str) -> tuple[Drain | None, str]:
    """The record in ``state_dir`` for ``node`` and, when there is none that can be trusted, why
    ("" when there simply is none)."""
    path = state_dir / RECORD
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    problem = _problem(info)
    if problem:
        return None, f"{path}: refused, {problem}"
    try:
        data = read_regular(path, RECORD_LIMIT, follow_links=False, refuse_larger=True)
        doc = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, NotRegularFile, FileReplaced) as exc:
        return None, f"{path}: refused, {str(exc)[:120]}"
    record = _parse(doc)
    if record is None:
        return None, f"{path}: refused, not a rocmlab drain record (schema {SCHEMA_VERSION})"
    if record.node != node:
        return None, f"{path}: a record of node {record.node!r}, not {node!r}"
    return record, ""


def _parse(doc: object) -> Drain | None:
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        return None
    node, reason, checks = doc.get("node"), doc.get("reason"), doc.get("checks")
    tier, wanted, boot_id = doc.get("tier"), doc.get("needs"), doc.get("boot_id")
    if not (isinstance(node, str) and isinstance(reason, str) and reason):
        return None
    if not (isinstance(checks, list) and all(isinstance(c, str) for c in checks)):
        return None
    if tier not in (0, 1, 2) or wanted not in (0, 1, 2) or isinstance(tier, bool):
        return None
    at = doc.get("at")
    at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0
    return Drain(node, reason, tuple(checks), tier, wanted, str(boot_id or ""), at)


def save(state_dir: Path, record: Drain) -> None:
    """Write the record atomically, the running account's alone (0600)."""
    doc = {"schema_version": SCHEMA_VERSION, **asdict(record), "checks": list(record.checks)}
    write_atomically(state_dir / RECORD, json.dumps(doc, sort_keys=True) + "\n", mode=0o600)


def clear(state_dir: Path) -> None:
    """Remove the record (a resumed node, or one an operator took over)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(state_dir / RECORD)
