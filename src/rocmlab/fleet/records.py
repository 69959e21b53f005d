"""The records in a reports directory (docs/fleet-report.md, "Inputs"), read and checked.

Each ``read_*`` function returns the parsed document or raises RecordError saying what is wrong
with it (truncated JSON, a missing key, a wrong type, an unknown schema version). Nothing here
decides whether a host is ready: rocmlab.fleet.rules does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmlab.fleet.fields import RecordError, get, get_choice, get_list, json_kind

MAX_BYTES = 16 * 1024 * 1024
SMOKE_SCHEMAS = (1, 2)
CHECK_STATUSES = ("pass", "warn", "fail", "skip", "error")
ROLLOUT_STATES = ("ready", "failed", "quarantined", "unreachable", "skipped", "not_run")
# Cluster check verdicts that are not a failure (the document is read leniently: see read_cluster).
CLUSTER_PASSING = ("pass", "passed", "ok", "warn")
PREFLIGHT_DIR = Path("fleet", "preflight")
ROLLOUT_DIR = Path("fleet", "rollout")
CACHE_FILE = Path("fleet", "cache.json")
CLUSTER_FILE = Path("fleet", "cluster.json")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _ends_open(text: str) -> bool:
    """Whether ``text`` ends inside a string or with brackets still open: cut short."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
    return in_string or depth > 0


def load_json(path: Path) -> Any:
    """Parse ``path`` as strict JSON (no NaN/Infinity); RecordError with the reason otherwise."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise RecordError(f"{size} bytes: larger than any record ({MAX_BYTES} at most)")
        data = path.read_bytes()
    except OSError as exc:
        raise RecordError(f"cannot be read: {exc.strerror or exc}") from None
    if not data.strip():
        raise RecordError("empty file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        truncated = "; the file is truncated" if _ends_open(text) else ""
        raise RecordError(
            f"not valid JSON: {exc.msg}: line {exc.lineno} column {exc.colno}{truncated}"
        ) from None
    except ValueError as exc:
        raise RecordError(f"not valid JSON: {exc}") from None


def _schema_version(doc: Any, accepted: Iterable[int]) -> int:
    versions = tuple(accepted)
    version = get(doc, "schema_version", "integer")
    if version not in versions:
        listed = " and ".join(str(v) for v in versions)
        raise RecordError(f"schema_version {version}: this rocmlab reads schema {listed}")
    return version


def _read_checks(doc: dict[str, Any], keys: dict[str, tuple[str, ...]], where: str) -> None:
    for index, check in enumerate(get_list(doc, "checks")):
        for key, kinds in keys.items():
            get(check, key, *kinds, where=f"{where}[{index}].")


def read_doctor(doc: Any, where: str = "") -> dict[str, Any]:
    """A ``rocmlab doctor --json`` document (schema 1), standalone or embedded in a smoke report."""
    get(doc, "schema_version", "integer", where=where)
    get(doc, "host", "string", where=where)
    get_choice(doc, "verdict", ("pass", "warn", "fail"), where=where)
    for index, check in enumerate(get_list(doc, "checks", where=where)):
        at = f"{where}checks[{index}]."
        get(check, "name", "string", where=at)
        get_choice(check, "status", CHECK_STATUSES, where=at)
        get(check, "saw", "string", where=at)
        get(check, "fix", "string", "null", where=at)
        for item in get_list(check, "evidence", where=at):
            if not isinstance(item, str):
                raise RecordError(f"'{at}evidence' holds {item!r}, expected strings")
    return doc


def read_smoke_report(path: Path) -> dict[str, Any]:
    """A ``rocmlab smoke --json`` report of schema 1 or 2, with the keys the fleet report uses."""
    doc = load_json(path)
    version = _schema_version(doc, SMOKE_SCHEMAS)
    for key in ("host", "created"):
        get(doc, key, "string")
    passed = get(doc, "passed", "boolean")
    exit_code = get(doc, "exit_code", "integer")
    get(doc, "world_size", "integer")
    for key in ("error", "device_name", "gfx_arch", "torch_version", "hip_version"):
        get(doc, key, "string", "null")
    get_choice(doc, "backend", ("rocm", "cuda", "cpu", None))
    for key in ("test_accuracy", "min_accuracy", "samples_per_second"):
        get(doc, key, "number", "null")
    tflops = get(doc, "matmul_tflops", "object", "null") or {}
    for dtype in tflops:
        get(tflops, dtype, "number", where="matmul_tflops.")
    checks = get_list(doc, "checks")
    _read_checks(
        doc,
        {"name": ("string",), "passed": ("boolean",), "detail": ("string",)},
        "checks",
    )
    if version >= 2:
        doctor = get(doc, "doctor", "object", "null")
        if doctor is not None:
            read_doctor(doctor, where="doctor.")
        for index, name in enumerate(get_list(doc, "techniques")):
            if not isinstance(name, str):
                raise RecordError(f"'techniques[{index}]' is {name!r}, expected a string")
        get(doc, "amp_speedup", "number", "null")
        profile = get(doc, "profile", "object", "null")
        if profile is not None:
            get(profile, "trace", "string", where="profile.")
    failed = [check["name"] for check in checks if not check["passed"]]
    if passed and (failed or exit_code != 0 or not checks):
        why = (
            f"check {', '.join(failed)} failed"
            if failed
            else f"exit_code is {exit_code}"
            if exit_code != 0
            else "it lists no checks"
        )
        raise RecordError(f"says passed but {why}: the report contradicts itself")
    return doc


def read_preflight(path: Path) -> dict[str, Any]:
    """A preflight record ``fleet/preflight/<host>.json`` (schema 1)."""
    doc = load_json(path)
    _schema_version(doc, (1,))
    for key in ("host", "created"):
        get(doc, key, "string")
    get(doc, "passed", "boolean")
    for index, check in enumerate(get_list(doc, "checks")):
        at = f"checks[{index}]."
        get(check, "name", "string", where=at)
        get_choice(check, "status", ("pass", "warn", "fail"), where=at)
        get(check, "detail", "string", where=at)
    facts = get(doc, "facts", "object")
    for key in ("distribution", "kernel", "python"):
        get(facts, key, "string", where="facts.")
    get_choice(facts, "rocm_source", ("amd", "distro"), where="facts.")
    get(facts, "rocm_version", "string", "null", where="facts.")
    return doc


def read_rollout(path: Path) -> dict[str, Any]:
    """A rollout record ``fleet/rollout/<host>.json`` (schema 1)."""
    doc = load_json(path)
    _schema_version(doc, (1,))
    for key in ("host", "created", "rollout_id"):
        get(doc, key, "string")
    get_choice(doc, "state", ROLLOUT_STATES)
    get(doc, "reason", "string", "null")
    get(doc, "batch", "integer", "null")
    return doc


def read_cache(path: Path) -> dict[str, Any]:
    """The lab cache's host and byte counts per kind, from ``fleet/cache.json`` (schema 1)."""
    doc = load_json(path)
    _schema_version(doc, (1,))
    get(doc, "cache_host", "string")
    kinds = get(doc, "kinds", "object")
    counts = {
        kind: {
            key: get(kinds[kind], key, "integer", where=f"kinds.{kind}.")
            for key in ("upstream_bytes", "served_bytes")
        }
        for kind in kinds
    }
    return {"cache_host": doc["cache_host"], "kinds": counts}


