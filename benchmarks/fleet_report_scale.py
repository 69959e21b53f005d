#!/usr/bin/env python3
"""Benchmark: ``rocmlab fleet-report`` over 100, 1,000 and 10,000 hosts, in one run.

For each size a reports directory is laid out in a temporary directory as a rollout leaves it
(docs/fleet-report.md, "Inputs"): per declared host a smoke report (``<host>.json``), a preflight
record (``fleet/preflight/``), a rollout record (``fleet/rollout/``) and a health report
(``health/``), the lab cache's and the cluster check's records, a few files of hosts that are not
declared, and an INI inventory listing the hosts (``hosts.ini``, as an admin writes one). The
smoke reports are copies of the real report tests/fixtures/fleet/smoke-cpu-mnist.json with the
fields of a ROCm run (as tests/python/fleet_testutil.py makes them); two in five are schema 2
with the doctor's document embedded and two techniques. The health reports follow
``rocmlab.health.report`` (its tier-0 checks, in its order). The lab is not uniform: a few hosts
failed their smoke job, were quarantined or unreachable, have a failing health check, a
truncated report, an older torch (drift) or a slow GPU, as in a real lab.

``rocmlab fleet-report`` then runs on each in a process of its own (``python -m rocmlab``,
without ``ansible-inventory`` on PATH, so the inventory is read by rocmlab itself and the time is
the report's), ``--repeat`` times; the benchmark prints per size the median wall time, the time
per 1,000 hosts and its ratio to the smallest size (1.0 when the time is linear in the hosts),
the peak RSS of that process (``wait4``'s ``ru_maxrss``) and the outputs' sizes. Usage:

  .venv/bin/python benchmarks/fleet_report_scale.py [--sizes 100,1000,10000] [--repeat 3]
      [--json out.json] [--profile out.prof]

``--profile`` also runs the largest size once under cProfile and prints its top functions.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
REAL_REPORT = REPO / "tests" / "fixtures" / "fleet" / "smoke-cpu-mnist.json"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

# The fields a ROCm run fills in where the real (CPU) report has a CPU run's, as in
# tests/python/fleet_testutil.py (formats of rocminfo and torch's collect_env).
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
SPEEDS = {"rx7900xtx": 101_000.0, "mi210": 61_000.0}

# rocmlab doctor's checks (docs/doctor.md) and what a provisioned host's look like.
DOCTOR_CHECKS = (
    ("amdgpu_driver", "amdgpu loaded (version 6.10.5)", ["/sys/module/amdgpu/version: 6.10.5"]),
    ("device_nodes", "/dev/kfd crw-rw---- root:render; 1 render node", ["/dev/dri/renderD128"]),
    ("gpu_groups", "researcher is in render and video", ["groups: researcher render video"]),
    ("gpu_count", "1 GPU in the KFD topology", ["node 1: gfx90a, simd_count 416"]),
    ("gfx_override", "HSA_OVERRIDE_GFX_VERSION not set; gfx90a is supported", []),
    ("igpu_hidden", "no integrated GPU", []),
    ("rocm_release", "ROCm 6.3.1 (/opt/rocm/.info/version)", ["rocm-core 6.3.1.60301-48~22.04"]),
    ("torch_build", "torch 2.9.1+rocm6.3, HIP 6.3.42131", ["/opt/rocmlab/venvs/pytorch"]),
    ("torch_gpu", "1 device: AMD Instinct MI210", ["torch.cuda.device_count() = 1"]),
    ("opencl", "skipped: clinfo not installed", []),
    ("kernel_log", "no amdgpu error in this boot's log", []),
    ("secure_boot", "Secure Boot off", ["mokutil --sb-state: SecureBoot disabled"]),
    ("dkms_headers", "amdgpu-dkms not installed: the kernel's amdgpu", []),
    ("kernel_support", "kernel 6.1.0-28-amd64 supported by ROCm 6.3", []),
    ("pcie_link", "0000:c1:00.0: 16.0 GT/s PCIe x16 of 16.0 GT/s x16", []),
    ("dev_shm", "/dev/shm 31.4 GiB free", []),
)
# rocmlab health's tier-0 checks in their order (docs/health.md, "Checks").
HEALTH_CHECKS = (
    ("amdgpu_driver", "amdgpu loaded (version 6.10.5)", ["/sys/module/amdgpu/version: 6.10.5"]),
    ("device_nodes", "/dev/kfd crw-rw---- root:render; 1 render node", ["/dev/dri/renderD128"]),
    ("node_group", "/dev/kfd and renderD128 in group render", []),
    ("gpu_groups", "researcher is in render and video", ["groups: researcher render video"]),
    ("gpu_count", "1 GPU, 1 expected", ["node 1: gfx90a"]),
    ("kernel_log", "no new amdgpu line since the last run", []),
    ("dkms_headers", "amdgpu-dkms not installed: the kernel's amdgpu", []),
    ("pcie_link", "0000:c1:00.0: 16.0 GT/s PCIe x16 of 16.0 GT/s x16", []),
    ("pcie_replays", "0000:c1:00.0: 0 replays (0 at the last run)", []),
    ("ras_errors", "0000:c1:00.0 umc: ue 0, ce 0, de 0", ["0000:c1:00.0 umc: ue 0, ce 0, de 0"]),
    ("rocm_version", "ROCm 6.3.1 as recorded in known-good.json", []),
    ("framework_versions", "torch 2.9.1+rocm6.3 as recorded", ["torch-2.9.1+rocm6.3.dist-info"]),
    ("disk_space", "/opt/rocm 212 GiB free, /boot 801 MiB free", []),
    ("host_files", "every file read whole", []),
    ("health_state", "state read and saved", []),
)
PREFLIGHT_CHECKS = ("reachable", "disk_space", "apt_lock", "clock_skew", "mirrors", "python")


def utc(seconds: float) -> str:
    return time.strftime(TIME_FORMAT, time.gmtime(seconds))


def host_name(index: int) -> str:
    return f"gpu-node-{index:05d}"


def smoke_report(real: dict[str, Any], host: str, gpu: str, speed: float) -> dict[str, Any]:
    """The real report as if run on ``host`` with ``gpu`` at ``speed`` samples/s."""
    report = copy.deepcopy(real)
    report["host"] = host
    report.update(copy.deepcopy(GPUS[gpu]))
    report["samples_per_second"] = speed
    report["epoch_stats"][-1]["samples_per_second"] = speed
    report["train_seconds"] = report["epoch_stats"][-1]["seconds"] = 60_000 / speed
    return report


def doctor_document(host: str, created: str) -> dict[str, Any]:
    """A passing ``rocmlab doctor --json`` document of a provisioned MI210 host."""
    checks = [
        {
            "name": name,
            "status": "skip" if saw.startswith("skipped") else "pass",
            "saw": saw,
            "fix": None,
            "evidence": evidence,
        }
        for name, saw, evidence in DOCTOR_CHECKS
    ]
    return {
        "schema_version": 1,
        "tool": "rocmlab doctor",
        "rocmlab_version": "0.1.0",
        "host": host,
        "created": created,
        "user": "researcher",
        "verdict": "pass",
        "exit_code": 0,
        "checks": checks,
    }


def schema2(report: dict[str, Any], host: str) -> dict[str, Any]:
    """``report`` as schema 2: the doctor's document, AMP and checkpoint techniques."""
    report.update(
        schema_version=2,
        doctor=doctor_document(host, report["created"]),
        model="mlp",
        techniques=["amp", "checkpoint"],
        amp_speedup=2.24,
        profile=None,
    )
    report["checks"] += [
        {
            "name": "amp",
            "passed": True,
            "detail": "fp32 0.92 s, bf16 0.41 s per epoch",
            "rank": None,
        },
        {
            "name": "checkpoint",
            "passed": True,
            "detail": "gradients agree: max diff 0",
            "rank": None,
        },
    ]
    return report


