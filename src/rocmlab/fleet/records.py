"""The records in a reports directory (docs/fleet-report.md, "Inputs"), checked.

Each ``read_*`` function takes a document parsed by rocmlab.fleet.bounded.parse_json and returns
what the fleet report uses of it (only the keys it reads, so a record's other content is not kept
for the whole run), or raises RecordError saying what is wrong with it (a missing key, a wrong
type, an unknown schema version). Nothing here decides whether a host is ready:
rocmlab.fleet.rules does.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from sys import intern
from typing import Any

from rocmlab.fleet.fields import (
    ARRAY,
    STRING,
    STRING_OR_NULL,
    RecordError,
    Shape,
    get,
    get_choice,
    get_list,
    json_kind,
    shape_of,
)

SMOKE_SCHEMAS = (1, 2, 3, 4)
CHECK_STATUSES = ("pass", "warn", "fail", "skip", "error")
ROLLOUT_STATES = (
    "ready", "failed", "quarantined", "rolled_back", "unreachable", "skipped", "not_run",
)  # fmt: skip
# Cluster check verdicts that are not a failure (the document is read leniently: see read_cluster).
CLUSTER_PASSING = ("pass", "passed", "ok", "warn")
PREFLIGHT_DIR = Path("fleet", "preflight")
ROLLOUT_DIR = Path("fleet", "rollout")
HEALTH_DIR = Path("health")
# The smoke account's tier-2 reports, kept apart from root's (HEALTH_DIR/<host>.json).
HEALTH_TIER2_DIR = HEALTH_DIR / "tier2"
CACHE_FILE = Path("fleet", "cache.json")
CLUSTER_FILE = Path("fleet", "cluster.json")


def _schema_version(doc: Any, accepted: Iterable[int]) -> int:
    versions = tuple(accepted)
    version = get(doc, "schema_version", "integer")
    if version not in versions:
        listed = " and ".join(str(v) for v in versions)
        if len(versions) > 2:
            listed = f"{', '.join(str(v) for v in versions[:-1])} and {versions[-1]}"
        raise RecordError(f"schema_version {version}: this rocmlab reads schema {listed}")
    return version


def _keep(doc: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """``doc`` with only ``keys`` (those it has)."""
    return {key: doc[key] for key in keys if key in doc}


# Distinct checks kept at once by _shared (a lab's records hold tens; more only cost time).
SHARED_CHECKS = 4096


@lru_cache(maxsize=SHARED_CHECKS)
def _shared(keys: tuple[str, ...], values: tuple[Any, ...]) -> dict[str, Any]:
    """The check ``dict(zip(keys, values))`` that a record keeps, its texts interned
    (sys.intern) and a tuple of texts (a finding's evidence) made a list.

    Most checks are the same on every host (10,000 hosts' checks held over 100 MB of copies of
    their texts), so each distinct one is made once and the same dict is given to every record
    that holds it: nothing changes these dicts (rocmlab.fleet.rules only reads them). The cache
    tells values apart by ``==``, so ``values`` hold only texts, None, tuples of texts and, each
    at its own key, booleans or integers (never both: ``True == 1``)."""
    kept = {}
    for key, value in zip(keys, values, strict=True):
        kind = type(value)
        if kind is str:
            value = intern(value)
        elif kind is tuple:
            value = [intern(item) for item in value]
        kept[key] = value
    return kept


# A check of the doctor's or of health's: its keys, and their types for ``fits``.
_FINDING_KEYS = ("name", "status", "saw", "fix", "evidence")
_FINDING = Shape({"name": STRING, "status": STRING, "saw": STRING, "fix": STRING_OR_NULL,
                  "evidence": ARRAY})  # fmt: skip
_STATUSES = frozenset(CHECK_STATUSES)
_take_finding = itemgetter(*_FINDING_KEYS)
_TEXT = frozenset({str})


def _finding(check: Any, index: int, where: str = "") -> dict[str, Any]:
    """A doctor or health check, with the keys the fleet report uses."""
    if not (
        _FINDING.fits(check)
        and check["status"] in _STATUSES
        and _TEXT.issuperset(map(type, check["evidence"]))  # texts only
    ):
        at = f"{where}checks[{index}]."
        get(check, "name", "string", where=at)
        get_choice(check, "status", CHECK_STATUSES, where=at)
        get(check, "saw", "string", where=at)
        get(check, "fix", "string", "null", where=at)
        for item in get_list(check, "evidence", where=at):
            if not isinstance(item, str):
                raise RecordError(f"'{at}evidence' holds {item!r}, expected strings")
    name, status, saw, fix, evidence = _take_finding(check)
    return _shared(_FINDING_KEYS, (name, status, saw, fix, tuple(evidence)))


def read_doctor(doc: Any, where: str = "") -> dict[str, Any]:
    """A ``rocmlab doctor --json`` document (schema 1), standalone or embedded in a smoke report:
    its verdict and checks."""
    get(doc, "schema_version", "integer", where=where)
    get(doc, "host", "string", where=where)
    get_choice(doc, "verdict", ("pass", "warn", "fail"), where=where)
    checks = [_finding(check, index, where) for index, check in
              enumerate(get_list(doc, "checks", where=where))]  # fmt: skip
    return {"verdict": doc["verdict"], "checks": checks}


# A smoke report's check: what is read of it, and its keys kept ("rank", only in a distributed
# run's checks, is not read: it may hold anything).
_SMOKE_CHECK_READS = {"name": ("string",), "passed": ("boolean",), "detail": ("string",)}
_SMOKE_CHECK = shape_of(_SMOKE_CHECK_READS)
_SMOKE_CHECK_KEYS = ("name", "passed", "detail", "rank")
# One whose rank is an integer or null: shared (_shared), as a bool rank never is.
_RANKED_SMOKE_CHECK = shape_of({**_SMOKE_CHECK_READS, "rank": ("integer", "null")})
_take_smoke_check = itemgetter(*_SMOKE_CHECK_KEYS)


def _smoke_check(check: Any, index: int) -> dict[str, Any]:
    """A smoke report's check, with the keys the fleet report uses."""
    if _RANKED_SMOKE_CHECK.fits(check):
        return _shared(_SMOKE_CHECK_KEYS, _take_smoke_check(check))
    if not _SMOKE_CHECK.fits(check):
        for key, kinds in _SMOKE_CHECK_READS.items():
            get(check, key, *kinds, where=f"checks[{index}].")
    kept = _keep(check, _SMOKE_CHECK_KEYS)
    kept["name"], kept["detail"] = intern(kept["name"]), intern(kept["detail"])
    return kept


# What the fleet report reads of a smoke report (docs/fleet-report.md, "Inputs").
REPORT_KEYS = (
    "schema_version", "host", "created", "passed", "exit_code", "world_size", "error",
    "device_name", "gfx_arch", "torch_version", "hip_version", "backend", "test_accuracy",
    "min_accuracy", "samples_per_second", "matmul_tflops", "checks", "doctor", "techniques",
    "amp_speedup", "profile",
)  # fmt: skip


BACKENDS = ("rocm", "cuda", "cpu", None)
# The fields _read_smoke_fields reads, for ``fits``: a report whose fields fit and whose backend
# is one of BACKENDS passes all its reads, and is not read field by field.
_SMOKE_FIELDS = shape_of(
    {
        **dict.fromkeys(("host", "created"), ("string",)),
        "passed": ("boolean",),
        **dict.fromkeys(("exit_code", "world_size"), ("integer",)),
        **dict.fromkeys(
            ("error", "device_name", "gfx_arch", "torch_version", "hip_version", "backend"),
            ("string", "null"),
        ),
        **dict.fromkeys(
            ("test_accuracy", "min_accuracy", "samples_per_second"), ("number", "null")
        ),
        "matmul_tflops": ("object", "null"),
    }
)
_BACKENDS = frozenset(BACKENDS)


def _read_smoke_fields(doc: Any) -> None:
    """A smoke report's fields read one by one: the first that is wrong says why."""
    for key in ("host", "created"):
        get(doc, key, "string")
    get(doc, "passed", "boolean")
    get(doc, "exit_code", "integer")
    get(doc, "world_size", "integer")
    for key in ("error", "device_name", "gfx_arch", "torch_version", "hip_version"):
        get(doc, key, "string", "null")
    get_choice(doc, "backend", BACKENDS)
    for key in ("test_accuracy", "min_accuracy", "samples_per_second"):
        get(doc, key, "number", "null")
    get(doc, "matmul_tflops", "object", "null")


def read_smoke_report(doc: Any) -> dict[str, Any]:
    """A ``rocmlab smoke --json`` report of schema 1 to 4, with the keys the fleet report uses:
    of schema 3's ``system`` its ROCm release (``system_rocm``), of schema 4's ``rocm_wheels``
    the venv's ROCm release from wheels (``rocm_wheels``)."""
    version = _schema_version(doc, SMOKE_SCHEMAS)
    if not (_SMOKE_FIELDS.fits(doc) and doc["backend"] in _BACKENDS):
        _read_smoke_fields(doc)
    passed = doc["passed"]
    tflops = doc["matmul_tflops"] or {}
    for dtype in tflops:
        get(tflops, dtype, "number", where="matmul_tflops.")
    checks = get_list(doc, "checks")
    kept_checks = [_smoke_check(check, index) for index, check in enumerate(checks)]
    kept = _keep(doc, REPORT_KEYS)
    kept["checks"] = kept_checks
    if version >= 2:
        doctor = get(doc, "doctor", "object", "null")
        if doctor is not None:
            kept["doctor"] = read_doctor(doctor, where="doctor.")
        for index, name in enumerate(get_list(doc, "techniques")):
            if not isinstance(name, str):
                raise RecordError(f"'techniques[{index}]' is {name!r}, expected a string")
        get(doc, "amp_speedup", "number", "null")
        profile = get(doc, "profile", "object", "null")
        if profile is not None:
            kept["profile"] = {"trace": get(profile, "trace", "string", where="profile.")}
    if version >= 3:
        system = get(doc, "system", "object", "null")
        if system is not None:
            kept["system_rocm"] = _release_text(system, "rocm_release", "system.")
    if version >= 4:
        wheels = get(doc, "rocm_wheels", "object", "null")
        if wheels is not None:
            kept["rocm_wheels"] = _release_text(wheels, "package_version", "rocm_wheels.")
    if passed:
        _passed_as_it_says(doc, checks)
    return kept


def _release_text(record: dict[str, Any], key: str, where: str) -> str | None:
    """A ROCm release a report names (the system's, the venv's wheels'): a string of at most
    MAX_RELEASE_CHARS, or null."""
    release = get(record, key, "string", "null", where=where)
    if release is not None and len(release) > MAX_RELEASE_CHARS:
        raise RecordError(
            f"'{where}{key}' is {len(release)} characters: longer than any ROCm release "
            f"({MAX_RELEASE_CHARS} at most)"
        )
    return release


def _passed_as_it_says(doc: dict[str, Any], checks: list[Any]) -> None:
    """RecordError when a report that says it passed does not bear it out: a check failed, its
    exit code is not 0, it lists no checks, or its accuracy is not at its own gate (what the
    smoke job's accuracy check asks: test_accuracy >= min_accuracy, both measured)."""
    failed = [check["name"] for check in checks if not check["passed"]]
    accuracy, gate = doc["test_accuracy"], doc["min_accuracy"]
    why = None
    if failed:
        why = f"check {', '.join(failed)} failed"
    elif doc["exit_code"] != 0:
        why = f"exit_code is {doc['exit_code']}"
    elif not checks:
        why = "it lists no checks"
    elif accuracy is None or gate is None:
        why = "it has no test_accuracy and min_accuracy to judge it by"
    elif accuracy < gate:
        why = f"its test_accuracy {accuracy} is below its own gate, min_accuracy {gate}"
    if why is not None:
        raise RecordError(f"says passed but {why}: the report contradicts itself")


_PREFLIGHT_FIELDS = shape_of({"host": ("string",), "created": ("string",), "passed": ("boolean",)})
_PREFLIGHT_CHECK_KEYS = ("name", "status", "detail")
_PREFLIGHT_CHECK = Shape({"name": STRING, "status": STRING, "detail": STRING})
_PREFLIGHT_STATUSES = frozenset(("pass", "warn", "fail"))
_take_preflight_check = itemgetter(*_PREFLIGHT_CHECK_KEYS)
# The facts read (``rocm_configured`` apart: records written before it have none).
_FACTS = shape_of(
    {
        **dict.fromkeys(("distribution", "kernel", "python", "rocm_source"), ("string",)),
        "rocm_version": ("string", "null"),
    }
)
_ROCM_SOURCES = ("amd", "distro")


def read_preflight(doc: Any) -> dict[str, Any]:
    """A preflight record ``fleet/preflight/<host>.json`` (schema 1)."""
    _schema_version(doc, (1,))
    if not _PREFLIGHT_FIELDS.fits(doc):
        for key in ("host", "created"):
            get(doc, key, "string")
        get(doc, "passed", "boolean")
    checks = []
    for index, check in enumerate(get_list(doc, "checks")):
        if not (_PREFLIGHT_CHECK.fits(check) and check["status"] in _PREFLIGHT_STATUSES):
            at = f"checks[{index}]."
            get(check, "name", "string", where=at)
            get_choice(check, "status", ("pass", "warn", "fail"), where=at)
            get(check, "detail", "string", where=at)
        checks.append(_shared(_PREFLIGHT_CHECK_KEYS, _take_preflight_check(check)))
    facts = get(doc, "facts", "object")
    if not (
        _FACTS.fits(facts)
        and facts["rocm_source"] in _ROCM_SOURCES
        and type(facts.get("rocm_configured")) in STRING_OR_NULL  # or none at all
    ):
        for key in ("distribution", "kernel", "python"):
            get(facts, key, "string", where="facts.")
        get_choice(facts, "rocm_source", _ROCM_SOURCES, where="facts.")
        get(facts, "rocm_version", "string", "null", where="facts.")
        if "rocm_configured" in facts:  # records written before it have none
            get(facts, "rocm_configured", "string", "null", where="facts.")
    return {
        **_keep(doc, ("schema_version", "host", "created", "passed")),
        "checks": checks,
        "facts": _keep(
            facts,
            ("distribution", "kernel", "python", "rocm_source", "rocm_version", "rocm_configured"),
        ),
    }


_ROLLOUT_FIELDS = shape_of(
    {
        **dict.fromkeys(("host", "created", "rollout_id", "state"), ("string",)),
        "reason": ("string", "null"),
        "batch": ("integer", "null"),
    }
)
_ROLLOUT_STATES = frozenset(ROLLOUT_STATES)


# How far a time a host wrote (a known-good record's ``since``, a health report's ``finished``)
# may be ahead of the report's clock: the host's clock against the controller's. Later is a
# record that cannot be right, and is refused: a time from the future would outlast every
# report written after it.
CLOCK_SKEW = 300.0
# A known-good entry of a rollout record: its release at most this long (AMD's
# /opt/rocm/.info/version, "6.4.2-120"), its ``since`` at most CLOCK_SKEW ahead.
MAX_RELEASE_CHARS = 64
KNOWN_GOOD_SKEW = CLOCK_SKEW
_KNOWN_GOOD = shape_of({"release": ("string", "null"), "since": ("string",)})


def _known_good(entry: Any, now: float) -> dict[str, Any]:
    """A rollout record's ``known_good`` object: the ROCm release of the host's known-good record
    (null without AMD's ROCm) and when that state was recorded, with its time in seconds."""
    if not _KNOWN_GOOD.fits(entry):
        get(entry, "release", "string", "null", where="known_good.")
        get(entry, "since", "string", where="known_good.")
    release, since = entry["release"], entry["since"]
    if release is not None and len(release) > MAX_RELEASE_CHARS:
        raise RecordError(
            f"'known_good.release' is {len(release)} characters: longer than any ROCm release "
            f"({MAX_RELEASE_CHARS} at most)"
        )
    seconds = not_later(since, "known_good.since", now, "no state is known-good from the future")
    return {"release": release, "since": since, "since_seconds": seconds}


def read_rollout(doc: Any, now: float | None = None) -> dict[str, Any]:
    """A rollout record ``fleet/rollout/<host>.json`` (schema 1). ``rocm`` (optional: records
    written before it have none): the ROCm release the host had after its change, read from the
    host, and the one the inventory configured (null for the distribution's ROCm).
    ``known_good`` (optional, null when unknown): the release and time of the host's known-good
    record (/var/lib/rocmlab/known-good.json), as the rollout read it from the host; a ``since``
    later than ``now`` (default: the clock) by more than KNOWN_GOOD_SKEW is refused."""
    _schema_version(doc, (1,))
    if not (_ROLLOUT_FIELDS.fits(doc) and doc["state"] in _ROLLOUT_STATES):
        for key in ("host", "created", "rollout_id"):
            get(doc, key, "string")
        get_choice(doc, "state", ROLLOUT_STATES)
        get(doc, "reason", "string", "null")
        get(doc, "batch", "integer", "null")
    kept = _keep(
        doc, ("schema_version", "host", "created", "rollout_id", "state", "reason", "batch")
    )
    rocm = get(doc, "rocm", "object", "null") if "rocm" in doc else None
    if rocm is not None:
        for key in ("installed", "configured"):
            get(rocm, key, "string", "null", where="rocm.")
        rocm = _keep(rocm, ("installed", "configured"))
    kept["rocm"] = rocm
    known = doc.get("known_good")
    if known is not None:
        get(doc, "known_good", "object", "null")
        known = _known_good(known, time.time() if now is None else now)
    kept["known_good"] = known
    return kept


HEALTH_SCHEMAS = (1,)
HEALTH_TIERS = (0, 1, 2)
# The tiers root runs (the timer's tier 0), whose reports are HEALTH_DIR/<host>.json, and the
# one the smoke account runs (the GPU work), HEALTH_TIER2_DIR/<host>.json.
ROOT_TIERS = (0, 1)
ACCOUNT_TIERS = (2,)
VERDICTS = ("pass", "warn", "fail")
_VERDICTS = frozenset(VERDICTS)
# The fields read_health reads one by one where a report does not fit them (or holds a tool,
# tier or verdict it does not know).
_HEALTH_FIELDS = shape_of(
    {
        **dict.fromkeys(("tool", "host", "finished", "verdict"), ("string",)),
        "tier": ("integer",),
    }
)
_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\Z")


def utc_seconds(text: str, where: str) -> float:
    """``2026-01-30T08:00:00Z`` as seconds since the epoch; RecordError for anything else."""
    try:
        if not _UTC.match(text):
            raise ValueError
        fields = (int(text[0:4]), int(text[5:7]), int(text[8:10]),
                  int(text[11:13]), int(text[14:16]), int(text[17:19]))  # fmt: skip
        if fields[5] >= 60:  # a leap second, which strptime takes (and datetime does not)
            return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))
        datetime(*fields)  # the date checked as strptime checks it (no 31 February)
        return calendar.timegm(fields)
    except (ValueError, OverflowError):
        raise RecordError(
            f"'{where}' is {text[:40]!r}, expected a UTC time such as 2026-01-30T08:00:00Z"
        ) from None


