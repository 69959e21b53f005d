"""Fleets of records for the fleet report tests, derived from one real smoke report.

tests/fixtures/fleet/smoke-cpu-mnist.json is a real ``rocmlab smoke --json`` report (see the
PROVENANCE.md beside it). Every smoke report here is a copy of it with the changes each helper
names; the preflight and rollout records and doctor documents follow the input formats in
docs/fleet-report.md.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rocmlab_testutil import REPO

from rocmlab.cli import main
from rocmlab.fleet.schema import FLEET_SCHEMA

FIXTURES = REPO / "tests" / "fixtures" / "fleet"
REAL_REPORT = FIXTURES / "smoke-cpu-mnist.json"

# What a ROCm run puts in the fields the real (CPU) report has as a CPU run: formats as rocminfo
# and torch's collect_env print them (PROVENANCE.md).
GPUS: dict[str, dict[str, Any]] = {
    "rx7900xtx": {
        "backend": "rocm",
        "torch_build": "rocm",
        "device": "cuda:0",
        "device_name": "AMD Radeon RX 7900 XTX",
        "gfx_arch": "gfx1100",
        "device_count": 1,
        "torch_version": "2.9.1+rocm6.3",
        "hip_version": "6.3.42131",
        "amp_dtype": "bfloat16",
        "matmul_tflops": {"float32": 30.1, "bfloat16": 88.7},
    },
    "mi210": {
        "backend": "rocm",
        "torch_build": "rocm",
        "device": "cuda:0",
        "device_name": "AMD Instinct MI210",
        "gfx_arch": "gfx90a:sramecc+:xnack-",
        "device_count": 1,
        "torch_version": "2.9.1+rocm6.3",
        "hip_version": "6.3.42131",
        "amp_dtype": "bfloat16",
        "matmul_tflops": {"float32": 19.8, "bfloat16": 120.4},
    },
}


def fleet_report(
    reports_dir: Path, hosts: str, capsys: pytest.CaptureFixture[str], *more: str
) -> tuple[int, dict[str, Any], str]:
    """Run the command in-process: (exit code, fleet.json, stdout)."""
    code = main(["fleet-report", str(reports_dir), "--hosts", hosts, *more])
    out = capsys.readouterr().out
    fleet = json.loads((reports_dir / "fleet.json").read_text())
    jsonschema.validate(fleet, FLEET_SCHEMA)  # every run's document, whatever it holds
    return code, fleet, out


def ready_reports(*hosts: str) -> dict[str, Any]:
    """A passing report per host, each with its own hostname."""
    return {f"{host}.json": smoke_report(host) for host in hosts}


def real_report() -> dict[str, Any]:
    """The real report, parsed (a fresh copy each time)."""
    return json.loads(REAL_REPORT.read_text())


def smoke_report(
    host: str, gpu: str | None = None, speed: float | None = None, **changes: Any
) -> dict[str, Any]:
    """The real report as if run on ``host``: its hostname, optionally ``gpu``'s fields and
    ``speed`` samples/s (also in its epoch line), then ``changes``."""
    report = real_report()
    report["host"] = host
    if gpu is not None:
        report.update(copy.deepcopy(GPUS[gpu]))
    if speed is not None:
        report["samples_per_second"] = speed
        report["epoch_stats"][-1]["samples_per_second"] = speed
    report.update(changes)
    return report


def failed_check(report: dict[str, Any], name: str, detail: str) -> dict[str, Any]:
    """``report`` with its check ``name`` failed (``passed`` false, exit code 1)."""
    for check in report["checks"]:
        if check["name"] == name:
            check.update(passed=False, detail=detail)
    report.update(passed=False, exit_code=1)
    return report


def doctor_document(host: str, checks: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``rocmlab doctor --json`` document with ``checks`` (name, status, saw, fix, evidence)."""
    statuses = {check["status"] for check in checks}
    # The doctor's rule: fail when a check failed; warn when one warned or crashed (error).
    verdict = "fail" if "fail" in statuses else "warn" if statuses & {"warn", "error"} else "pass"
    return {
        "schema_version": 1,
        "tool": "rocmlab doctor",
        "rocmlab_version": "0.1.0",
        "host": host,
        "created": "2026-12-02T10:00:00Z",
        "user": "researcher",
        "verdict": verdict,
        "exit_code": 1 if verdict == "fail" else 0,
        "checks": checks,
    }


