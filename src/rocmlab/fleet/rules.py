"""The fleet report's rules (docs/fleet-report.md, "Rules"): each declared host's state, and the
drift and slow flags across hosts. The result is the ``fleet.json`` document (rocmlab.fleet.schema).
"""

from __future__ import annotations

import time
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

from rocmlab import __version__
from rocmlab.common.support_catalog import leading_release
from rocmlab.fleet.gather import Gathered, HostRecords, gather
from rocmlab.fleet.inventory import Declared
from rocmlab.fleet.records import ROOT_TIERS, SHARED_CHECKS
from rocmlab.fleet.text import age_text, decodable

FLEET_SCHEMA_VERSION = 1
DEFAULT_SLOW_FRACTION = 0.7
# Versions compared across the fleet for drift: field -> where it comes from.
DRIFT_FIELDS = {
    "rocm": "rollout rocm.installed, else preflight facts.rocm_version, else smoke report "
    "system.rocm_release",
    "rocm_wheels": "smoke report rocm_wheels.package_version (the venv's ROCm from wheels)",
    "torch": "smoke report torch_version",
    "hip": "smoke report hip_version",
    "kernel": "preflight facts.kernel",
}
ROLLOUT_LABELS = {
    "failed": "failed",
    "quarantined": "quarantined",
    "rolled_back": "rolled back",
    "unreachable": "unreachable",
    "skipped": "skipped",
    "not_run": "not run (the rollout stopped before this host)",
}


def build_fleet(
    reports_dir: Path,
    declared: Declared,
    slow_fraction: float = DEFAULT_SLOW_FRACTION,
    health_max_age: float | None = None,
) -> dict[str, Any]:
    """The fleet document for the ``declared`` hosts from the records in ``reports_dir``;
    ``health_max_age`` (seconds): a host whose health report is missing or older fails."""
    found: Gathered = gather(reports_dir, declared.hosts)
    now = time.time()
    # Each host's records are let go once its entry is made: they are not kept beside the
    # whole fleet's entries.
    hosts = [host_entry(found.hosts.pop(name), now, health_max_age) for name in declared.hosts]
    drift = flag_drift(hosts)
    groups = flag_slow(hosts, slow_fraction)
    ready = sum(host["ready"] for host in hosts)
    return {
        "schema_version": FLEET_SCHEMA_VERSION,
        "tool": "rocmlab fleet-report",
        "rocmlab_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "reports_dir": decodable(str(reports_dir)),
        "declared": {"source": decodable(declared.source), "reader": declared.reader},
        "slow_fraction": slow_fraction,
        "health_max_age_seconds": health_max_age,
        "ready": ready == len(hosts),
        "summary": {
            "declared": len(hosts),
            "ready": ready,
            "not_ready": len(hosts) - ready,
            "drift": sum(bool(host["drift"]) for host in hosts),
            "slow": sum(host["slow"] is not None for host in hosts),
            "undeclared": len(found.undeclared),
        },
        "hosts": hosts,
        "undeclared": found.undeclared,
        "drift": drift,
        "speed_groups": groups,
        "cache": found.cache,
        "cluster": found.cluster,
    }


def host_entry(
    rec: HostRecords, now: float | None = None, health_max_age: float | None = None
) -> dict[str, Any]:
    """One host's row: its state and why, what its records say, no flags yet. ``now`` is when
    the report is made (the health report's age is counted from it)."""
    report = rec.report or {}
    facts = (rec.preflight or {}).get("facts", {})
    doctor = report.get("doctor")
    now = time.time() if now is None else now
    health = health_summary(rec.health, rec.health_tier2, now)
    state, reason = host_state(rec, health, health_max_age)
    return {
        "host": rec.host,
        "ready": state == "ready",
        "state": state,
        "reason": reason,
        "problems": rec.problems,
        "files": rec.files,
        "rollout": _pick(rec.rollout, "state", "reason", "batch", "rollout_id", "created", "rocm"),
        "preflight": _pick(rec.preflight, "passed", "created"),
        "machine": report.get("host"),
        "report_schema": report.get("schema_version"),
        "smoke_passed": report.get("passed"),
        "exit_code": report.get("exit_code"),
        "error": report.get("error"),
        "backend": report.get("backend"),
        "device_name": report.get("device_name"),
        "gfx_arch": report.get("gfx_arch"),
        "distribution": facts.get("distribution"),
        "versions": {
            "rocm": installed_rocm(rec),
            "rocm_wheels": report.get("rocm_wheels"),
            "torch": report.get("torch_version"),
            "hip": report.get("hip_version"),
            "kernel": facts.get("kernel"),
        },
        "test_accuracy": report.get("test_accuracy"),
        "min_accuracy": report.get("min_accuracy"),
        "samples_per_second": report.get("samples_per_second"),
        "world_size": report.get("world_size"),
        "matmul_tflops": report.get("matmul_tflops"),
        "doctor": {"verdict": doctor["verdict"]} if doctor else None,
        "health": health,
        "known_good": known_good_summary(rec.rollout, now),
        "techniques": _techniques(report),
        "amp_speedup": report.get("amp_speedup"),
        "checks": host_checks(rec),
        "drift": [],
        "slow": None,
    }


