"""Tiers 1 and 2: work on the GPUs, each piece in processes of its own.

- gpu_matmul (tier 1): rocmlab.health.gpu_probe on every GPU side by side, each process seeing
  one GPU (ROCR_VISIBLE_DEVICES), with the gfx override the GPU needs when none is set;
- smoke (tier 2): ``rocmlab smoke`` with its usual options, its report read back;
- allreduce (tier 2): ``rocmlab allreduce`` under torchrun across the node's GPUs (exact sums and
  bus bandwidth), when there are two or more.

A process that does not finish in time is killed with everything it started, and the check
fails naming it: a GPU computation that does not end is a hung GPU. Their output is read
bounded from files in a private temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlab.common.hostread import KIB, MIB, read_bounded
from rocmlab.common.textsafe import for_terminal
from rocmlab.doctor.gpus import Gpu, detect, visible
from rocmlab.doctor.model import ERROR, Result, failed, passed, skipped
from rocmlab.health.checks_node import worst
from rocmlab.health.context import HealthContext, Outcome
from rocmlab.health.runner import kill_tree, reap

MARGIN = 1.5  # seconds kept, before the check's own deadline, to kill and report
PROBE_OUTPUT_LIMIT = 64 * KIB
REPORT_LIMIT = 16 * MIB
LOG_TAIL = 4 * KIB
HUNG_FIX = (
    "drain the node and reboot it; if the GPU hangs again after the reboot, read the kernel "
    "log (kernel_log) for the reset and have the card checked"
)


@dataclass
class Ran:
    """How a subprocess ended: its exit code (None: killed at the deadline) and its output."""

    returncode: int | None
    stdout: str
    stderr_tail: str
    seconds: float


def start(argv: list[str], workdir: Path, name: str, env: dict[str, str] | None = None):
    """Start ``argv`` with its output in files under ``workdir`` (``name``.out, .err)."""
    out = open(workdir / f"{name}.out", "wb")  # noqa: SIM115 - closed by finish()
    err = open(workdir / f"{name}.err", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=workdir, env=env
    )
    return process, out, err, time.monotonic()


def finish(started: tuple[Any, Any, Any, float], deadline: float, workdir: Path, name: str) -> Ran:
    """Wait for a started process until ``deadline`` (monotonic); kill it and all it started
    when it is not done by then. Its output is read bounded."""
    process, out, err, began = started
    try:
        process.wait(max(0.0, deadline - time.monotonic()))
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        kill_tree(process.pid, group=False)
        reap(process.pid)
        code = None
    finally:
        out.close()
        err.close()
    stdout = read_bounded(workdir / f"{name}.out", PROBE_OUTPUT_LIMIT).text() or ""
    return Ran(code, stdout, _tail(workdir / f"{name}.err"), time.monotonic() - began)


def _tail(path: Path) -> str:
    """The last LOG_TAIL bytes of a file of this run's private directory, as text."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - LOG_TAIL))
            return handle.read(LOG_TAIL).decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return for_terminal(lines[-1][:300]) if lines else "no output"


def compute_gpus(h: HealthContext) -> list[Gpu]:
    """The GPUs jobs compute on: usable, visible to this process (ROCR_VISIBLE_DEVICES and
    HIP_VISIBLE_DEVICES as the runtime applies them)."""
    source, gpus = detect(h.doctor.sysfs_root, h.doctor.read_path)
    if source != "kfd":
        return []
    shown, _unused = visible(gpus, h.doctor.env)
    return [gpu for gpu in shown if gpu.usable]


def probe_env(gpu: Gpu) -> dict[str, str]:
    """This process's environment with only ``gpu`` visible, and the override it needs when
    none is set (what gfx_override_mode: auto writes for it)."""
    env = dict(os.environ)
    for name in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)
    env["ROCR_VISIBLE_DEVICES"] = str(gpu.index)
    if gpu.override and "HSA_OVERRIDE_GFX_VERSION" not in env:
        env["HSA_OVERRIDE_GFX_VERSION"] = gpu.override
    return env