def not_later(text: str, where: str, now: float, never: str) -> float:
    """The UTC time ``text`` (at ``where`` in the record) in seconds; RecordError when it is not
    one or is more than CLOCK_SKEW ahead of ``now`` (``never`` says what cannot be)."""
    seconds = utc_seconds(text, where)
    if seconds > now + CLOCK_SKEW:
        shown = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        raise RecordError(
            f"'{where}' is {text!r}, later than now ({shown}): {never} (the host's clock or the "
            "record is wrong)"
        )
    return seconds


def read_health(
    doc: Any, now: float | None = None, tiers: tuple[int, ...] = HEALTH_TIERS
) -> dict[str, Any]:
    """A ``rocmlab health --json`` report (schema 1): its tier (one of ``tiers``, those the file
    it came from may hold), when it finished, its verdict and its checks. A ``finished`` later
    than ``now`` (default: the clock) by more than CLOCK_SKEW is refused, and so is a verdict
    that its checks do not bear out (a pass without a check proves nothing)."""
    _schema_version(doc, HEALTH_SCHEMAS)
    if (
        _HEALTH_FIELDS.fits(doc)
        and doc["tool"] == "rocmlab health"
        and doc["tier"] in tiers
        and doc["verdict"] in _VERDICTS
    ):
        finished_text = doc["finished"]
    else:
        get_choice(doc, "tool", ("rocmlab health",))
        get(doc, "host", "string")
        tier = get_choice(doc, "tier", HEALTH_TIERS)
        if tier not in tiers:
            held = " or ".join(str(t) for t in tiers)
            raise RecordError(f"'tier' is {tier}, and this file holds only a tier {held} report")
        finished_text = get(doc, "finished", "string")
        get_choice(doc, "verdict", VERDICTS)
    now = time.time() if now is None else now
    finished = not_later(finished_text, "finished", now, "no report finishes in the future")
    verdict = doc["verdict"]
    checks = [_finding(check, index) for index, check in enumerate(get_list(doc, "checks"))]
    failed = [c["name"] for c in checks if c["status"] == "fail"]
    if not checks:
        raise RecordError(f"says verdict {verdict} but it lists no checks: it proves nothing")
    if (verdict == "fail") != bool(failed):
        why = f"check {', '.join(failed)} failed" if failed else "no check failed"
        raise RecordError(f"says verdict {verdict} but {why}: the report contradicts itself")
    return {
        **_keep(doc, ("schema_version", "host", "tier", "finished", "verdict")),
        "finished_seconds": finished,
        "checks": checks,
    }