def _pick(doc: dict[str, Any] | None, *keys: str) -> dict[str, Any] | None:
    return {key: doc.get(key) for key in keys} if doc is not None else None


def release(text: str | None) -> str | None:
    """A ROCm release as X.Y.Z: "7.1" (rocm_repo_version) and "7.1.0-20" (AMD's
    /opt/rocm/.info/version) are both "7.1.0"; None for anything else. The support catalog's
    parser, as the rollout's preflight line reads releases."""
    return leading_release(text)


def installed_rocm(rec: HostRecords) -> str | None:
    """The system's ROCm release read from the host: after its change (the rollout record, AMD's
    source), else before the rollout (the preflight record: AMD's or the distribution's), else
    what the smoke job found on the machine (its report's ``system``, schema 3 on)."""
    rocm = (rec.rollout or {}).get("rocm")
    if rocm is not None:
        return rocm["installed"]
    if rec.preflight is not None:
        return rec.preflight.get("facts", {}).get("rocm_version")
    return (rec.report or {}).get("system_rocm")


def release_differs(rollout: dict[str, Any] | None) -> str | None:
    """ "installed 6.4.2, configured 7.1" when the release read from the host after its change is
    not the one the inventory configured; None when they agree or nothing was configured."""
    rocm = (rollout or {}).get("rocm")
    if rocm is None or rocm["configured"] is None:
        return None
    if release(rocm["installed"]) == release(rocm["configured"]):
        return None
    return f"installed {rocm['installed'] or 'no ROCm release'}, configured {rocm['configured']}"


# Health verdicts from the best to the worst.
HEALTH_VERDICTS = ("pass", "warn", "fail")


def _health_report(health: dict[str, Any], now: float) -> dict[str, Any]:
    """One health report as the fleet report shows it: its verdict, tier, when it finished and
    how long ago, and its failed checks with their fixes."""
    return {
        "verdict": health["verdict"],
        "tier": health["tier"],
        "finished": health["finished"],
        "age_seconds": max(0.0, round(now - health["finished_seconds"], 1)),
        "failed": [
            {"name": c["name"], "saw": c["saw"], "fix": c["fix"]}
            for c in health["checks"]
            if c["status"] == "fail"
        ],
    }


def health_summary(
    root: dict[str, Any] | None, tier2: dict[str, Any] | None, now: float
) -> dict[str, Any] | None:
    """What the fleet report shows of a host's health: root's latest report (tier 0) and the
    smoke account's (tier 2), each under ``reports``, and the one that stands for the host at
    the top: the worse verdict, root's of two alike. Each stands until its own writer's next
    report, so the account's report can add a FAIL to root's, never hide it (a time from the
    future was refused when it was read: rocmlab.fleet.records.read_health)."""
    reports = [_health_report(r, now) for r in (root, tier2) if r is not None]
    if not reports:
        return None
    # max() keeps the first of equals: root's report, listed first.
    standing = max(reports, key=lambda r: HEALTH_VERDICTS.index(r["verdict"]))
    return {**standing, "reports": reports}


def known_good_summary(rollout: dict[str, Any] | None, now: float) -> dict[str, Any] | None:
    """The host's known-good state as its rollout record read it from the host: the ROCm
    release (None without AMD's ROCm), when it was recorded and how long ago; None when the
    record says nothing of it."""
    known = (rollout or {}).get("known_good")
    if known is None:
        return None
    return {
        "release": known["release"],
        "since": known["since"],
        "age_seconds": max(0.0, round(now - known["since_seconds"], 1)),
    }