def judge_probe(label: str, ran: Ran, budget: float) -> Result:
    """One GPU's probe: a PASS with its figures, or what went wrong."""
    if ran.returncode is None:
        return failed(
            f"{label}: the matrix multiply did not finish within {budget:.0f} s: the GPU hangs",
            HUNG_FIX,
            [f"{label} stderr: {_last_line(ran.stderr_tail)}"],
        )
    try:
        answer = json.loads(ran.stdout.strip().splitlines()[-1]) if ran.stdout.strip() else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return failed(
            f"{label}: the probe ended with exit code {ran.returncode} and no result: "
            f"{_last_line(ran.stderr_tail)}",
            "run `rocmlab smoke` on this GPU for the full error; a HIP error here (illegal "
            "memory access, invalid device function) is the GPU, its driver or the override; "
            + HUNG_FIX,
        )
    if ran.returncode == 3:
        return Result(
            ERROR,
            f"{label}: {for_terminal(str(answer.get('error')))}",
            "run the training venv's rocmlab (/opt/rocmlab/venvs/pytorch/bin/rocmlab health "
            "--tier 1): tier 1 needs PyTorch",
        )
    if answer.get("error"):
        return failed(
            f"{label}: {for_terminal(str(answer['error']))}",
            "`rocmlab doctor` as root and as the account that trains says why (device nodes, "
            "groups, torch build, gfx override)",
        )
    matmul, exact = answer.get("matmul") or {}, answer.get("exact") or {}
    name = for_terminal(str(answer.get("device_name", "")))
    figures = f"{matmul.get('tflops', 0):.2f} TFLOP/s float32 (n={matmul.get('n')})"
    if not matmul.get("passed"):
        return failed(
            f"{label} ({name}): the matrix multiply is wrong: relative error "
            f"{matmul.get('rel_err')} against float64 on the CPU",
            "a GPU that computes wrong numbers must not run jobs: drain it; check the gfx "
            "override (rocmlab doctor's gfx_override) and the card's cooling; " + HUNG_FIX,
        )
    if exact.get("wrong"):
        return failed(
            f"{label} ({name}): {exact['wrong']} of {exact.get('elements')} elements of an exact "
            f"sum are wrong (first at {exact.get('first_wrong')}, max error "
            f"{exact.get('max_abs_error')})",
            "a GPU that computes wrong numbers must not run jobs: drain it; check the gfx "
            "override (rocmlab doctor's gfx_override) and the card's cooling; " + HUNG_FIX,
        )
    return passed(
        f"{label} ({name}): {figures}; exact sum right in all {exact.get('elements')} elements"
    )


def check_gpu_matmul(h: HealthContext, deadline: float) -> Outcome:
    """A small matrix multiply and an exact sum on each GPU, side by side."""
    gpus = compute_gpus(h)
    if gpus:
        jobs = [(f"GPU {g.index} {g.pci_address}".strip(), "cuda", probe_env(g)) for g in gpus]
    elif h.doctor.expect_gpus == 0:
        jobs = [("the CPU (no GPU expected)", "cpu", dict(os.environ))]
    else:
        return Outcome(skipped("no usable GPU visible in the KFD topology (gpu_count says why)"))
    until = deadline - MARGIN
    with tempfile.TemporaryDirectory(prefix="rocmlab-health-") as tmp:
        workdir = Path(tmp)
        started = []
        for index, (label, device, env) in enumerate(jobs):
            argv = [h.python, "-m", "rocmlab.health.gpu_probe", "--device", device]
            started.append((label, f"probe{index}", start(argv, workdir, f"probe{index}", env)))
        results = [
            judge_probe(label, finish(run, until, workdir, name), until - run[3])
            for label, name, run in started
        ]
    status = worst(results)
    fixes = [r.fix for r in results if r.status == status and r.fix]
    return Outcome(
        Result(
            status,
            "; ".join(r.saw for r in results),
            fixes[0] if fixes else None,
            [line for r in results for line in r.evidence],
        )
    )


# ---------------------------------------------------------------- tier 2

SMOKE_EXIT = {
    1: "a check failed",
    2: "a GPU was required but the run would be on the CPU",
    3: "the dataset is missing, truncated or altered",
    4: "bad arguments",
}


def _read_report(path: Path) -> dict[str, Any] | None:
    text = read_bounded(path, REPORT_LIMIT).text()
    try:
        doc = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def smoke_argv(h: HealthContext, report: Path) -> list[str]:
    """``rocmlab smoke`` as the health check runs it."""
    options = h.options
    argv = [h.python, "-m", "rocmlab", "smoke", "--data", str(options.smoke_data)]
    argv += ["--dataset", options.smoke_dataset, "--json", str(report)]
    if compute_gpus(h) and h.doctor.expect_gpus != 0 and "--require-gpu" not in options.smoke_args:
        argv.append("--require-gpu")
    return argv + list(options.smoke_args)