def read_cache(doc: Any) -> dict[str, Any]:
    """The lab cache's host and byte counts per kind, from ``fleet/cache.json`` (schema 1)."""
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


def read_cluster(doc: Any) -> dict[str, Any]:
    """The cluster check's ``rocmlab allreduce --json`` document: its verdict and what it ran on.

    Read leniently (only the keys shown are checked): ``verdict`` (a string) or ``passed`` (a
    boolean) is required; ``backend``, ``world_size`` and ``error`` are shown when present.
    """
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
    """The file names of one kind in one directory, assigned to the declared hosts by name."""

    exact: dict[str, str] = field(default_factory=dict)  # host -> <host>.json
    variants: dict[str, list[str]] = field(default_factory=dict)  # host -> case variants
    others: list[str] = field(default_factory=list)  # names of no declared host

    def candidates(self, host: str) -> list[str]:
        """Every name that could be ``host``'s: the exact name first, then case variants."""
        found = [self.exact[host]] if host in self.exact else []
        return found + self.variants.get(host, [])


def locate(names: Iterable[str], hosts: Iterable[str], skip: Iterable[str] = ()) -> Located:
    """Assign the ``*.json`` names (any case of ``.json``) of a directory to the declared ``hosts``.

    ``<host>.json`` is that host's file. A name that matches a host only when case is ignored
    (``web1.JSON``, ``Web1.json``) is a variant of it, which rocmlab.fleet.rules treats as a second
    file for that host. Names in ``skip`` are not records (the report's own outputs). Names are
    taken whatever they are (a link, a FIFO, a directory): reading one says what it is.
    """
    declared = set(hosts)
    by_fold: dict[str, list[str]] = {}
    for host in declared:
        by_fold.setdefault(host.casefold(), []).append(host)
    for same in by_fold.values():
        same.sort()
    located = Located()
    skipped = set(skip)
    for name in sorted(names):
        if name in skipped or not name.lower().endswith(".json"):
            continue
        stem = name[: -len(".json")]
        if stem in declared and name == f"{stem}.json":
            located.exact[stem] = name
        elif stem.casefold() in by_fold:
            for host in by_fold[stem.casefold()]:
                located.variants.setdefault(host, []).append(name)
        else:
            located.others.append(name)
    return located
