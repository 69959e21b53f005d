"""Find and read every declared host's records in REPORTS_DIR, noting what is wrong with them.

A record that cannot be used (unreadable, two files for one host, a file named for the host in
another case, a record naming another host, a passing report copied from another host) is left
out and becomes one of the host's ``problems``, which make it UNREADABLE. Files that name no
declared host are listed as undeclared.

REPORTS_DIR is the admin's (given on the command line); what is inside it came from lab machines.
Its subdirectories ``fleet/``, ``fleet/preflight/``, ``fleet/rollout/``, ``health/`` and
``health/tier2/`` are opened without following a link (one that is a link or not a directory
stops the report: ReportsDirError) and every record is read through rocmlab.fleet.bounded: no
link is followed, no special file opened.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from rocmlab.common.hostread import KIB, MIB
from rocmlab.fleet.bounded import open_directory, parse_json, read_listed, read_record
from rocmlab.fleet.fields import RecordError
from rocmlab.fleet.records import (
    ACCOUNT_TIERS,
    CACHE_FILE,
    CLUSTER_FILE,
    HEALTH_DIR,
    HEALTH_TIER2_DIR,
    PREFLIGHT_DIR,
    ROLLOUT_DIR,
    ROOT_TIERS,
    Located,
    locate,
    read_cache,
    read_cluster,
    read_health,
    read_preflight,
    read_rollout,
    read_smoke_report,
)
from rocmlab.fleet.text import decodable


class ReportsDirError(Exception):
    """REPORTS_DIR or one of its directories cannot be read as one: the report cannot be made."""


# The report's own outputs in REPORTS_DIR: never read as a host's report.
OUTPUT_NAMES = ("fleet.json",)
# A host's records, by their key in HostRecords.files (and fleet.json's "files").
FILE_KEYS = ("report", "preflight", "rollout", "health", "health_tier2")
# What the report reads of REPORTS_DIR in all: this much per declared host, and at least
# TOTAL_FLOOR. A lab's records take about 9 KiB a host (benchmarks/fleet_report_scale.py), a
# record at most rocmlab.fleet.bounded.MAX_BYTES; what the report keeps of a record can take
# fifteen times its size, so that without a total 40 hosts of 4 MiB each ended in MemoryError.
PER_HOST_BYTES = 64 * KIB
TOTAL_FLOOR = 32 * MIB
# The largest records read, named when the total stops the reading.
LARGEST_NAMED = 3


def _size(count: int) -> str:
    """``4.0 MiB``, ``12 KiB``, ``300 B``."""
    if count >= MIB:
        return f"{count / MIB:.1f} MiB"
    return f"{count // KIB} KiB" if count >= KIB else f"{count} B"


@dataclass
class _Budget:
    """The bytes the report may still read of REPORTS_DIR, and the largest records read."""

    total: int
    hosts: int
    left: int = 0
    largest: list[tuple[int, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.left = self.total

    def spent(self, name: str, size: int) -> None:
        """``size`` bytes of the record ``name`` were read."""
        self.left -= size
        if len(self.largest) < LARGEST_NAMED or size > self.largest[-1][0]:
            self.largest = sorted([*self.largest, (size, name)], reverse=True)[:LARGEST_NAMED]

    def refusal(self) -> RecordError | None:
        """Why no more is read, once the total is spent; else None."""
        if self.left > 0:
            return None
        largest = ", ".join(f"{name} ({_size(size)})" for size, name in self.largest)
        return RecordError(
            f"not read: the records read before it took the report's total of "
            f"{_size(self.total)} ({_size(PER_HOST_BYTES)} per declared host, at least "
            f"{_size(TOTAL_FLOOR)}; {self.hosts} declared); the largest: {largest}"
        )


def budget_for(hosts: int) -> _Budget:
    """The total for a lab of ``hosts`` declared hosts."""
    return _Budget(max(TOTAL_FLOOR, PER_HOST_BYTES * hosts), hosts)


@dataclass
class HostRecords:
    """What REPORTS_DIR holds for one declared host (None where a record is absent or unusable)."""

    host: str
    report: dict[str, Any] | None = None
    preflight: dict[str, Any] | None = None
    rollout: dict[str, Any] | None = None
    health: dict[str, Any] | None = None  # root's latest rocmlab health report (tier 0)
    health_tier2: dict[str, Any] | None = None  # the smoke account's latest (tier 2)
    files: dict[str, str | None] = field(default_factory=lambda: dict.fromkeys(FILE_KEYS))
    problems: list[str] = field(default_factory=list)
    # The whole report's digest, to tell copies apart, made only where another report could be
    # a copy of it (_digest_alike_reports), from its bytes, kept until then.
    report_digest: str | None = None
    report_bytes: bytes | None = None


@dataclass
class Gathered:
    """Every declared host's records, and the files that belong to no declared host."""

    hosts: dict[str, HostRecords]
    undeclared: list[dict[str, str]]
    cache: dict[str, Any] | None = None  # fleet/cache.json: see _fleet_record
    cluster: dict[str, Any] | None = None  # fleet/cluster.json