def failed(report: dict[str, Any], name: str, detail: str) -> dict[str, Any]:
    for check in report["checks"]:
        if check["name"] == name:
            check.update(passed=False, detail=detail)
    report.update(passed=False, exit_code=1)
    return report


def health_report(host: str, finished: float, ras_failed: bool) -> dict[str, Any]:
    """A tier-0 ``rocmlab health --json`` report; ``ras_failed``: uncorrectable errors."""
    checks = []
    for name, saw, evidence in HEALTH_CHECKS:
        check = {
            "name": name,
            "tier": 0,
            "status": "pass",
            "saw": saw,
            "fix": None,
            "evidence": list(evidence),
            "seconds": 0.004,
            "budget_seconds": 4.0,
        }
        if name in ("host_files", "health_state"):
            check.update(seconds=None, budget_seconds=None)
        if name == "ras_errors" and ras_failed:
            check.update(
                status="fail",
                saw="uncorrectable errors: 0000:c1:00.0 umc ue 2 (0 at the last run)",
                fix="drain the node and reboot (amdgpu retires the bad pages); if they come "
                "back, service the card",
                evidence=["0000:c1:00.0 umc: ue 2, ce 0, de 0"],
            )
        checks.append(check)
    verdict = "fail" if ras_failed else "pass"
    return {
        "schema_version": 1,
        "tool": "rocmlab health",
        "rocmlab_version": "0.1.0",
        "host": host,
        "user": "root",
        "tier": 0,
        "started": utc(finished - 1),
        "finished": utc(finished),
        "duration_seconds": 0.21,
        "budget_seconds": 5.0,
        "verdict": verdict,
        "exit_code": int(ras_failed),
        "checks": checks,
    }


