"""``rocmlab smoke``'s checks: prove that this machine's GPU (or GPUs, under torchrun) trains
correctly.

Order: device truth, data, process group, numeric truth, training, speed probe, learning truth.
Imported only when the subcommand runs, after ``rocmlab.torchjob.torch_import.import_torch()``;
``rocmlab.smoke.job`` runs it and writes the report.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from rocmlab.common.errors import ExitCode, GpuAbsentError
from rocmlab.datasets.datadir import load_dataset
from rocmlab.smoke import rocm_wheels
from rocmlab.smoke.amp import choose_amp_dtype
from rocmlab.smoke.gates import (
    Check,
    accuracy_check,
    default_min_accuracy,
    is_default_recipe,
    loss_check,
)
from rocmlab.smoke.interrupt import Phase
from rocmlab.smoke.matmul_probe import CHECK_ROWS, default_size, matmul_probe
from rocmlab.smoke.model import build_model
from rocmlab.smoke.numeric import TOLERANCES, check_agreement
from rocmlab.smoke.options import SmokeOptions
from rocmlab.smoke.report import trace_path_for
from rocmlab.smoke.techniques import TechniqueResults, TechniqueSetup, run_techniques
from rocmlab.smoke.train import (
    TrainConfig,
    images_tensor,
    labels_tensor,
    normalise,
    to_device,
    train,
)
from rocmlab.torchjob import distributed
from rocmlab.torchjob.device import DeviceInfo, probe_device
from rocmlab.torchjob.progress import Progress

NUMERIC_BATCH = 256  # first test images, used for the numeric check


def _device_truth(
    options: SmokeOptions, ctx: distributed.DistContext, report: dict[str, Any]
) -> tuple[torch.device, DeviceInfo]:
    device, info = probe_device(options.device, ctx.local_rank)
    report.update(
        {
            key: value
            for key, value in info.as_dict().items()
            if key not in ("env", "bf16_supported", "note")
        }
    )
    report["gpu_env"] = info.env
    if options.require_gpu and device.type == "cpu":
        raise GpuAbsentError(f"--require-gpu: the run would be on the CPU ({info.note})")
    return device, info


def _describe(info: DeviceInfo) -> str:
    env = ", ".join(f"{k}={v}" for k, v in info.env.items() if v is not None) or "no GPU env set"
    versions = f"torch {info.torch_version}"
    if info.hip_version:
        versions += f", HIP {info.hip_version}"
    if info.cuda_version:
        versions += f", CUDA {info.cuda_version}"
    arch = f" ({info.arch})" if info.arch else ""
    text = f"backend {info.backend} on {info.device}: {info.device_name}{arch}; {versions}; {env}"
    if info.backend == "cpu":
        text += f"; {torch.get_num_threads()} CPU thread(s); GPU-vs-CPU comparison not applicable"
        if info.note:
            text += f"; {info.note}"
    return text


def _gate(options: SmokeOptions, epochs: int) -> tuple[float, str]:
    """The accuracy gate after ``epochs`` epochs, and where it comes from."""
    if options.min_accuracy is not None:
        return options.min_accuracy, "--min-accuracy"
    default_recipe = is_default_recipe(
        options.optimizer, options.lr, options.momentum, options.batch_size
    )
    gate = default_min_accuracy(options.dataset, epochs, default_recipe, options.model)
    recipe = "default recipe" if default_recipe else "non-default hyperparameters"
    return gate, f"default for {options.model}, {options.dataset}, {epochs} epoch(s), {recipe}"


def run_checks(
    options: SmokeOptions,
    ctx: distributed.DistContext,
    report: dict[str, Any],
    progress: Progress,
    phase: Phase,
) -> int:
    """Run every check, filling in ``report``; return the exit code (0 or 1)."""
    phase.enter("probing the device")
    device, info = _device_truth(options, ctx, report)
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        # The model is too small to gain from more threads, and OpenMP threads that must meet at
        # a barrier slow down tenfold when other processes share the cores (measured on 2 cores).
        torch.set_num_threads(1)
    amp_name = choose_amp_dtype(options.amp, device.type, info.arch, info.bf16_supported)
    amp_dtype = getattr(torch, amp_name) if amp_name else None
    report["amp_dtype"] = amp_name
    progress.line(f"device: {_describe(info)}")

    phase.enter("loading and verifying the data")
    dataset = load_dataset(options.data, options.dataset)
    progress.line(
        f"data: {options.dataset} from {options.data} (4 files, SHA-256 verified); "
        f"model {options.model}, {options.epochs} epoch(s), batch {options.batch_size}"
        + (f" per process x {ctx.world_size}" if ctx.enabled else "")
        + f", {options.optimizer} lr {options.lr:g}"
        + (f" momentum {options.momentum:g}" if options.optimizer == "sgd" else "")
        + f", amp {amp_name or 'off'}"
        + (f"; techniques: {', '.join(options.techniques)}" if options.techniques else "")
    )
    phase.enter("joining the process group")
    ctx = distributed.init_process_group(ctx, device)
    checks = [Check("device", True, _describe(info), ctx.rank if ctx.enabled else None)]
    rank = ctx.rank if ctx.enabled else None
    if ctx.enabled:
        ok, detail = distributed.allreduce_check(ctx, device)
        checks.append(Check("allreduce", ok, detail, rank))

    # Numeric truth, before training: fixed weights (seed) and a fixed batch.
    phase.enter("running the numeric check")
    test_x = dataset.arrays["test_images"]
    x = normalise(images_tensor(test_x)[:NUMERIC_BATCH], dataset.spec.mean, dataset.spec.std)
    y = labels_tensor(dataset.arrays["test_labels"])[:NUMERIC_BATCH]
    reference_model = build_model(options.seed, options.model)
    numeric = check_agreement(reference_model, x, y, device)
    checks.append(Check("numeric", numeric.passed, numeric.detail, rank))
    max_diff = numeric.max_abs_diff
    tolerance_keys: list[str | None] = [None]
    if amp_dtype is not None:
        numeric_amp = check_agreement(reference_model, x, y, device, amp_dtype)
        checks.append(Check("numeric_amp", numeric_amp.passed, numeric_amp.detail, rank))
        max_diff = max(max_diff, numeric_amp.max_abs_diff)
        tolerance_keys.append(amp_name)
    report["numeric_tolerance"] = {
        key or "float32": {"atol": TOLERANCES[key][0], "rtol": TOLERANCES[key][1]}
        for key in tolerance_keys
    }

    # Training.
    phase.enter("moving the data to the device")
    model = build_model(options.seed, options.model).to(device)
    data = to_device(dataset, device)
    config = TrainConfig(
        options.epochs,
        options.batch_size,
        options.optimizer,
        options.lr,
        options.momentum,
        options.seed,
    )
    phase.enter("training")
    result = train(model, data, config, device, amp_dtype, ctx, progress, phase)
    techniques = TechniqueResults()
    if options.techniques:
        one_epoch_gate, one_epoch_source = _gate(options, 1)
        amp_auto = choose_amp_dtype("auto", device.type, info.arch, info.bf16_supported)
        setup = TechniqueSetup(
            kind=options.model,
            seed=options.seed,
            device=device,
            data=data,
            config=config,
            amp_dtype=amp_dtype or (getattr(torch, amp_auto) if amp_auto else None),
            run_amp_dtype=amp_dtype,
            ctx=ctx,
            gate=one_epoch_gate,
            gate_source=one_epoch_source,
            x=x.to(device),
            y=y.to(device),
            trace_path=trace_path_for(options.json_path) if options.json_path else None,
        )
        techniques = run_techniques(options.techniques, setup, phase, progress)
        checks.extend(techniques.checks)
    del data

    # Speed probe, with its result spot-checked.
    phase.enter("running the matmul speed probe")
    probes = [matmul_probe(device, torch.float32, default_size(device))]
    if amp_dtype is not None:
        probes.append(matmul_probe(device, amp_dtype, default_size(device)))
    checks.append(
        Check(
            "matmul",
            all(p.passed for p in probes),
            "; ".join(
                f"{p.dtype} {p.n}x{p.n}: {p.tflops:.3f} TFLOP/s, {p.iterations} iterations, "
                f"rel. error of {CHECK_ROWS} checked rows {p.rel_err:.2g}"
                for p in probes
            ),
            rank,
        )
    )
    rank_summary = {
        "rank": ctx.rank,
        "host": distributed.host_name(),
        "device": info.device,
        "device_name": info.device_name,
        "gfx_arch": info.gfx_arch,
        "gpu_cpu_max_abs_diff": max_diff,
        "checks": [c.as_dict() for c in checks],
    }
    phase.enter("gathering the results")
    gathered = distributed.gather(ctx, rank_summary, device)
    if ctx.is_main:
        all_checks = [check for summary in gathered for check in summary.pop("checks")]
        gate, source = _gate(options, options.epochs)
        all_checks.append(loss_check(result.loss_first, result.loss_last).as_dict())
        all_checks.append(accuracy_check(result.test_accuracy, gate, source).as_dict())
        venv_checks = rocm_wheels.checks(
            report["rocm_wheels"], info.gfx_arch, info.env, info.backend
        )
        all_checks.extend(check.as_dict() for check in venv_checks)
        passed = all(check["passed"] for check in all_checks)
        report.update(
            passed=passed,
            ranks=gathered if ctx.enabled else [],
            checks=all_checks,
            train_seconds=result.train_seconds,
            samples_per_second=result.samples_per_second,
            test_accuracy=result.test_accuracy,
            min_accuracy=gate,
            loss_first=result.loss_first,
            loss_last=result.loss_last,
            epoch_stats=[vars(stats) for stats in result.epochs],
            gpu_cpu_max_abs_diff=max(s["gpu_cpu_max_abs_diff"] for s in gathered),
            matmul_tflops={p.dtype: p.tflops for p in probes},
            amp_speedup=techniques.amp_speedup,
            profile=techniques.profile,
        )
        code = int(ExitCode.PASSED if passed else ExitCode.CHECK_FAILED)
    else:
        code = 0
    code = distributed.broadcast_int(ctx, code, device)
    distributed.shutdown(ctx)
    return code