@dataclass(frozen=True)
class _Kind:
    key: str  # in HostRecords.files
    label: str  # in messages
    directory: Path  # relative to REPORTS_DIR
    reader: Callable[[Any], dict[str, Any]]
    names_host: bool  # whether the record's "host" is the inventory name

    @cached_property
    def prefix(self) -> str:
        """What comes before a file name in the records' names: ``fleet/rollout/`` (made once:
        it is read for every host)."""
        return "" if self.directory == Path() else f"{self.directory.as_posix()}/"


KINDS = (
    _Kind("report", "report", Path(), read_smoke_report, names_host=False),
    _Kind("preflight", "preflight record", PREFLIGHT_DIR, read_preflight, names_host=True),
    _Kind("rollout", "rollout record", ROLLOUT_DIR, read_rollout, names_host=True),
    # Written on the host by rocmlab health (its "host" is the machine's hostname, as in a smoke
    # report), fetched by the controller: root's report and the smoke account's, each in its
    # own place, so that neither can stand in for the other.
    _Kind(
        "health",
        "health report",
        HEALTH_DIR,
        partial(read_health, tiers=ROOT_TIERS),
        names_host=False,
    ),
    _Kind(
        "health_tier2",
        "tier-2 health report",
        HEALTH_TIER2_DIR,
        partial(read_health, tiers=ACCOUNT_TIERS),
        names_host=False,
    ),
)