def _failed_text(report: dict[str, Any]) -> str:
    """``ras_errors: <fix>; and 1 more failed check(s) (tier 0, 3h ago)``."""
    first = report["failed"][0]
    more = len(report["failed"]) - 1
    also = f"; and {more} more failed check(s)" if more else ""
    when = f"tier {report['tier']}, {age_text(report['age_seconds'])} ago"
    return f"{first['name']}: {first['fix'] or first['saw']}{also} ({when})"


def _health_reason(health: dict[str, Any] | None, max_age: float | None) -> tuple[str, str] | None:
    """(state, reason) when the health reports fail the host: a FAIL verdict of either (the
    first failed check and its fix, each report's), or, with a maximum age, no report of root's
    or one older than it (the account's tier 2 runs daily and stands in for no root report)."""
    reports = health["reports"] if health is not None else []
    failed = [report for report in reports if report["verdict"] == "fail"]
    if failed:  # root's first: the one that stands
        return "health_failed", "health: " + "; also ".join(map(_failed_text, failed))
    if max_age is None:
        return None
    root = next((r for r in reports if r["tier"] in ROOT_TIERS), None)
    if root is None:
        only = "; the smoke account's tier 2 does not stand in for it" if reports else ""
        return (
            "health_missing",
            f"health: no report (--health-max-age {age_text(max_age)}){only}",
        )
    if root["age_seconds"] > max_age:
        return (
            "health_stale",
            f"health: the last report is {age_text(root['age_seconds'])} old, older than "
            f"--health-max-age {age_text(max_age)}",
        )
    return None


def host_state(
    rec: HostRecords, health: dict[str, Any] | None = None, health_max_age: float | None = None
) -> tuple[str, str | None]:
    """(state, reason) of one host; the reason is None only for a ready host.

    The rollout record's state wins when present (with any unusable record named after its
    reason); then unusable records (malformed input fails the host, and a health FAIL is named
    after them); then the smoke report:
    none, failed, or passed; then the ROCm release the rollout read from the host against the
    configured one; then the latest health report: a FAIL verdict fails the host, and so does a
    missing or stale one when a maximum age is given; else the host is ready.
    """
    rollout = rec.rollout
    if rollout is not None and rollout["state"] != "ready":
        label = ROLLOUT_LABELS[rollout["state"]]
        reason = f"{label}: {rollout['reason']}" if rollout["reason"] else label
        return rollout["state"], "; also ".join([reason, *rec.problems])
    if rec.problems:
        # A health FAIL is named too: an unusable record of the account's hides none of root's.
        failed = _health_reason(health, None)
        also = [failed[1]] if failed is not None else []
        return "unreadable", "; also ".join(["; ".join(rec.problems), *also])
    says_ready = " (the rollout record says ready)" if rollout is not None else ""
    report = rec.report
    if report is None:
        preflight = rec.preflight
        if preflight is not None and not preflight["passed"]:
            failed = [c["name"] for c in preflight["checks"] if c["status"] == "fail"]
            return (
                "no_report",
                f"no report; preflight failed: {', '.join(failed) or 'passed=false'}",
            )
        return "no_report", f"no report{says_ready}"
    if not report["passed"]:
        return "smoke_failed", f"smoke job failed: {_smoke_failure(report)}{says_ready}"
    differs = release_differs(rollout)
    if differs is not None:
        return "release_differs", differs
    failed = _health_reason(health, health_max_age)
    if failed is not None:
        return failed
    return "ready", None


def _smoke_failure(report: dict[str, Any]) -> str:
    if report["error"]:
        return str(report["error"])
    failed = [c for c in report["checks"] if not c["passed"]]
    if failed:
        return "; ".join(f"{c['name']}: {c['detail']}" for c in failed)
    return f"exit code {report['exit_code']}"