def check_smoke(h: HealthContext, deadline: float) -> Outcome:
    """The smoke job: training on the GPU, its numbers checked (docs/smoke-job.md)."""
    until = deadline - MARGIN
    with tempfile.TemporaryDirectory(prefix="rocmlab-health-") as tmp:
        workdir = Path(tmp)
        report_path = workdir / "smoke.json"
        argv = smoke_argv(h, report_path)
        ran = finish(start(argv, workdir, "smoke"), until, workdir, "smoke")
        report = _read_report(report_path)
    command = "rocmlab smoke " + " ".join(argv[4:])
    if ran.returncode is None:
        return Outcome(
            failed(
                f"the smoke job did not finish within {ran.seconds:.0f} s "
                f"({_last_line(ran.stderr_tail)})",
                HUNG_FIX,
                [command],
            )
        )
    if ran.returncode == 0 and report is not None and report.get("passed") is True:
        figures = []
        if isinstance(report.get("test_accuracy"), (int, float)):
            figures.append(f"accuracy {report['test_accuracy']:.4f}")
        if isinstance(report.get("samples_per_second"), (int, float)):
            figures.append(f"{report['samples_per_second']:,.0f} samples/s")
        where = for_terminal(str(report.get("device_name") or report.get("device") or "?"))
        return Outcome(passed(f"the smoke job passed on {where}: {', '.join(figures)}", [command]))
    why = SMOKE_EXIT.get(ran.returncode, f"exit code {ran.returncode}")
    detail = ""
    if report is not None:
        if report.get("error"):
            detail = str(report["error"])
        else:
            bad = [
                c for c in report.get("checks") or [] if isinstance(c, dict) and not c.get("passed")
            ]
            detail = "; ".join(f"{c.get('name')}: {c.get('detail')}" for c in bad)
    detail = for_terminal(detail or _last_line(ran.stderr_tail))[:500]
    if ran.returncode == 3:
        fix = (
            f"stage the dataset into {h.options.smoke_data} (the smoke_test role does, tag "
            "smoke), or point --smoke-data at it"
        )
    elif ran.returncode == 4 or ran.returncode in (130, 143):
        return Outcome(
            Result(ERROR, f"the smoke job did not run: {why}: {detail}",
                   "check --smoke-arg against `rocmlab smoke --help`", [command])
        )  # fmt: skip
    else:
        fix = "read docs/smoke-job.md for the failed check; run the same command by hand"
    return Outcome(failed(f"the smoke job failed ({why}): {detail}", fix, [command]))


ALLREDUCE_SIZES = "1M:64M"
ALLREDUCE_ITERS = 5


def check_allreduce(h: HealthContext, deadline: float) -> Outcome:
    """The all-reduce across the node's GPUs (exact sums, bus bandwidth), with two or more."""
    gpus = compute_gpus(h)
    if len(gpus) < 2:
        return Outcome(
            skipped(f"{len(gpus)} GPU(s) to compute on: an all-reduce needs two or more")
        )
    until = deadline - MARGIN
    step = max(5.0, (until - time.monotonic()) / 4)
    with tempfile.TemporaryDirectory(prefix="rocmlab-health-") as tmp:
        workdir = Path(tmp)
        report_path = workdir / "allreduce.json"
        argv = [
            h.python, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(len(gpus)), "-m", "rocmlab", "allreduce",
            "--sizes", ALLREDUCE_SIZES, "--iters", str(ALLREDUCE_ITERS),
            "--timeout", f"{step:.0f}", "--json", str(report_path),
        ]  # fmt: skip
        env = dict(os.environ)
        for name in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
            env.pop(name, None)
        env["ROCR_VISIBLE_DEVICES"] = ",".join(str(g.index) for g in gpus)
        overrides = {g.override for g in gpus if g.override}
        if len(overrides) == 1 and "HSA_OVERRIDE_GFX_VERSION" not in env:
            env["HSA_OVERRIDE_GFX_VERSION"] = overrides.pop()
        ran = finish(start(argv, workdir, "allreduce", env), until, workdir, "allreduce")
        report = _read_report(report_path)
    return Outcome(judge_allreduce(ran, report, len(gpus)))


def judge_allreduce(ran: Ran, report: dict[str, Any] | None, gpus: int) -> Result:
    """The all-reduce's verdict from its report (``rocmlab allreduce --json``)."""
    if ran.returncode is None:
        return failed(
            f"the all-reduce across {gpus} GPUs did not finish within {ran.seconds:.0f} s",
            HUNG_FIX,
        )
    if report is None:
        return failed(
            f"the all-reduce across {gpus} GPUs ended with exit code {ran.returncode} and no "
            f"report: {_last_line(ran.stderr_tail)}",
            "run it by hand (docs/cluster-check.md): torchrun --standalone --nproc-per-node "
            f"{gpus} -m rocmlab allreduce",
        )
    peak = report.get("peak_busbw_gbps")
    figure = f"peak bus bandwidth {peak:.1f} GB/s" if isinstance(peak, (int, float)) else ""
    if report.get("passed") is True and ran.returncode == 0:
        return passed(f"all-reduce across {gpus} GPUs: exact sums right; {figure}")
    bad = [c for c in report.get("checks") or [] if isinstance(c, dict) and not c.get("passed")]
    detail = str(report.get("error") or "") or "; ".join(
        f"{c.get('name')}: {c.get('detail')}" for c in bad
    )
    return failed(
        f"the all-reduce across {gpus} GPUs failed: {for_terminal(detail)[:500]}",
        "read docs/cluster-check.md for the failed check; wrong sums or a lost rank on one "
        "node are its GPUs or their links (xGMI, PCIe): " + HUNG_FIX,
    )
