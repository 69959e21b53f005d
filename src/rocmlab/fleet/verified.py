"""What has passed the smoke job on real hardware: the runs recorded from smoke reports, the file
that keeps them (docs/verified.json in the repository) and the README's table made from it
(docs/verified.md).

A smoke report comes from a lab machine, so it is hostile input: it is read through
rocmlab.fleet.bounded (no link followed, no special file opened, at most MAX_BYTES, strict JSON
within bounds) and checked as fleet-report checks it (rocmlab.fleet.records.read_smoke_report: a
report that says it passed must bear it out). A run is recorded only when the report says it ran
on real hardware (``real_hardware_problem``): it passed, on an AMD GPU through ROCm, on a machine
of its own (schema 3's ``system``: not in a container, ``/dev/kfd`` a character device) whose OS
is known. What is kept of it is a few short texts, each bounded, and the SHA-256 of the report's
bytes, so that a reviewer can ask for the report itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlab.common.support_catalog import LINES, platform_key, platform_name, release_key
from rocmlab.common.textsafe import for_terminal
from rocmlab.fleet.bounded import parse_json, read_file, read_listed
from rocmlab.fleet.fields import RecordError, get, get_choice, get_list
from rocmlab.fleet.records import read_smoke_report

SCHEMA_VERSION = 1
# The first smoke report schema that says what machine it ran on (``system``).
SYSTEM_FROM = 3
# The files of REPORTS_DIR that are not smoke reports: fleet-report's output, profile traces.
NOT_REPORTS = ("fleet.json",)
TRACE_SUFFIX = ".trace.json"
# Reports read in one run at most (a lab's REPORTS_DIR holds one per host).
MAX_REPORTS = 4096
# The longest text a run keeps (a GPU's marketing name, a kernel release, os-release's name).
MAX_TEXT = 200
# The verified file, which the repository reviews: at most this many bytes.
MAX_FILE_BYTES = 4 * 1024 * 1024
ROCM_SOURCES = ("legacy", "core", "distro")
NO_RUN = "no run recorded on real hardware"
# REPORTS_DIR is the admin's, named on the command line (a link to it is followed); the files in
# it are not.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
ABOUT = (
    "The runs of rocmlab's smoke job that passed on real hardware, one entry per run, made by "
    "`rocmlab verified REPORTS_DIR --add-to docs/verified.json` from the smoke reports "
    "(docs/verified.md); report_sha256 is the SHA-256 of the report's bytes. "
    "`tools/role_docs.py` writes the README's table from this file."
)

_GFX = re.compile(r"gfx[0-9a-f]{3,4}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CREATED = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
# A run's keys: key -> the JSON types it may hold.
RUN_KEYS: dict[str, tuple[str, ...]] = {
    "os": ("string",),
    "os_name": ("string", "null"),
    "kernel": ("string", "null"),
    "rocm_release": ("string", "null"),
    "rocm_source": ("string", "null"),
    "gfx_arch": ("string",),
    "gpu": ("string", "null"),
    "gpus": ("integer", "null"),
    "created": ("string",),
    "rocmlab_version": ("string",),
    "torch_version": ("string", "null"),
    "model": ("string", "null"),
    "report_sha256": ("string",),
}


@dataclass(frozen=True)
class Outcome:
    """What became of one report: its run, or why it was refused."""

    name: str
    run: dict[str, Any] | None = None
    refused: str | None = None
    known: bool = False  # the run was already in the verified file


def _text(doc: dict[str, Any], key: str, *kinds: str, where: str = "") -> Any:
    """``doc[key]`` (a string, or ``kinds``), a string at most MAX_TEXT characters."""
    value = get(doc, key, "string", *kinds, where=where)
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise RecordError(
            f"'{where}{key}' is {len(value)} characters: longer than any value a run keeps "
            f"({MAX_TEXT} at most)"
        )
    return value


def _system(doc: dict[str, Any]) -> dict[str, Any]:
    """The report's ``system``, checked; RecordError when it is missing, null or malformed."""
    version = doc["schema_version"]
    if version < SYSTEM_FROM:
        raise RecordError(
            f"schema_version {version}: the report does not say what machine it ran on (its "
            f"OS, a container, /dev/kfd: unknown; 'system' is in schema {SYSTEM_FROM} on): run "
            "the smoke job again with this rocmlab"
        )
    system = get(doc, "system", "object", "null")
    if system is None:
        raise RecordError("'system' is null: the machine the report ran on is unknown")
    for key in ("os", "os_name", "kernel", "rocm_release", "container"):
        _text(system, key, "null", where="system.")
    get_choice(system, "rocm_source", (*ROCM_SOURCES, None), where="system.")
    get(system, "kfd", "boolean", where="system.")
    return system