def read_cluster(path: Path) -> dict[str, Any]:
    """The cluster check's ``rocmlab allreduce --json`` document: its verdict and what it ran on.

    Read leniently (only the keys shown are checked): ``verdict`` (a string) or ``passed`` (a
    boolean) is required; ``backend``, ``world_size`` and ``error`` are shown when present.
    """
    doc = load_json(path)
    if not isinstance(doc, dict):
        raise RecordError(f"the document is {json_kind(doc)}, expected an object")
    if isinstance(doc.get("verdict"), str):
        verdict = doc["verdict"]
    elif isinstance(doc.get("passed"), bool):
        verdict = "pass" if doc["passed"] else "fail"
    else:
        raise RecordError("has neither 'verdict' (a string) nor 'passed' (a boolean)")
    summary: dict[str, Any] = {"verdict": verdict}
    for key, kind in (("backend", str), ("world_size", int), ("error", str)):
        value = doc.get(key)
        summary[key] = value if isinstance(value, kind) and not isinstance(value, bool) else None
    return summary


@dataclass
class Located:
    """The files of one kind in one directory, assigned to the declared hosts by name."""

    exact: dict[str, Path] = field(default_factory=dict)  # host -> <host>.json
    variants: dict[str, list[Path]] = field(default_factory=dict)  # host -> case variants
    others: list[Path] = field(default_factory=list)  # names of no declared host

    def candidates(self, host: str) -> list[Path]:
        """Every file that could be ``host``'s: the exact name first, then case variants."""
        found = [self.exact[host]] if host in self.exact else []
        return found + self.variants.get(host, [])


def locate(directory: Path, hosts: Iterable[str], skip: Iterable[str] = ()) -> Located:
    """Assign ``directory/*.json`` (any case of ``.json``) to the declared ``hosts``.

    ``<host>.json`` is that host's file. A name that matches a host only when case is ignored
    (``web1.JSON``, ``Web1.json``) is a variant of it, which rocmlab.fleet.rules treats as a second
    file for that host. File names in ``skip`` are not records (the report's own outputs).
    """
    declared = list(hosts)
    by_fold: dict[str, list[str]] = {}
    for host in declared:
        by_fold.setdefault(host.casefold(), []).append(host)
    located = Located()
    if not directory.is_dir():
        return located
    skipped = set(skip)
    for path in sorted(directory.iterdir()):
        if path.name in skipped or not path.name.lower().endswith(".json") or not path.is_file():
            continue
        stem = path.name[: -len(".json")]
        if stem in declared and path.name == f"{stem}.json":
            located.exact[stem] = path
        elif stem.casefold() in by_fold:
            for host in by_fold[stem.casefold()]:
                located.variants.setdefault(host, []).append(path)
        else:
            located.others.append(path)
    return located