def schema2(
    report: dict[str, Any],
    doctor: dict[str, Any] | None = None,
    techniques: dict[str, tuple[bool, str]] | None = None,
    amp_speedup: float | None = None,
    profile: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``report`` as schema 2: the doctor document embedded, and one check per technique."""
    techniques = techniques or {}
    report.update(
        schema_version=2,
        doctor=doctor,
        model="mlp",
        techniques=list(techniques),
        amp_speedup=amp_speedup,
        profile=profile,
    )
    for name, (passed, detail) in techniques.items():
        report["checks"].append({"name": name, "passed": passed, "detail": detail, "rank": None})
        if not passed:
            report.update(passed=False, exit_code=1)
    return report


def preflight_record(
    host: str,
    rocm_version: str | None = "6.3.1",
    kernel: str = "6.1.0-28-amd64",
    failed: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A preflight record: every check passed but those in ``failed`` (name: detail)."""
    names = ("reachable", "disk_space", "apt_lock", "clock_skew", "mirrors", "python")
    failed = failed or {}
    return {
        "schema_version": 1,
        "host": host,
        "created": "2026-12-02T09:00:00Z",
        "passed": not failed,
        "checks": [
            {
                "name": name,
                "status": "fail" if name in failed else "pass",
                "detail": failed.get(name, "ok"),
            }
            for name in names
        ],
        "facts": {
            "distribution": "Debian 12",
            "kernel": kernel,
            "python": "3.11.2",
            "rocm_source": "amd",
            "rocm_version": rocm_version,
        },
    }


def rollout_record(
    host: str,
    state: str,
    reason: str | None = None,
    batch: int | None = 1,
    rocm: dict[str, str | None] | None = None,
    known_good: Any = None,
) -> dict[str, Any]:
    """A rollout record; ``rocm``: the release read from the host after the change and the
    configured one (``{"installed": "7.1.0", "configured": "7.1"}``), left out when None;
    ``known_good``: the host's known-good record as the rollout read it (``{"release": "6.4.2",
    "since": "2026-12-01T09:00:00Z"}``), left out when None."""
    record: dict[str, Any] = {
        "schema_version": 1,
        "host": host,
        "created": "2026-12-02T09:30:00Z",
        "rollout_id": "20261202T090000",
        "state": state,
        "reason": reason,
        "batch": batch,
    }
    if rocm is not None:
        record["rocm"] = rocm
    if known_good is not None:
        record["known_good"] = known_good
    return record


def cache_record(**kinds: tuple[int, int]) -> dict[str, Any]:
    """The lab cache's record: ``kind=(upstream_bytes, served_bytes)``."""
    return {
        "schema_version": 1,
        "cache_host": "cache.lab",
        "kinds": {
            kind: {"upstream_bytes": upstream, "served_bytes": served}
            for kind, (upstream, served) in kinds.items()
        },
    }


def _write(path: Path, content: dict[str, Any] | str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content, indent=2))


