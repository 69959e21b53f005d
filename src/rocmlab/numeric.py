"""Numeric truth: the run device's forward and backward agree with a float64 CPU reference.

A wrong ``HSA_OVERRIDE_GFX_VERSION`` can load code objects for another architecture that run but
compute garbage; only comparing against an independent computation catches that. On a CPU-only run
the same check compares CPU float32 against CPU float64 (GPU-vs-CPU is then not applicable, and the
report says so).

One fixed batch goes forward and backward through the model on the device, in the run's precision
(fp32, or autocast fp16/bf16), keeping every intermediate. Then on the CPU in float64:

* end to end: the logits and the loss of the same batch through the float64 copy of the model
  (the forward pass is continuous, so rounding differences stay small);
* op by op: each matrix product, ReLU and the loss gradient, forward and backward, recomputed from
  the device's own inputs to that op. Comparing gradients end to end would be unsound: a ReLU input
  that rounding moves across zero legitimately changes a gradient row.

Criterion per compared tensor: ``max|device - reference| <= atol + rtol * max|reference|``;
non-finite device values fail.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rocmlab.model import TutorialMLP

# (atol, rtol) per compute dtype; None is plain float32 (TF32 off). Measured: fp32 against fp64
# agrees to ~1e-7 of scale, fp16 autocast to ~5e-4, bf16 to ~4e-3.
TOLERANCES: dict[str | None, tuple[float, float]] = {
    None: (1e-9, 1e-4),
    "float16": (1e-6, 1e-2),
    "bfloat16": (1e-6, 5e-2),
}
LAYERS = ("fc1", "fc2", "fc3")

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
    model: TutorialMLP,
    x: torch.Tensor,
    y: torch.Tensor,
    amp_dtype: torch.dtype | None,
    perturb: Perturb | None,
) -> dict[str, torch.Tensor]:
    """Forward and backward on the model's device, returning every intermediate by name."""

    def tap(name: str, tensor: torch.Tensor) -> torch.Tensor:
        return perturb(name, tensor) if perturb is not None else tensor

    saved: dict[str, torch.Tensor] = {}

    def keep_grad(name: str, tensor: torch.Tensor) -> None:
        def hook(grad: torch.Tensor) -> torch.Tensor:
            grad = tap(f"grad:{name}", grad)
            saved[f"grad:{name}"] = grad.detach()
            return grad

        tensor.register_hook(hook)

    model.zero_grad(set_to_none=True)
    autocast = torch.autocast(x.device.type, dtype=amp_dtype) if amp_dtype else nullcontext()
    with autocast:
        h = x
        for index, layer_name in enumerate(LAYERS):
            layer = getattr(model, layer_name)
            saved[f"in:{layer_name}"] = h.detach()
            z = tap(f"z:{layer_name}", F.linear(h, layer.weight, layer.bias))
            saved[f"z:{layer_name}"] = z.detach()
            keep_grad(f"z:{layer_name}", z)
            if index < len(LAYERS) - 1:
                h = tap(f"relu:{layer_name}", torch.relu(z))
                saved[f"relu:{layer_name}"] = h.detach()
                keep_grad(f"relu:{layer_name}", h)
            else:
                h = z
        loss = tap("loss", F.cross_entropy(h, y))
    saved["loss"] = loss.detach()
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None
        saved[f"grad:{name}"] = tap(f"grad:{name}", param.grad).detach()
    return saved


def _references(
    cpu_model: TutorialMLP, x: torch.Tensor, y: torch.Tensor, dev: dict[str, torch.Tensor]
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(device value, float64 reference) pairs, references computed on the CPU."""

    def d(name: str) -> torch.Tensor:
        return dev[name].to("cpu", torch.float64)

    params = {name: p.detach().to("cpu", torch.float64) for name, p in cpu_model.named_parameters()}
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    # End to end, forward only.
    h = x.to(torch.float64)
    for index, layer_name in enumerate(LAYERS):
        h = F.linear(h, params[f"{layer_name}.weight"], params[f"{layer_name}.bias"])
        if index < len(LAYERS) - 1:
            h = torch.relu(h)
    pairs["logits (end to end)"] = (d("z:fc3"), h)
    pairs["loss (end to end)"] = (d("loss"), F.cross_entropy(h, y))

    # Op by op, forward: each product from the device's own input to it.
    for index, layer_name in enumerate(LAYERS):
        weight, bias = params[f"{layer_name}.weight"], params[f"{layer_name}.bias"]
        pairs[f"z:{layer_name}"] = (
            d(f"z:{layer_name}"),
            F.linear(d(f"in:{layer_name}"), weight, bias),
        )
        if index < len(LAYERS) - 1:
            pairs[f"relu:{layer_name}"] = (
                d(f"relu:{layer_name}"),
                torch.relu(d(f"z:{layer_name}")),
            )

    # Op by op, backward.
    logits = d("z:fc3")
    onehot = F.one_hot(y.to("cpu"), logits.shape[1]).to(torch.float64)
    pairs["grad:z:fc3"] = (d("grad:z:fc3"), (torch.softmax(logits, 1) - onehot) / logits.shape[0])
    for index, layer_name in enumerate(LAYERS):
        grad_z = d(f"grad:z:{layer_name}")
        pairs[f"grad:{layer_name}.weight"] = (
            d(f"grad:{layer_name}.weight"),
            grad_z.T @ d(f"in:{layer_name}"),
        )
        pairs[f"grad:{layer_name}.bias"] = (d(f"grad:{layer_name}.bias"), grad_z.sum(0))
        if index > 0:
            below = LAYERS[index - 1]
            grad_h = grad_z @ params[f"{layer_name}.weight"]
            pairs[f"grad:relu:{below}"] = (d(f"grad:relu:{below}"), grad_h)
            pairs[f"grad:z:{below}"] = (
                d(f"grad:z:{below}"),
                d(f"grad:relu:{below}") * (d(f"z:{below}") > 0),
            )
    return pairs


def compare(
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]], atol: float, rtol: float
) -> tuple[float, str, float]:
    """(max abs diff over all pairs, worst pair, its diff/bound ratio); inf when non-finite."""
    max_diff, worst, worst_ratio = 0.0, "", -1.0
    for name, (got, ref) in pairs.items():
        if not torch.isfinite(got).all():
            return float("inf"), name, float("inf")
        diff = float((got - ref).abs().max())
        ratio = diff / (atol + rtol * float(ref.abs().max()))
        max_diff = max(max_diff, diff)
        if ratio > worst_ratio:
            worst, worst_ratio = name, ratio
    return max_diff, worst, worst_ratio


def check_agreement(
    model: TutorialMLP,
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
    device_model = TutorialMLP().to(device)
    device_model.load_state_dict(model.state_dict())
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        dev = _device_pass(device_model, x.to(device), y.to(device), amp_dtype, perturb)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    pairs = _references(model, x, y.to("cpu"), dev)

    key = None if amp_dtype is None else str(amp_dtype).removeprefix("torch.")
    atol, rtol = TOLERANCES[key]
    max_diff, worst, ratio = compare(pairs, atol, rtol)
    passed = ratio <= 1.0
    detail = (
        f"{device.type} {key or 'float32'} vs cpu float64, batch {x.shape[0]}, {len(pairs)} "
        f"tensors: max |diff| {max_diff:.3g}; worst {worst} at {ratio:.3g} of its bound "
        f"(atol {atol:g} + rtol {rtol:g} * max|ref|)"
    )
    return Agreement(max_diff, worst, ratio, passed, ("DISAGREE: " if not passed else "") + detail)
