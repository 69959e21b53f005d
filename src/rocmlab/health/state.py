"""What a run keeps for the next one: the counters and kernel log lines each stateful check saw.

``<state dir>/state.json`` (default /var/lib/rocmlab/health/state.json), schema 1::

    {"schema_version": 1, "tool": "rocmlab health", "saved": "2026-...Z",
     "checks": {"ras_errors": {"at": 1767225600.0, "boot_id": "...", "data": {...}}, ...}}

Each check's record carries the boot it was read in (a counter of another boot starts from zero)
and when it was read. The file is read bounded (hostread: regular files only, 1 MiB); one that
cannot be read or parsed is taken as no earlier run, and the run says so (WARN), never crashes.
It is written atomically (a temporary file in the same directory, renamed over it) under a lock,
merged with what another run may have saved meanwhile: the newer reading of each check wins. The
lock file is the running account's alone (mode 0600): another account cannot open it to hold it,
and a lock held past LOCK_WAIT seconds fails the save (the run warns) instead of hanging it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlab.common.hostread import MIB, read_bounded

STATE_FILE = "state.json"
LOCK_FILE = ".lock"
# Seconds a save waits for the lock: another run's save takes milliseconds.
LOCK_WAIT = 1.0
STATE_LIMIT = 1 * MIB
SCHEMA_VERSION = 1
TOOL = "rocmlab health"


@dataclass
class Loaded:
    """The checks' records of the last run, when it was saved, and what was wrong with the file
    (empty when it was fine or absent)."""

    checks: dict[str, Any]
    saved: str | None = None
    problem: str = ""


def load(directory: Path) -> Loaded:
    """The state in ``directory``; no records (and the problem) when it cannot be used."""
    path = directory / STATE_FILE
    read = read_bounded(path, STATE_LIMIT)
    if read.data is None:
        if read.refused or path.exists():
            return Loaded({}, problem=f"{path}: {read.error}")
        return Loaded({})
    if read.truncated:
        return Loaded({}, problem=f"{path}: larger than {STATE_LIMIT} bytes")
    try:
        doc = json.loads(read.data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Loaded({}, problem=f"{path}: not valid JSON ({type(exc).__name__}: {exc})"[:300])
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        return Loaded({}, problem=f"{path}: not a rocmlab health state (schema {SCHEMA_VERSION})")
    checks = doc.get("checks")
    if not isinstance(checks, dict):
        return Loaded({}, problem=f"{path}: its 'checks' is not an object")
    saved = doc.get("saved") if isinstance(doc.get("saved"), str) else None
    return Loaded({k: v for k, v in checks.items() if isinstance(v, dict)}, saved)


def record(data: dict[str, Any], boot_id: str, at: float) -> dict[str, Any]:
    """One check's record."""
    return {"at": at, "boot_id": boot_id, "data": data}


def _newer(mine: dict[str, Any], theirs: Any) -> bool:
    if not isinstance(theirs, dict) or not isinstance(theirs.get("at"), (int, float)):
        return True
    return float(mine.get("at", 0)) >= float(theirs["at"])


def save(directory: Path, records: dict[str, dict[str, Any]]) -> None:
    """Merge ``records`` (check -> record) into the state file, atomically, under its lock.
    OSError when the directory cannot be created or written."""
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    lock = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o600)  # fmt: skip
    try:
        _take(lock, directory / LOCK_FILE)
        current = load(directory).checks
        merged = dict(current)
        for name, mine in records.items():
            if _newer(mine, current.get(name)):
                merged[name] = mine
        doc = {
            "schema_version": SCHEMA_VERSION,
            "tool": TOOL,
            "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "checks": merged,
        }
        write_atomically(directory / STATE_FILE, json.dumps(doc, indent=1) + "\n")
    finally:
        os.close(lock)


def _take(fd: int, path: Path) -> None:
    """The exclusive lock on ``fd`` within LOCK_WAIT seconds, else OSError naming ``path``; a
    lock file of this account that others could open (an older version's 0644) is made 0600."""
    info = os.fstat(fd)
    if info.st_uid == os.geteuid() and info.st_mode & 0o077:
        os.fchmod(fd, 0o600)
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise OSError(
                    errno.EWOULDBLOCK, f"{path} is held by another process for over {LOCK_WAIT:g} s"
                ) from None
            time.sleep(0.05)


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """``text`` to ``path``: a temporary file in the same directory (created exclusively, a
    name that is not ``path``'s pattern), flushed and renamed over it; removed on failure."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