def real_hardware_problem(doc: dict[str, Any], system: dict[str, Any]) -> str | None:
    """Why a passing report is not a run on real hardware, or None: it ran in a container, on a
    machine without /dev/kfd (a fixture or GPU-less host), not on an AMD GPU through ROCm, or on
    an OS it does not name."""
    if system["container"] is not None:
        return f"ran in a container ({system['container']}): not a machine of its own"
    if not system["kfd"]:
        return (
            "no /dev/kfd on the machine (the amdgpu driver's compute device): a fixture or "
            "container host, not real hardware"
        )
    if doc["backend"] != "rocm":
        return f"backend {doc['backend']}: the run was not on an AMD GPU through ROCm"
    gfx = doc["gfx_arch"]
    if gfx is None or not _GFX.match(gfx):
        return f"gfx_arch {gfx!r}: torch named no AMD GPU architecture (gfxNNNN)"
    if system["os"] is None:
        return "system.os is null: the OS it ran on is unknown (no os-release)"
    return None


def run_of(data: bytes) -> dict[str, Any]:
    """The run a smoke report's bytes record; RecordError saying why when they record none."""
    doc = read_smoke_report_doc(data)
    if not doc["passed"]:
        error = doc["error"] or "a check failed"
        raise RecordError(f"the run did not pass (exit_code {doc['exit_code']}: {error})")
    system = _system(doc)
    problem = real_hardware_problem(doc, system)
    if problem is not None:
        raise RecordError(problem)
    count = get(doc, "device_count", "integer", "null")
    return {
        "os": system["os"],
        "os_name": system["os_name"],
        "kernel": system["kernel"],
        "rocm_release": system["rocm_release"],
        "rocm_source": system["rocm_source"],
        "gfx_arch": _text(doc, "gfx_arch"),
        "gpu": _text(doc, "device_name", "null"),
        "gpus": count,
        "created": _created(doc),
        "rocmlab_version": _text(doc, "rocmlab_version"),
        "torch_version": _text(doc, "torch_version", "null"),
        "model": _text(doc, "model", "null"),
        "report_sha256": hashlib.sha256(data).hexdigest(),
    }


def read_smoke_report_doc(data: bytes) -> dict[str, Any]:
    """The parsed report, checked as fleet-report checks it (a report that says it passed but
    does not bear it out is refused)."""
    doc = parse_json(data)
    read_smoke_report(doc)
    return doc


def _created(doc: dict[str, Any]) -> str:
    created = _text(doc, "created")
    if not _CREATED.fullmatch(created):
        raise RecordError(f"'created' is {created!r}, expected a UTC time such as "
                          "2026-01-30T08:00:00Z")  # fmt: skip
    return created


def is_report_name(name: str) -> bool:
    """Whether REPORTS_DIR's file ``name`` is a host's smoke report (``<host>.json``)."""
    return (
        name.endswith(".json")
        and not name.endswith(TRACE_SUFFIX)
        and name not in NOT_REPORTS
        and not name.startswith(".")
    )


def read_reports(reports_dir: Path, known: Iterable[str] = ()) -> list[Outcome]:
    """Every smoke report directly in ``reports_dir``, by name: its run or why it is refused.
    ``known``: the report hashes already recorded. RecordError when the directory cannot be
    read or holds more than MAX_REPORTS reports."""
    seen = set(known)
    try:
        fd = os.open(reports_dir, _DIR_FLAGS)
    except OSError as exc:
        raise RecordError(
            f"REPORTS_DIR {reports_dir}: cannot be read as a directory ({exc.strerror or exc})"
        ) from None
    try:
        with os.scandir(fd) as listing:
            entries = sorted((e for e in listing if is_report_name(e.name)), key=lambda e: e.name)
        if len(entries) > MAX_REPORTS:
            raise RecordError(
                f"REPORTS_DIR {reports_dir} holds {len(entries)} reports: more than one run "
                f"reads ({MAX_REPORTS} at most)"
            )
        outcomes = [_outcome(fd, entry, seen) for entry in entries]
    finally:
        os.close(fd)
    return outcomes


def _outcome(dir_fd: int, entry: os.DirEntry[str], seen: set[str]) -> Outcome:
    try:
        data = read_listed(dir_fd, entry)
        if data is None:
            raise RecordError("gone before it was read")
        run = run_of(data)
    except RecordError as exc:
        return Outcome(entry.name, refused=str(exc))
    known = run["report_sha256"] in seen
    seen.add(run["report_sha256"])
    return Outcome(entry.name, run=run, known=known)


# --- the verified file -----------------------------------------------------------------------


def check_run(run: Any, index: int) -> dict[str, Any]:
    """A run of the verified file, checked: exactly RUN_KEYS, each of its types."""
    where = f"runs[{index}]."
    if isinstance(run, dict):
        extra = sorted(set(run) - set(RUN_KEYS))
        if extra:
            raise RecordError(f"'{where}{extra[0]}' is no key of a run")
    for key, kinds in RUN_KEYS.items():
        if "string" in kinds:
            _text(run, key, *kinds[1:], where=where)
        else:
            get(run, key, *kinds, where=where)
    get_choice(run, "rocm_source", (*ROCM_SOURCES, None), where=where)
    if not _SHA256.fullmatch(run["report_sha256"]):
        raise RecordError(f"'{where}report_sha256' is not a SHA-256 (64 hex digits)")
    if not _CREATED.fullmatch(run["created"]):
        raise RecordError(f"'{where}created' is {run['created']!r}, expected a UTC time")
    return run


