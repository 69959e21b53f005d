"""Numeric truth: the run device's forward and backward agree with a float64 CPU reference.

A wrong ``HSA_OVERRIDE_GFX_VERSION`` can load code objects for another architecture that run but
compute garbage; only comparing against an independent computation catches that. On a CPU-only run
the same check compares CPU float32 against CPU float64 (GPU-vs-CPU is then not applicable, and the
report says so).

One fixed batch goes forward and backward through the model on the device, in the run's precision
(fp32, or autocast fp16/bf16), in train mode (batch-norm normalises with the batch's statistics),
keeping every step's input, output and output gradient (``model`` describes each model as a
sequence of named steps). Then on the CPU in float64:

* end to end: the logits and the loss of the same batch through the float64 copy of the model
  (the forward pass is continuous, so rounding differences stay small); for a model with
  batch-norm also the logits in eval mode (running statistics, the inference kernels), after the
  one train-mode pass both copies made;
* step by step: each step (matrix product, convolution, batch-norm, ReLU, max-pool), forward and
  backward (its input's and its parameters' gradients), recomputed from the device's own input to
  that step and the device's own gradient of its output. Comparing gradients end to end would be
  unsound: a ReLU input that rounding moves across zero legitimately changes a gradient row.
  Max-pooling's input gradient is compared without assuming which of several equal maxima gets it
  (a uniform background makes exact ties common, and kernels break them differently): its sum
  over each window must equal the output gradient, and it must be zero off the window's maxima.

Criterion per compared tensor: ``max|device - reference| <= atol + rtol * max|reference|``;
non-finite device values fail. For a convolution's output and gradients, ``max|reference|`` is
replaced by the largest sum of the magnitudes of the terms summed (see ``_magnitudes``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rocmlab.smoke.model import STATELESS, StepModel, has_batch_norm

# (atol, rtol) per compute dtype; None is plain float32 (TF32 off). Measured: fp32 against fp64
# agrees to ~1e-7 of scale, fp16 autocast to ~5e-4, bf16 to ~4e-3.
TOLERANCES: dict[str | None, tuple[float, float]] = {
    None: (1e-9, 1e-4),
    "float16": (1e-6, 1e-2),
    "bfloat16": (1e-6, 5e-2),
}
EVAL_LOGITS = "eval:logits"

# perturb(name, tensor) -> tensor: lets tests inject a fault into one device result.
Perturb = Callable[[str, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Agreement:
    """Result of one device-against-reference comparison."""

    max_abs_diff: float
    worst_tensor: str
    worst_ratio: float  # max|diff| / bound of the worst tensor; > 1 fails
    passed: bool
    detail: str


def _device_pass(
    model: StepModel,
    x: torch.Tensor,
    y: torch.Tensor,
    amp_dtype: torch.dtype | None,
    perturb: Perturb | None,
) -> dict[str, torch.Tensor]:
    """Forward and backward on the model's device (train mode), returning every step's input
    (``in:NAME``), output (``NAME``) and output gradient (``grad:NAME``), the loss, the parameter
    gradients (``grad:PARAM``) and, with batch-norm, the eval-mode logits."""

    def tap(name: str, tensor: torch.Tensor) -> torch.Tensor:
        return perturb(name, tensor) if perturb is not None else tensor

    saved: dict[str, torch.Tensor] = {}

    def keep_grad(name: str, tensor: torch.Tensor) -> None:
        def hook(grad: torch.Tensor) -> torch.Tensor:
            grad = tap(f"grad:{name}", grad)
            saved[f"grad:{name}"] = grad.detach()
            return grad

        tensor.register_hook(hook)

    model.train()
    model.zero_grad(set_to_none=True)
    with _autocast(x.device, amp_dtype):
        h = model.shape_input(x)
        for name, op in model.STEPS:
            saved[f"in:{name}"] = h.detach()
            h = tap(name, model.run_step(op, h))
            saved[name] = h.detach()
            keep_grad(name, h)
        loss = tap("loss", F.cross_entropy(h, y))
    saved["loss"] = loss.detach()
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None
        saved[f"grad:{name}"] = tap(f"grad:{name}", param.grad).detach()
    if has_batch_norm(model):
        model.eval()
        with torch.no_grad(), _autocast(x.device, amp_dtype):
            saved[EVAL_LOGITS] = tap(EVAL_LOGITS, model(x)).detach()
    return saved


def _autocast(
    device: torch.device, amp_dtype: torch.dtype | None
) -> torch.autocast | nullcontext[None]:
    return torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext()


Pairs = dict[str, tuple[torch.Tensor, torch.Tensor]]


def _references(
    cpu_model: StepModel, x: torch.Tensor, y: torch.Tensor, dev: dict
) -> tuple[Pairs, dict[str, torch.Tensor]]:
    """(device value, float64 reference) pairs, references computed on the CPU; and for the
    tensors of convolutions, the scale their bound is relative to (see ``_magnitudes``)."""

    def d(name: str) -> torch.Tensor:
        return dev[name].to("cpu", torch.float64)

    reference = copy.deepcopy(cpu_model).to(torch.float64).train()
    pairs: Pairs = {}
    scales: dict[str, torch.Tensor] = {}

    # End to end, forward only. The train-mode pass moves the running statistics of the float64
    # copy as the device's pass moved the device copy's; the eval-mode pass uses them.
    with torch.no_grad():
        logits = reference(x.to(torch.float64))
        pairs["logits (end to end)"] = (d(cpu_model.STEPS[-1][0]), logits)
        pairs["loss (end to end)"] = (d("loss"), F.cross_entropy(logits, y))
        if EVAL_LOGITS in dev:
            reference.eval()
            pairs["logits (eval mode, end to end)"] = (
                d(EVAL_LOGITS),
                reference(x.to(torch.float64)),
            )
            reference.train()

    # Step by step, backward from the loss: its gradient from the device's logits.
    last = cpu_model.STEPS[-1][0]
    logits = d(last).requires_grad_(True)
    (grad_logits,) = torch.autograd.grad(F.cross_entropy(logits, y), logits)
    pairs[f"grad:{last}"] = (d(f"grad:{last}"), grad_logits)

    # Each step, forward and backward, from the device's own input and output gradient.
    for index, (name, op) in enumerate(cpu_model.STEPS):
        below = cpu_model.STEPS[index - 1][0] if index > 0 else None
        inp = d(f"in:{name}").requires_grad_(below is not None)
        out = reference.run_step(op, inp)
        pairs[name] = (d(name), out.detach())
        if op == "maxpool":
            assert below is not None
            pairs.update(_maxpool_backward(below, d(f"in:{name}"), d(f"grad:{name}"), d))
            continue
        module = None if op in STATELESS else getattr(reference, op)
        params = list(module.named_parameters()) if module is not None else []
        wrt = ([inp] if below is not None else []) + [p for _unused, p in params]
        if not wrt:
            continue
        grads = torch.autograd.grad(out, wrt, grad_outputs=d(f"grad:{name}"))
        keys = ([f"grad:{below}"] if below is not None else []) + [
            f"grad:{op}.{param_name}" for param_name, _unused in params
        ]
        for key, grad in zip(keys, grads, strict=True):
            pairs[key] = (d(key), grad)
        if isinstance(module, MAGNITUDE_SCALED):
            scales.update(_magnitudes(module, name, keys, inp, d(f"grad:{name}")))
    return pairs, scales


# Steps whose tensors are compared relative to the magnitude of the terms summed (below).
MAGNITUDE_SCALED = (torch.nn.Conv2d,)


def _magnitudes(
    module: torch.nn.Module,
    name: str,
    keys: list[str],
    inp: torch.Tensor,
    grad_out: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """The same forward and backward computed on absolute values (|input|, |weight|, |output
    gradient|): each element is the sum of the magnitudes of the terms its result sums.

    Rounding error in a sum is proportional to that, not to the sum. It matters for a convolution
    followed by batch-norm: batch-norm's input gradient sums to zero over each channel, so over an
    image's constant background the weight gradient's terms cancel, leaving a result 10-100x
    smaller than its terms (measured on MNIST and Fashion-MNIST; the linear layers' results are
    0.2-0.6 of their terms, and keep the stricter scale of the result itself).
    """
    absolute = copy.deepcopy(module)
    with torch.no_grad():
        for param in absolute.parameters():
            param.abs_()
    magnitude_in = inp.detach().abs().requires_grad_(inp.requires_grad)
    out = absolute(magnitude_in)
    wrt = ([magnitude_in] if inp.requires_grad else []) + list(absolute.parameters())
    grads = torch.autograd.grad(out, wrt, grad_outputs=grad_out.abs())
    return {name: out.detach(), **dict(zip(keys, grads, strict=True))}


def _maxpool_backward(
    below: str, inp: torch.Tensor, grad_out: torch.Tensor, d: Callable[[str], torch.Tensor]
) -> Pairs:
    """Max-pooling's input gradient, whichever of several equal maxima a kernel picks: its
    window sums equal the output gradient, and it is zero off the maxima."""
    grad_in = d(f"grad:{below}")
    sums = F.avg_pool2d(grad_in, 2, divisor_override=1)
    maxima = F.max_pool2d(inp, 2).repeat_interleave(2, -2).repeat_interleave(2, -1)
    rows, cols = maxima.shape[-2:]
    off = torch.ones_like(inp, dtype=torch.bool)  # rows/columns no window covers count as off
    off[..., :rows, :cols] = inp[..., :rows, :cols] < maxima
    return {
        f"grad:{below} (window sums)": (sums, grad_out),
        f"grad:{below} (off the maxima)": (grad_in * off, torch.zeros_like(grad_in)),
    }


def compare(
    pairs: Pairs, atol: float, rtol: float, scales: dict[str, torch.Tensor] | None = None
) -> tuple[float, str, float]:
    """(max abs diff over all pairs, worst pair, its diff/bound ratio); inf when non-finite.

    The bound of each pair is ``atol + rtol * max|scale|``, the scale being the reference itself
    unless ``scales`` gives another."""
    max_diff, worst, worst_ratio = 0.0, "", -1.0
    for name, (got, ref) in pairs.items():
        if not torch.isfinite(got).all():
            return float("inf"), name, float("inf")
        diff = float((got - ref).abs().max())
        scale = (scales or {}).get(name, ref)
        ratio = diff / (atol + rtol * float(scale.abs().max()))
        max_diff = max(max_diff, diff)
        if ratio > worst_ratio:
            worst, worst_ratio = name, ratio
    return max_diff, worst, worst_ratio


def check_agreement(
    model: StepModel,
    x: torch.Tensor,
    y: torch.Tensor,
    device: torch.device,
    amp_dtype: torch.dtype | None = None,
    perturb: Perturb | None = None,
) -> Agreement:
    """Compare one forward+backward of ``model`` on ``device`` with float64 on the CPU.

    ``model`` (on the CPU), ``x`` and ``y`` are not modified. ``perturb`` may alter any device
    result by name (tests use it to prove that the check fails when the device computes wrongly).
    """
    device_model = copy.deepcopy(model).to(device)
    with full_fp32():
        dev = _device_pass(device_model, x.to(device), y.to(device), amp_dtype, perturb)
    pairs, scales = _references(model, x, y.to("cpu"), dev)

    key = None if amp_dtype is None else str(amp_dtype).removeprefix("torch.")
    atol, rtol = TOLERANCES[key]
    max_diff, worst, ratio = compare(pairs, atol, rtol, scales)
    passed = ratio <= 1.0
    scaled = "; convolutions: max sum of |terms|" if scales else ""
    detail = (
        f"{device.type} {key or 'float32'} vs cpu float64, batch {x.shape[0]}, {len(pairs)} "
        f"tensors: max |diff| {max_diff:.3g}; worst {worst} at {ratio:.3g} of its bound "
        f"(atol {atol:g} + rtol {rtol:g} * max|ref|{scaled})"
    )
    return Agreement(max_diff, worst, ratio, passed, ("DISAGREE: " if not passed else "") + detail)


@contextmanager
def full_fp32() -> Iterator[None]:
    """TF32 off for matrix products and convolutions while the block runs (fp32 means fp32)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