def host_checks(rec: HostRecords) -> list[dict[str, Any]]:
    """Every check of the host's preflight record, doctor document, health reports (root's, then
    the smoke account's tier 2) and smoke report, in order."""
    checks: list[dict[str, Any]] = []
    for check in (rec.preflight or {}).get("checks", []):
        checks.append(_check("preflight", check["name"], check["status"], check["detail"], None))
    doctor = (rec.report or {}).get("doctor") or {}
    for check in doctor.get("checks", []):
        saw = " | ".join([check["saw"], *check["evidence"]])
        checks.append(_check("doctor", check["name"], check["status"], saw, check["fix"]))
    for source, health in (("health", rec.health), ("health_tier2", rec.health_tier2)):
        for check in (health or {}).get("checks", []):
            saw = " | ".join([check["saw"], *check["evidence"]])
            checks.append(_check(source, check["name"], check["status"], saw, check["fix"]))
    for check in (rec.report or {}).get("checks", []):
        rank = check.get("rank")
        name = f"{check['name']}[rank {rank}]" if isinstance(rank, int) else check["name"]
        status = "pass" if check["passed"] else "fail"
        checks.append(_check("smoke", name, status, check["detail"], None))
    return checks


@lru_cache(maxsize=SHARED_CHECKS)
def _check(source: str, name: str, status: str, detail: str, fix: str | None) -> dict[str, Any]:
    """A row's check. Most are the same on every host: each distinct one is made once and
    shared by the rows holding it (nothing changes them), which saves the memory of 10,000
    hosts' copies and lets rocmlab.fleet.jsonout write a list of them it has written before
    from what it wrote then."""
    return {"source": source, "name": name, "status": status, "detail": detail, "fix": fix}


def _techniques(report: dict[str, Any]) -> list[dict[str, Any]]:
    verdicts = []
    for name in report.get("techniques") or []:
        checks = [c for c in report["checks"] if c["name"] == name]
        verdicts.append(
            {
                "name": name,
                "passed": all(c["passed"] for c in checks) if checks else None,
                "detail": "; ".join(c["detail"] for c in checks) or "no check in the report",
            }
        )
    return verdicts


def flag_drift(hosts: list[dict[str, Any]]) -> dict[str, Any]:
    """Flag hosts whose versions differ from the fleet's majority; return each field's counts.

    The majority is the most common value among the hosts that report one. When values tie for
    most common there is none, and every host reporting the field is flagged.
    """
    summary: dict[str, Any] = {}
    for name in DRIFT_FIELDS:
        values = {h["host"]: h["versions"][name] for h in hosts if h["versions"][name] is not None}
        counts = Counter(values.values()).most_common()
        tied = len(counts) > 1 and counts[0][1] == counts[1][1]
        majority = counts[0][0] if counts and not tied else None
        summary[name] = {"majority": majority, "counts": dict(counts)}
        if len(counts) < 2:
            continue
        for host in hosts:
            value = values.get(host["host"])
            if value is not None and value != majority:
                host["drift"].append({"field": name, "value": value, "majority": majority})
    return summary


def _median(values: list[float]) -> float:
    """The median of positive finite ``values``, as statistics.median but never overflowing
    (the mean of the middle two is taken as halves: two values near the float maximum
    would sum to infinity)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return ordered[middle - 1] / 2 + ordered[middle] / 2


def flag_slow(hosts: list[dict[str, Any]], fraction: float) -> list[dict[str, Any]]:
    """Flag hosts below ``fraction`` x the median samples/s of their GPU model; return the groups.

    Groups are hosts with the same ``device_name`` and a positive samples/s (passed or not),
    split by the run's process count (``world_size``: samples/s is the sum over the processes, so
    a four-GPU run is not a peer of a one-GPU run); a group of one host has no peers, and its
    host is never slow.
    """
    members: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for host in hosts:
        speed = host["samples_per_second"]
        if host["device_name"] is not None and speed is not None and speed > 0:
            key = (host["device_name"], host["world_size"] or 1)
            members.setdefault(key, []).append(host)
    groups = []
    for (device_name, world_size), group in sorted(members.items()):
        median = _median([h["samples_per_second"] for h in group])
        threshold = fraction * median
        for host in group:
            if len(group) > 1 and host["samples_per_second"] < threshold:
                host["slow"] = {
                    "device_name": device_name,
                    "median": median,
                    "threshold": threshold,
                    "ratio": host["samples_per_second"] / median,
                }
        groups.append(
            {
                "device_name": device_name,
                "world_size": world_size,
                "hosts": [h["host"] for h in group],
                "median": median,
                "threshold": threshold,
            }
        )
    return groups
