"""Find and read every declared host's records in REPORTS_DIR, noting what is wrong with them.

A record that cannot be used (unreadable, two files for one host, a file named for the host in
another case, a record naming another host, a passing report copied from another host) is left
out and becomes one of the host's ``problems``, which make it FAIL. Files that name no declared
host are listed as undeclared.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmlab.fleet.fields import RecordError
from rocmlab.fleet.records import (
    PREFLIGHT_DIR,
    ROLLOUT_DIR,
    Located,
    locate,
    read_preflight,
    read_rollout,
    read_smoke_report,
)

# The report's own outputs in REPORTS_DIR: never read as a host's report.
OUTPUT_NAMES = ("fleet.json",)


@dataclass
class HostRecords:
    """What REPORTS_DIR holds for one declared host (None where a record is absent or unusable)."""

    host: str
    report: dict[str, Any] | None = None
    preflight: dict[str, Any] | None = None
    rollout: dict[str, Any] | None = None
    files: dict[str, str | None] = field(
        default_factory=lambda: {"report": None, "preflight": None, "rollout": None}
    )
    problems: list[str] = field(default_factory=list)


@dataclass
class Gathered:
    """Every declared host's records, and the files that belong to no declared host."""

    hosts: dict[str, HostRecords]
    undeclared: list[dict[str, str]]


@dataclass(frozen=True)
class _Kind:
    key: str  # in HostRecords.files
    label: str  # in messages
    directory: Path  # relative to REPORTS_DIR
    reader: Callable[[Path], dict[str, Any]]
    names_host: bool  # whether the record's "host" is the inventory name


KINDS = (
    _Kind("report", "report", Path(), read_smoke_report, names_host=False),
    _Kind("preflight", "preflight record", PREFLIGHT_DIR, read_preflight, names_host=True),
    _Kind("rollout", "rollout record", ROLLOUT_DIR, read_rollout, names_host=True),
)


def gather(reports_dir: Path, hosts: Sequence[str]) -> Gathered:
    """Read the smoke reports, preflight and rollout records of ``hosts`` from ``reports_dir``."""
    records = {host: HostRecords(host) for host in hosts}
    undeclared: list[dict[str, str]] = []
    traces: set[str] = set()
    for kind in KINDS:
        skip = OUTPUT_NAMES if kind.key == "report" else ()
        located = locate(reports_dir / kind.directory, hosts, skip=skip)
        for host, rec in records.items():
            doc = _read_for_host(kind, located, host, reports_dir, rec)
            setattr(rec, kind.key, doc)
            if kind.key == "report" and doc is not None:
                traces |= _trace_names(doc)
        for path in located.others:
            if kind.key == "report" and path.name in traces:
                continue  # the Chrome trace beside a report (smoke --techniques profile)
            undeclared.append(
                {
                    "file": _relative(path, reports_dir),
                    "reason": f"a {kind.label} for a host not in the inventory: not counted",
                }
            )
    _flag_copied_reports(records)
    return Gathered(records, undeclared)


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _read_for_host(
    kind: _Kind, located: Located, host: str, root: Path, rec: HostRecords
) -> dict[str, Any] | None:
    candidates = located.candidates(host)
    if not candidates:
        return None
    names = [_relative(path, root) for path in candidates]
    rec.files[kind.key] = names[0]
    if len(candidates) > 1:
        rec.problems.append(
            f"two {kind.label}s for one host: {', '.join(names)} (remove the stale one)"
        )
        return None
    path = candidates[0]
    expected = _relative(path.with_name(f"{host}.json"), root)
    if path.name != f"{host}.json":
        rec.problems.append(
            f"{kind.label} named {names[0]}, expected {expected} "
            "(inventory host names are case-sensitive)"
        )
        return None
    try:
        doc = kind.reader(path)
    except RecordError as exc:
        rec.problems.append(f"unreadable {kind.label}: {names[0]}: {exc}")
        return None
    if kind.names_host and doc["host"] != host:
        rec.problems.append(f"{kind.label} {names[0]} is for host {doc['host']!r}, not {host!r}")
        return None
    return doc


def _trace_names(report: dict[str, Any]) -> set[str]:
    profile = report.get("profile")
    return {Path(profile["trace"]).name} if isinstance(profile, dict) else set()


def _flag_copied_reports(records: dict[str, HostRecords]) -> None:
    """Two hosts with the same passing report: it is a copy, not a run on each of them."""
    by_content: dict[str, list[HostRecords]] = {}
    for rec in records.values():
        if rec.report is not None and rec.report["passed"]:
            by_content.setdefault(json.dumps(rec.report, sort_keys=True), []).append(rec)
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