def write_fleet(
    reports_dir: Path,
    reports: dict[str, Any] | None = None,
    preflight: dict[str, Any] | None = None,
    rollout: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Lay records out as the rollout does: ``<file name>: content`` per kind (a dict is written
    as JSON, text and bytes as they are); ``extra`` is ``relative path: content``."""
    for name, content in (reports or {}).items():
        _write(reports_dir / name, content)
    for name, content in (preflight or {}).items():
        _write(reports_dir / "fleet" / "preflight" / name, content)
    for name, content in (rollout or {}).items():
        _write(reports_dir / "fleet" / "rollout" / name, content)
    for name, content in (extra or {}).items():
        _write(reports_dir / name, content)
    return reports_dir


def read_outputs(reports_dir: Path) -> tuple[dict[str, Any], str, str]:
    """(fleet.json parsed, fleet.html, fleet.junit.xml) of a run."""
    return (
        json.loads((reports_dir / "fleet.json").read_text()),
        (reports_dir / "fleet.html").read_text(),
        (reports_dir / "fleet.junit.xml").read_text(),
    )


def hosts_by_name(fleet: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """fleet.json's host entries by inventory name."""
    return {host["host"]: host for host in fleet["hosts"]}


def lab_fleet(reports_dir: Path) -> list[str]:
    """A lab of eleven declared hosts with a bit of everything; returns the declared hosts.

    Four Radeon workstations and two Instinct servers that passed (one Radeon slow, one with an
    older torch, the servers with schema-2 reports: doctor, techniques, AMP speed-up), one
    quarantined by its smoke job, one unreachable, one skipped, one truncated report, one with
    nothing at all; the lab cache's and cluster check's records; and a report for a host that
    is not declared.
    """
    radeon = {f"ws-{n:02d}": 101_000.0 + 900 * n for n in range(1, 5)}
    radeon["ws-03"] = 52_000.0
    reports: dict[str, Any] = {
        f"{host}.json": smoke_report(host, gpu="rx7900xtx", speed=speed)
        for host, speed in radeon.items()
    }
    reports["ws-04.json"]["torch_version"] = "2.8.0+rocm6.3"
    for host, speed in (("mi-01", 61_500.0), ("mi-02", 60_800.0)):
        reports[f"{host}.json"] = schema2(
            smoke_report(host, gpu="mi210", speed=speed),
            doctor=doctor_document(host, []),
            techniques={"amp": (True, "fp32 0.92 s, bf16 0.41 s per epoch"),
                        "checkpoint": (True, "gradients agree: max diff 0")},
            amp_speedup=2.24,
        )  # fmt: skip
    reports["ws-05.json"] = failed_check(
        smoke_report("ws-05", gpu="rx7900xtx", speed=99_000.0, test_accuracy=0.312),
        "accuracy",
        "test accuracy 0.3120, gate >= 0.9400",
    )
    text = json.dumps(smoke_report("ws-08", gpu="rx7900xtx"), indent=2)
    reports["ws-08.json"] = text[: len(text) // 3]
    reports["old-ws.json"] = smoke_report("old-ws")
    hosts = [*radeon, "mi-01", "mi-02", "ws-05", "ws-06", "ws-07", "ws-08", "ws-09"]
    # The known-good state the rollout read from each host it proved (ws-04: an older one).
    known = {"release": "6.3.1", "since": "2026-12-01T09:00:00Z"}
    rollout = {
        f"{h}.json": rollout_record(h, "ready", known_good=known)
        for h in [*radeon, "mi-01", "mi-02"]
    }
    rollout["ws-04.json"]["known_good"] = {"release": "6.2.4", "since": "2026-10-15T08:00:00Z"}
    rollout["ws-05.json"] = rollout_record(
        "ws-05", "quarantined", "smoke job failed: accuracy 0.312 below 0.94", known_good=known
    )
    rollout["ws-06.json"] = rollout_record("ws-06", "unreachable", "ssh: connect timed out", None)
    rollout["ws-07.json"] = rollout_record("ws-07", "skipped", "user logged in", 2)
    preflight = {f"{h}.json": preflight_record(h) for h in hosts if h not in ("ws-06", "ws-09")}
    cache = cache_record(
        apt=(2_400_000_000, 21_600_000_000),
        wheels=(4_800_000_000, 43_200_000_000),
        datasets=(55_000_000, 495_000_000),
    )
    cluster = {"schema_version": 1, "verdict": "pass", "backend": "gloo", "world_size": 8}
    write_fleet(
        reports_dir,
        reports=reports,
        preflight=preflight,
        rollout=rollout,
        extra={"fleet/cache.json": cache, "fleet/cluster.json": cluster},
    )
    return hosts