@contextmanager
def _directories(reports_dir: Path) -> Iterator[dict[Path, int | None]]:
    """Open REPORTS_DIR (the admin's path: a link to it is fine) and, without following links,
    fleet/, fleet/preflight/, fleet/rollout/, health/ and health/tier2/ (None where absent);
    close them afterwards."""
    with ExitStack() as stack:
        try:
            root = os.open(reports_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise ReportsDirError(
                f"REPORTS_DIR {str(reports_dir)!r} cannot be read: {exc.strerror or exc}"
            ) from None
        stack.callback(os.close, root)
        opened: dict[Path, int | None] = {Path(): root}
        for directory in (
            PREFLIGHT_DIR.parent,
            PREFLIGHT_DIR,
            ROLLOUT_DIR,
            HEALTH_DIR,
            HEALTH_TIER2_DIR,
        ):
            parent = opened[directory.parent]
            fd = None
            if parent is not None:
                try:
                    fd = open_directory(directory.name, parent, str(reports_dir / directory))
                except RecordError as exc:
                    raise ReportsDirError(str(exc)) from None
            if fd is not None:
                stack.callback(os.close, fd)
            opened[directory] = fd
        yield opened


def _listing(fd: int | None, label: str) -> dict[str, os.DirEntry[str]]:
    """The directory's names and their entries, which say what each name was when listed."""
    if fd is None:
        return {}
    try:
        with os.scandir(fd) as entries:
            return {entry.name: entry for entry in entries}
    except OSError as exc:
        raise ReportsDirError(f"{label} cannot be listed: {exc.strerror or exc}") from None


def gather(reports_dir: Path, hosts: Sequence[str]) -> Gathered:
    """Read the smoke reports, preflight and rollout records of ``hosts`` from ``reports_dir``,
    and the fleet-wide records (the lab cache's, the cluster check's)."""
    records = {host: HostRecords(host) for host in hosts}
    undeclared: list[dict[str, str]] = []
    traces: set[str] = set()
    budget = budget_for(len(records))
    with _directories(reports_dir) as opened:
        for kind in KINDS:
            skip = OUTPUT_NAMES if kind.key == "report" else ()
            dir_fd = opened[kind.directory]
            listing = _listing(dir_fd, str(reports_dir / kind.directory))
            located = locate(listing, hosts, skip=skip)
            for host, rec in records.items():
                doc = _read_for_host(kind, located, host, dir_fd, listing, rec, budget)
                setattr(rec, kind.key, doc)
                if kind.key == "report" and doc is not None:
                    traces |= _trace_names(doc)
            if kind.key == "report":
                _digest_alike_reports(records)
            for name in located.others:
                if kind.key == "report" and name in traces:
                    continue  # the Chrome trace beside a report (smoke --techniques profile)
                undeclared.append(
                    {
                        "file": (kind.directory / decodable(name)).as_posix(),
                        "reason": f"a {kind.label} for a host not in the inventory: not counted",
                    }
                )
        fleet_fd = opened[CACHE_FILE.parent]
        cache = _fleet_record(fleet_fd, CACHE_FILE, read_cache, budget)
        cluster = _fleet_record(fleet_fd, CLUSTER_FILE, read_cluster, budget)
    _flag_copied_reports(records)
    return Gathered(records, undeclared, cache, cluster)


def _fleet_record(
    dir_fd: int | None, name: Path, reader: Callable[[Any], dict[str, Any]], budget: _Budget
) -> dict[str, Any] | None:
    """A fleet-wide record: None without the file, else its file and either what ``reader``
    makes of it or why it cannot be used (``problem``)."""
    if dir_fd is None:
        return None
    try:
        refusal = budget.refusal()
        if refusal is not None and _exists(dir_fd, name.name):
            raise refusal
        data = read_record(dir_fd, name.name) if refusal is None else None
        if data is None:
            return None
        budget.spent(name.as_posix(), len(data))
        return {"file": name.as_posix(), "problem": None, **reader(parse_json(data))}
    except RecordError as exc:
        return {"file": name.as_posix(), "problem": str(exc)}


def _exists(dir_fd: int, name: str) -> bool:
    """Whether ``name`` (a link or anything else) is in the directory ``dir_fd``."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # there, but not to be looked at: read_record would say why
    return True


def _read_for_host(
    kind: _Kind,
    located: Located,
    host: str,
    dir_fd: int | None,
    listing: dict[str, os.DirEntry[str]],
    rec: HostRecords,
    budget: _Budget,
) -> dict[str, Any] | None:
    candidates = located.candidates(host)
    if not candidates or dir_fd is None:
        return None
    names = [f"{kind.prefix}{name}" for name in candidates]
    rec.files[kind.key] = names[0]
    if len(candidates) > 1:
        rec.problems.append(
            f"two {kind.label}s for one host: {', '.join(names)} (remove the stale one)"
        )
        return None
    name = candidates[0]
    if name != f"{host}.json":
        expected = (kind.directory / f"{host}.json").as_posix()
        rec.problems.append(
            f"{kind.label} named {names[0]}, expected {expected} "
            "(inventory host names are case-sensitive)"
        )
        return None
    try:
        refusal = budget.refusal()
        if refusal is not None:
            raise refusal
        data = read_listed(dir_fd, listing[name])
        if data is None:
            raise RecordError("removed while the report was being made")
        budget.spent(names[0], len(data))
        parsed = parse_json(data)
        doc = kind.reader(parsed)
    except RecordError as exc:
        rec.problems.append(f"unreadable {kind.label}: {names[0]}: {exc}")
        return None
    if kind.names_host and doc["host"] != host:
        rec.problems.append(f"{kind.label} {names[0]} is for host {doc['host']!r}, not {host!r}")
        return None
    if kind.key == "report":
        rec.report_bytes = data
    return doc


def _trace_names(report: dict[str, Any]) -> set[str]:
    profile = report.get("profile")
    return {Path(profile["trace"]).name} if isinstance(profile, dict) else set()


def _digest_alike_reports(records: dict[str, HostRecords]) -> None:
    """Digest each passing report that another passing report could be a copy of (the whole
    report as JSON with sorted keys), and let go of every report's bytes.

    A copy has its original's time, hostname and samples/s: only reports alike in these are
    digested (digesting every report took a tenth of the run at 10,000 hosts), from the bytes
    read (parse_json makes the same document of them again)."""
    alike: dict[tuple[Any, ...], list[HostRecords]] = {}
    for rec in records.values():
        report = rec.report
        if report is not None and report["passed"]:
            key = (report["created"], report["host"], report["samples_per_second"])
            alike.setdefault(key, []).append(rec)
    for same in alike.values():
        if len(same) < 2:
            continue
        for rec in same:
            assert rec.report_bytes is not None  # read with the report
            canonical = json.dumps(parse_json(rec.report_bytes), sort_keys=True)
            rec.report_digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    for rec in records.values():
        rec.report_bytes = None


def _flag_copied_reports(records: dict[str, HostRecords]) -> None:
    """Two hosts with the same passing report: it is a copy, not a run on each of them."""
    by_content: dict[str, list[HostRecords]] = {}
    for rec in records.values():
        if rec.report is not None and rec.report["passed"] and rec.report_digest is not None:
            by_content.setdefault(rec.report_digest, []).append(rec)
    for same in by_content.values():
        if len(same) < 2:
            continue
        for rec in same:
            others = ", ".join(str(o.files["report"]) for o in same if o is not rec)
            rec.problems.append(
                f"report {rec.files['report']} is identical to {others}: "
                "a copied report, not a run on this host"
            )
            rec.report = None