def load_runs(data: bytes) -> list[dict[str, Any]]:
    """The runs of a verified file's bytes; RecordError saying what is wrong."""
    doc = parse_json(data)
    version = get(doc, "schema_version", "integer")
    if version != SCHEMA_VERSION:
        raise RecordError(f"schema_version {version}: this rocmlab reads schema {SCHEMA_VERSION}")
    runs = [check_run(run, index) for index, run in enumerate(get_list(doc, "runs"))]
    hashes = [run["report_sha256"] for run in runs]
    twice = next((h for h in hashes if hashes.count(h) > 1), None)
    if twice is not None:
        raise RecordError(f"report_sha256 {twice} is listed twice: one entry per run")
    return runs


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The runs of the verified file at ``path`` (none when it does not exist)."""
    if not path.exists():
        return []
    return load_runs(read_file(path, MAX_FILE_BYTES, "a verified file"))


def _order(run: dict[str, Any]) -> tuple[Any, ...]:
    return (run["os"], run["rocm_source"] or "", run["rocm_release"] or "", run["created"],
            run["report_sha256"])  # fmt: skip


def document(runs: Iterable[dict[str, Any]]) -> str:
    """The verified file's text: ``runs`` in a stable order."""
    ordered = sorted(runs, key=_order)
    body = {"about": ABOUT, "schema_version": SCHEMA_VERSION, "runs": ordered}
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


# --- the README's table ----------------------------------------------------------------------

_MARKDOWN = re.compile(r"([\\`*_\[\]<>|&#])")


def cell(text: str) -> str:
    """``text`` (from a lab machine, through review) safe in a Markdown table cell: controls
    shown as escapes, Markdown and HTML punctuation escaped."""
    return _MARKDOWN.sub(r"\\\1", for_terminal(text))


def _line_label(catalog: Any, line: str) -> str:
    versions = sorted(
        (r["version"] for r in catalog.releases if r["line"] == line), key=release_key
    )
    name = {"legacy": "AMD's legacy packages", "core": "AMD's Core SDK"}[line]
    return f"{name} ({versions[0]}-{versions[-1]})" if versions else name


def catalog_rows(catalog: Any) -> list[tuple[str, str, str]]:
    """(os key, ROCm source, label) of every OS x ROCm line the support catalog offers: AMD's
    lines where the catalog names the system on them and does not refuse them, and the
    distribution's ROCm where that is the system's default."""
    rows = []
    for platform in catalog.platforms:
        refused = platform.get("amd_unsupported", {})
        for line in LINES:
            if line in platform["amd"] and line not in refused:
                rows.append((platform_key(platform), line, _line_label(catalog, line)))
        if platform["rocm_source"] == "distro":
            rows.append((platform_key(platform), "distro", "the distribution's own"))
    return rows


def _gpu(run: dict[str, Any]) -> str:
    gfx = run["gfx_arch"].split(":", 1)[0]
    name = f"{gfx} ({run['gpu']})" if run["gpu"] else gfx
    return f"{run['gpus']} x {name}" if run["gpus"] and run["gpus"] > 1 else name


def _run_cells(run: dict[str, Any]) -> list[str]:
    return [
        cell(run["rocm_release"] or "unknown"),
        cell(_gpu(run)),
        run["created"][:10],
        cell(run["rocmlab_version"]),
    ]


def readme_table(runs: list[dict[str, Any]], catalog: Any) -> str:
    """The README's "Verified on hardware" table: one row per recorded run under its OS and ROCm
    line, a row saying NO_RUN for every combination of the catalog without one, and the runs that
    fit none of them after."""
    names = {platform_key(p): platform_name(p) for p in catalog.platforms}
    lines = ["| System | ROCm | Release | GPU | Date | rocmlab |", "|---|---|---|---|---|---|"]
    placed: set[str] = set()
    for os_key, source, label in catalog_rows(catalog):
        mine = sorted(
            (r for r in runs if r["os"] == os_key and r["rocm_source"] == source), key=_order
        )
        head = [names[os_key], label]
        if not mine:
            lines.append(f"| {' | '.join([*head, NO_RUN, '', '', ''])} |")
        for run in mine:
            placed.add(run["report_sha256"])
            lines.append(f"| {' | '.join([*head, *_run_cells(run)])} |")
    for run in sorted((r for r in runs if r["report_sha256"] not in placed), key=_order):
        source = run["rocm_source"] or "no ROCm found"
        head = [cell(run["os_name"] or run["os"]), f"{cell(source)} (not in the support catalog)"]
        lines.append(f"| {' | '.join([*head, *_run_cells(run)])} |")
    count = len(runs)
    said = f"{count} run{'s' if count != 1 else ''} recorded" if count else "No run recorded yet"
    lines += [
        "",
        f"{said}: rows come from `docs/verified.json`, which `rocmlab verified` fills from the "
        "smoke reports of real machines (docs/verified.md).",
    ]
    return "\n".join(lines) + "\n"
