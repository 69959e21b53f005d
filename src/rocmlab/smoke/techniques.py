"""The tutorial's training techniques, each proven on the run device (``--techniques``).

* ``accumulation``: k micro-batches, accumulated by the training loop's own code, give the
  gradients of one batch k times their size; and one epoch trained that way reaches the one-epoch
  accuracy gate.
* ``checkpoint``: gradients with the model's blocks under ``torch.utils.checkpoint`` (recomputed in
  the backward pass) agree with plain gradients on the same inputs.
* ``amp``: the same epoch from the same weights in fp32 and under autocast (the run's AMP dtype:
  bf16 where the architecture has it, else fp16 with a GradScaler): both accuracies and the
  speed-up. On a CPU it does not apply, and says so.
* ``profile``: ``torch.profiler`` over a few training steps (ROCm builds trace the GPU with
  ROCm's tracer), the top kernels by device time (on a CPU: operators by CPU time) and a Chrome
  trace file.

The check functions take their perturbation as a parameter (a micro-batch weight, a hook inside
the checkpointed function) so that tests can prove each one fails on a wrong computation.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

from rocmlab.common.outputs import atomic_file
from rocmlab.smoke.gates import Check
from rocmlab.smoke.interrupt import Phase
from rocmlab.smoke.model import StepModel, build_model, has_batch_norm
from rocmlab.smoke.numeric import compare, full_fp32
from rocmlab.smoke.train import (
    DeviceData,
    TrainConfig,
    TrainResult,
    accumulate_gradients,
    make_optimizer,
    share,
    train,
)
from rocmlab.torchjob.distenv import DistContext
from rocmlab.torchjob.progress import Progress

# Gradients computed two ways in fp32 (TF32 off) must agree within atol + rtol * max|reference|:
# only the order of the sums differs (measured: <= 2e-7 of scale on the CPU).
GRAD_ATOL, GRAD_RTOL = 1e-9, 1e-4
MICRO_BATCHES = 4
AMP_WARMUP_STEPS = 20  # untimed steps per precision before the timed epochs (kernel selection)
PROFILE_WARMUP_STEPS = 3
PROFILE_STEPS = 10
TOP_KERNELS = 10

StepHook = Callable[[str, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class GradientAgreement:
    """Two ways of computing the same gradients, compared."""

    passed: bool
    max_abs_diff: float
    worst: str
    ratio: float  # max|diff| / bound of the worst parameter; > 1 fails

    def describe(self) -> str:
        """The comparison's figures, for a check's detail."""
        return (
            f"max |diff| {self.max_abs_diff:.3g}, worst {self.worst} at {self.ratio:.3g} of its "
            f"bound (atol {GRAD_ATOL:g} + rtol {GRAD_RTOL:g} * max|ref|)"
        )


def _agreement(
    reference: dict[str, torch.Tensor], got: dict[str, torch.Tensor]
) -> GradientAgreement:
    pairs = {
        name: (got[name].double().cpu(), ref.double().cpu()) for name, ref in reference.items()
    }
    max_diff, worst, ratio = compare(pairs, GRAD_ATOL, GRAD_RTOL)
    return GradientAgreement(ratio <= 1.0, max_diff, worst, ratio)


def _gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    grads = {}
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        grads[name] = param.grad.detach().clone()
    return grads


def accumulation_gradients(
    model: StepModel,
    x: torch.Tensor,
    y: torch.Tensor,
    micro_batches: int = MICRO_BATCHES,
    weight: Callable[[int, int], float] = share,
) -> GradientAgreement:
    """Gradients of the batch ``x`` in one pass against ``micro_batches`` accumulated passes,
    both through the training loop's ``accumulate_gradients`` (``model`` is not modified).

    A model with batch-norm is compared in eval mode: in train mode each micro-batch normalises
    with its own statistics, so accumulation is not equivalent to the large batch there (a
    property of batch-norm, not a fault); eval mode makes every sample independent.
    ``weight`` is the micro-batch loss weight passed to the training loop (tests pass wrong ones).
    """
    net = copy.deepcopy(model).to(x.device)
    net.train(not has_batch_norm(net))
    index = torch.arange(x.shape[0], device=x.device)
    with full_fp32():
        net.zero_grad(set_to_none=True)
        accumulate_gradients(net, x, y, index, 1)
        whole = _gradients(net)
        net.zero_grad(set_to_none=True)
        accumulate_gradients(net, x, y, index, micro_batches, weight=weight)
        accumulated = _gradients(net)
    return _agreement(whole, accumulated)


def checkpointed_forward(
    model: StepModel, x: torch.Tensor, step_hook: StepHook | None = None
) -> torch.Tensor:
    """``model(x)`` with each of its segments (blocks) under ``torch.utils.checkpoint``: their
    activations are not kept but recomputed during the backward pass. ``step_hook(name, output)``
    runs after each step inside the checkpointed functions, at the forward and at the
    recomputation."""
    h = model.shape_input(x)
    for steps in model.segments():

        def segment(inp: torch.Tensor, steps: tuple = steps) -> torch.Tensor:
            for name, op in steps:
                inp = model.run_step(op, inp)
                if step_hook is not None:
                    inp = step_hook(name, inp)
            return inp

        h = checkpoint(segment, h, use_reentrant=False)
    return h


def checkpoint_gradients(
    model: StepModel,
    x: torch.Tensor,
    y: torch.Tensor,
    step_hook: StepHook | None = None,
) -> GradientAgreement:
    """Plain gradients of the batch against gradients with every block checkpointed, from two
    copies of ``model`` (train mode, not modified). ``step_hook`` is passed on to
    ``checkpointed_forward`` (tests make the checkpointed function change its output)."""
    results = []
    with full_fp32():
        for forward in (lambda m: m(x), lambda m: checkpointed_forward(m, x, step_hook)):
            net = copy.deepcopy(model).to(x.device).train()
            net.zero_grad(set_to_none=True)
            F.cross_entropy(forward(net), y).backward()
            results.append(_gradients(net))
    return _agreement(results[0], results[1])


@dataclass(frozen=True)
class TechniqueSetup:
    """What the technique checks share with the run."""

    kind: str
    seed: int
    device: torch.device
    data: DeviceData
    config: TrainConfig
    amp_dtype: torch.dtype | None  # the dtype the amp technique compares with fp32
    run_amp_dtype: torch.dtype | None  # the run's own precision (the profile's)
    ctx: DistContext
    gate: float  # the one-epoch accuracy gate
    gate_source: str
    x: torch.Tensor  # a fixed batch (the numeric check's) for the gradient comparisons
    y: torch.Tensor
    trace_path: Path | None  # where rank 0 writes the profile's Chrome trace


@dataclass
class TechniqueResults:
    """The checks, and the figures the report keeps."""

    checks: list[Check] = field(default_factory=list)
    amp_speedup: float | None = None
    profile: dict[str, Any] | None = None


def run_techniques(
    names: tuple[str, ...], setup: TechniqueSetup, phase: Phase, progress: Progress
) -> TechniqueResults:
    """Run the technique checks asked for, in the order given."""
    results = TechniqueResults()
    rank = setup.ctx.rank if setup.ctx.enabled else None
    for name in names:
        phase.enter(f"running the {name} check")
        if name == "accumulation":
            passed, detail = accumulation_check(setup, phase)
        elif name == "checkpoint":
            passed, detail = checkpoint_check(setup)
        elif name == "amp":
            passed, detail, results.amp_speedup = amp_check(setup, phase)
        elif name == "profile":
            passed, detail, results.profile = profile_check(setup)
        else:
            raise ValueError(f"unknown technique {name!r}")
        results.checks.append(Check(name, passed, detail, rank))
        progress.line(f"{name}: {'PASS' if passed else 'FAIL'}: {detail}")
    return results


def _one_epoch(
    setup: TechniqueSetup, amp_dtype: torch.dtype | None, phase: Phase, accumulation: int = 1
) -> TrainResult:
    """One epoch from the seed's initial weights, with the run's recipe."""
    config = replace(setup.config, epochs=1, accumulation=accumulation)
    model = build_model(setup.seed, setup.kind).to(setup.device)
    return train(
        model, setup.data, config, setup.device, amp_dtype, setup.ctx, Progress(False), phase
    )


def accumulation_check(setup: TechniqueSetup, phase: Phase) -> tuple[bool, str]:
    """Gradient equivalence on the fixed batch, then one epoch trained with accumulation."""
    model = build_model(setup.seed, setup.kind)
    agreement = accumulation_gradients(model, setup.x, setup.y)
    mode = " (eval mode: batch-norm)" if has_batch_norm(model) else ""
    micro = -(-setup.config.batch_size // MICRO_BATCHES)
    result = _one_epoch(setup, None, phase, MICRO_BATCHES)
    learned = result.test_accuracy >= setup.gate
    detail = (
        f"{MICRO_BATCHES} accumulated micro-batches of {setup.x.shape[0] // MICRO_BATCHES} vs one "
        f"batch of {setup.x.shape[0]}{mode}: {agreement.describe()}; 1 epoch with "
        f"{MICRO_BATCHES} micro-batches of <= {micro} per step of {setup.config.batch_size}: "
        f"test accuracy {result.test_accuracy:.4f}, gate >= {setup.gate:.4f} ({setup.gate_source})"
    )
    return agreement.passed and learned, detail


def checkpoint_check(setup: TechniqueSetup) -> tuple[bool, str]:
    """Plain against checkpointed gradients on the fixed batch."""
    model = build_model(setup.seed, setup.kind)
    agreement = checkpoint_gradients(model, setup.x, setup.y)
    detail = (
        f"{len(model.SEGMENTS)} blocks under torch.utils.checkpoint (non-reentrant) vs plain, "
        f"batch {setup.x.shape[0]}, {len(list(model.parameters()))} parameter gradients: "
        f"{agreement.describe()}"
    )
    return agreement.passed, detail


def amp_check(setup: TechniqueSetup, phase: Phase) -> tuple[bool, str, float | None]:
    """On a GPU, ``compare_precisions``; on the CPU the check does not apply and says so."""
    if setup.device.type == "cpu" or setup.amp_dtype is None:
        return (
            True,
            "not applicable on the CPU: mixed precision's speed-up is a GPU measurement "
            "(no figure reported)",
            None,
        )
    return compare_precisions(setup, phase)


def compare_precisions(setup: TechniqueSetup, phase: Phase) -> tuple[bool, str, float]:
    """The same epoch from the same weights in fp32 and under autocast ``setup.amp_dtype``: both
    accuracies must reach the gate; the speed-up (fp32 seconds / autocast seconds) is measured,
    after untimed warm-up steps in each precision."""
    amp_name = str(setup.amp_dtype).removeprefix("torch.")
    warm = _slice(setup.data, AMP_WARMUP_STEPS * setup.config.batch_size)
    for dtype in (None, setup.amp_dtype):  # untimed: kernel selection, autotuning, caches
        model = build_model(setup.seed, setup.kind).to(setup.device)
        config = replace(setup.config, epochs=1)
        train(model, warm, config, setup.device, dtype, setup.ctx, Progress(False))
    fp32 = _one_epoch(setup, None, phase)
    mixed = _one_epoch(setup, setup.amp_dtype, phase)
    speedup = fp32.train_seconds / mixed.train_seconds
    passed = min(fp32.test_accuracy, mixed.test_accuracy) >= setup.gate
    scaler = ", GradScaler" if setup.amp_dtype == torch.float16 else ""
    detail = (
        f"1 epoch from the same weights: float32 {fp32.train_seconds:.2f} s, test accuracy "
        f"{fp32.test_accuracy:.4f}; autocast {amp_name}{scaler} {mixed.train_seconds:.2f} s, "
        f"test accuracy {mixed.test_accuracy:.4f}; speed-up {speedup:.2f}x; gate >= "
        f"{setup.gate:.4f} for both ({setup.gate_source})"
    )
    return passed, detail, speedup


def _slice(data: DeviceData, samples: int) -> DeviceData:
    return DeviceData(
        data.train_x[:samples], data.train_y[:samples], data.test_x[:1000], data.test_y[:1000]
    )


def profile_check(setup: TechniqueSetup) -> tuple[bool, str, dict[str, Any] | None]:
    """Profile a few training steps; rank 0 writes the Chrome trace beside the report."""
    model = build_model(setup.seed, setup.kind).to(setup.device)
    on_gpu = setup.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    optimizer = make_optimizer(model, setup.config)
    amp_dtype = setup.run_amp_dtype
    scaler = torch.amp.GradScaler(setup.device.type) if amp_dtype == torch.float16 else None
    batch = setup.config.batch_size

    def step(number: int) -> None:
        start = (number * batch) % max(1, setup.data.train_x.shape[0] - batch)
        index = torch.arange(start, start + batch, device=setup.device)
        optimizer.zero_grad(set_to_none=True)
        data = setup.data
        accumulate_gradients(model, data.train_x, data.train_y, index, 1, amp_dtype, scaler)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()

    for number in range(PROFILE_WARMUP_STEPS):
        step(number)
    with profile(activities=activities) as prof:
        for number in range(PROFILE_STEPS):
            step(PROFILE_WARMUP_STEPS + number)
        if on_gpu:
            torch.cuda.synchronize(setup.device)
    top = top_kernels(prof, on_gpu)
    what = (
        "kernels by GPU time"
        if on_gpu
        else "operators by CPU self time (no GPU: device_time_us is the CPU's time)"
    )
    summary = ", ".join(f"{k['name']} {k['device_time_us']:.0f} us" for k in top[:3])
    precision = f"autocast {str(amp_dtype).removeprefix('torch.')}" if amp_dtype else "float32"
    detail = f"{PROFILE_STEPS} training steps of batch {batch} ({precision}); top {what}: {summary}"
    if setup.trace_path is None or not setup.ctx.is_main:
        return bool(top), detail, {"trace": None, "top_kernels": top}
    events = write_trace(prof, setup.trace_path)
    detail += f"; Chrome trace {setup.trace_path.name}: {events} events"
    return bool(top) and events > 0, detail, {"trace": setup.trace_path.name, "top_kernels": top}


def top_kernels(prof: profile, on_gpu: bool) -> list[dict[str, Any]]:
    """The TOP_KERNELS largest entries: GPU kernels by device time, else operators by CPU self
    time, in microseconds."""
    rows = []
    for event in prof.key_averages():
        is_kernel = event.device_type != torch.autograd.DeviceType.CPU
        if is_kernel != on_gpu or (not on_gpu and not event.key.startswith("aten::")):
            continue
        micros = event.self_device_time_total if on_gpu else event.self_cpu_time_total
        if micros > 0:
            rows.append({"name": event.key, "device_time_us": float(micros), "calls": event.count})
    rows.sort(key=lambda row: row["device_time_us"], reverse=True)
    return rows[:TOP_KERNELS]


def write_trace(prof: profile, path: Path) -> int:
    """Export the Chrome trace to ``path`` atomically; return the number of trace events, read
    back from the file."""
    with atomic_file(path) as tmp:
        prof.export_chrome_trace(str(tmp))
        with tmp.open() as handle:
            return len(json.load(handle).get("traceEvents", []))