def preflight_record(host: str, kernel: str, created: str) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "host": host,
        "created": created,
        "passed": True,
        "checks": [{"name": n, "status": "pass", "detail": "ok"} for n in PREFLIGHT_CHECKS],
        "facts": {
            "distribution": "Debian 12",
            "kernel": kernel,
            "python": "3.11.2",
            "rocm_source": "amd",
            "rocm_version": "6.3.1",
        },
    }


def rollout_record(
    host: str,
    state: str,
    reason: str | None,
    batch: int | None,
    known_good: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "host": host,
        "created": "2026-12-02T09:30:00Z",
        "rollout_id": "20261202T090000",
        "state": state,
        "reason": reason,
        "batch": batch,
        "known_good": known_good,
    }


def _write(path: Path, doc: dict[str, Any] | str) -> None:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2))


def make_lab(reports_dir: Path, hosts: int, seed: int = 22) -> Path:
    """Lay out the records of a lab of ``hosts`` declared hosts in ``reports_dir`` (which must
    not exist); returns its INI inventory (beside it, not inside it)."""
    rng = random.Random(seed)
    real = json.loads(REAL_REPORT.read_text())
    for sub in ("fleet/preflight", "fleet/rollout", "health"):
        (reports_dir / sub).mkdir(parents=True)
    now = time.time()
    names = [host_name(i) for i in range(1, hosts + 1)]
    for index, host in enumerate(names):
        gpu = "mi210" if index % 5 in (1, 3) else "rx7900xtx"
        # What happened to this host: most are ready; a few of each other state.
        roll = rng.random()
        speed = SPEEDS[gpu] * rng.uniform(0.93, 1.07)
        if rng.random() < 0.03:
            speed *= 0.5  # slow: a GPU in a narrow slot
        report = smoke_report(real, host, gpu, round(speed, 3))
        report["created"] = utc(now - rng.uniform(600, 7200))
        if gpu == "mi210":
            report = schema2(report, host)
        if rng.random() < 0.02:
            report["torch_version"] = "2.8.0+rocm6.3"  # drift: not upgraded
        kernel = "6.1.0-28-amd64" if rng.random() > 0.02 else "6.1.0-27-amd64"
        state, reason, batch = "ready", None, 1 + index // 50
        if roll < 0.01:
            report = failed(report, "accuracy", "test accuracy 0.3120, gate >= 0.9400")
            report["test_accuracy"] = 0.312
            state, reason = "quarantined", "smoke job failed: accuracy 0.312 below 0.94"
        elif roll < 0.015:
            state, reason, batch, report = "unreachable", "ssh: connect timed out", None, None
        elif roll < 0.02:
            state, reason = "skipped", "user logged in"
        if report is not None:
            text = json.dumps(report, indent=2)
            if 0.02 <= roll < 0.021:
                text = text[: len(text) // 3]  # cut short: a full disk on the host
            _write(reports_dir / f"{host}.json", text)
        if state != "unreachable":
            _write(
                reports_dir / "fleet" / "preflight" / f"{host}.json",
                preflight_record(host, kernel, utc(now - 7300)),
            )
            health = health_report(host, now - rng.uniform(60, 900), 0.021 <= roll < 0.031)
            _write(reports_dir / "health" / f"{host}.json", health)
        # The known-good state the rollout read from the host (none where it read nothing).
        known_good = (
            {"release": "6.3.1", "since": utc(now - 86400 - 3600 * (index % 48))}
            if state in ("ready", "quarantined")
            else None
        )
        _write(
            reports_dir / "fleet" / "rollout" / f"{host}.json",
            rollout_record(host, state, reason, batch, known_good),
        )
    for retired in range(max(1, hosts // 1000)):  # machines taken out of the inventory
        _write(
            reports_dir / f"retired-{retired:03d}.json",
            smoke_report(real, "old", "rx7900xtx", 99_000.0),
        )
    kinds = {
        "apt": (2_400_000_000, 21_600_000_000),
        "wheels": (4_800_000_000, 43_200_000_000),
        "datasets": (55_000_000, 495_000_000),
    }
    _write(
        reports_dir / "fleet" / "cache.json",
        {
            "schema_version": 1,
            "cache_host": "cache.lab",
            "kinds": {k: {"upstream_bytes": u, "served_bytes": s} for k, (u, s) in kinds.items()},
        },
    )
    _write(
        reports_dir / "fleet" / "cluster.json",
        {"schema_version": 1, "verdict": "pass", "backend": "nccl", "world_size": 8},
    )
    inventory = reports_dir.parent / f"{reports_dir.name}-hosts.ini"
    groups = {"radeon": [], "instinct": []}
    for index, host in enumerate(names):
        groups["instinct" if index % 5 in (1, 3) else "radeon"].append(host)
    lines = []
    for group, members in groups.items():
        lines += [f"[{group}]", *members, ""]
    lines += ["[lab:children]", "radeon", "instinct", ""]
    inventory.write_text("\n".join(lines))
    return inventory


def _environment() -> dict[str, str]:
    """This environment without ``ansible-inventory`` on PATH (rocmlab reads the INI itself)."""
    env = dict(os.environ)
    path = [
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and not (Path(p) / "ansible-inventory").exists()
    ]
    env["PATH"] = os.pathsep.join(path)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    return env


def measure(reports_dir: Path, inventory: Path) -> dict[str, Any]:
    """One run, with the peak RSS of the fleet-report process alone (not the benchmark's)."""
    argv = [
        sys.executable,
        "-m",
        "rocmlab",
        "fleet-report",
        str(reports_dir),
        "--inventory",
        str(inventory),
    ]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=_environment(), stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1):
            err.seek(0)
            raise SystemExit(f"fleet-report exited {code}:\n{err.read().decode()[-4000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # KiB on Linux
        "exit": code,
    }


def _outputs(reports_dir: Path) -> dict[str, int]:
    return {
        name: (reports_dir / name).stat().st_size
        for name in ("fleet.json", "fleet.html", "fleet.junit.xml")
    }


def _machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start"
    )


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="host counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (median shown)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--profile", type=Path, help="cProfile the largest size into this file")
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    machine, commit = _machine(), _commit()
    print(f"rocmlab fleet-report scale, commit {commit}\n{machine}")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fleet-scale-") as tmp:
        for size in sizes:
            reports_dir = Path(tmp) / f"lab-{size}"
            start = time.perf_counter()
            inventory = make_lab(reports_dir, size)
            made = time.perf_counter() - start
            runs = [measure(reports_dir, inventory) for _ in range(args.repeat)]
            fleet = json.loads((reports_dir / "fleet.json").read_text())
            assert fleet["summary"]["declared"] == size, fleet["summary"]
            assert fleet["declared"]["reader"] == "ini", fleet["declared"]
            results.append(
                {
                    "hosts": size,
                    "records_s": round(made, 2),
                    "wall_s": statistics.median(r["wall_s"] for r in runs),
                    "cpu_s": statistics.median(r["cpu_s"] for r in runs),
                    "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
                    "runs_wall_s": [round(r["wall_s"], 3) for r in runs],
                    "exit": runs[-1]["exit"],
                    "summary": fleet["summary"],
                    "outputs": _outputs(reports_dir),
                }
            )
            if args.profile and size == sizes[-1]:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "cProfile",
                        "-o",
                        str(args.profile),
                        "-m",
                        "rocmlab",
                        "fleet-report",
                        str(reports_dir),
                        "--inventory",
                        str(inventory),
                    ],
                    env=_environment(),
                    stdout=subprocess.DEVNULL,
                    check=False,
                )
            shutil.rmtree(reports_dir)
    base = results[0]["wall_s"] / results[0]["hosts"]
    print(
        f"{'hosts':>6}  {'wall s':>7}  {'cpu s':>6}  {'ms/host':>7}  {'ratio':>5}  "
        f"{'peak RSS MiB':>12}  {'fleet.json+html+xml MiB':>23}  ready/declared"
    )
    for row in results:
        per_host = row["wall_s"] / row["hosts"]
        row["ms_per_host"] = round(per_host * 1000, 4)
        row["ratio_per_host"] = round(per_host / base, 3)
        size_mib = sum(row["outputs"].values()) / 2**20
        print(
            f"{row['hosts']:>6}  {row['wall_s']:>7.2f}  {row['cpu_s']:>6.2f}  "
            f"{per_host * 1000:>7.3f}  {row['ratio_per_host']:>5.2f}  {row['peak_rss_mib']:>12.1f}"
            f"  {size_mib:>23.1f}  {row['summary']['ready']}/{row['summary']['declared']}"
        )
    print(f"(median of {args.repeat} runs each; ratio: time per host against {sizes[0]} hosts)")
    if args.json:
        args.json.write_text(
            json.dumps({"commit": commit, "machine": machine, "results": results}, indent=2) + "\n"
        )
    if args.profile:
        import pstats

        pstats.Stats(str(args.profile)).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
