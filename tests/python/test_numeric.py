"""The numeric-agreement check passes honest computations and fails perturbed ones.

There is no GPU here, so the "device" is the CPU in float32 (or CPU autocast), compared against the
float64 reference, and faults are injected into chosen device results through ``perturb``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rocmlab.datasets.datadir import load_dataset
from rocmlab.smoke.model import build_model
from rocmlab.smoke.numeric import Perturb, check_agreement
from rocmlab.smoke.train import images_tensor, labels_tensor, normalise

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def batch(real_data: dict[str, Path]) -> tuple[torch.Tensor, torch.Tensor]:
    dataset = load_dataset(real_data["mnist"], "mnist")
    x = images_tensor(dataset.arrays["test_images"])[:256]
    y = labels_tensor(dataset.arrays["test_labels"])[:256]
    return normalise(x, 0.1307, 0.3081), y


@pytest.mark.parametrize("amp_dtype", [None, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", [0, 1])
def test_honest_computation_agrees(
    batch: tuple[torch.Tensor, torch.Tensor], amp_dtype: torch.dtype | None, seed: int
) -> None:
    result = check_agreement(build_model(seed), *batch, CPU, amp_dtype)
    assert result.passed, result.detail
    assert result.worst_ratio < 0.5  # a wide margin, not a near miss
    assert not result.detail.startswith("DISAGREE")


def test_fp32_detail_states_what_was_compared(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    result = check_agreement(build_model(0), *batch, CPU)
    assert result.max_abs_diff < 1e-5
    assert result.detail.startswith("cpu float32 vs cpu float64, batch 256, 18 tensors")
    assert "atol 1e-09 + rtol 0.0001" in result.detail


FORWARD_AND_BACKWARD = [
    "z:fc1",  # first matrix product
    "relu:fc1",
    "z:fc2",
    "z:fc3",
    "loss",
    "grad:z:fc3",  # loss gradient
    "grad:relu:fc2",  # backward matrix product
    "grad:z:fc1",  # ReLU backward
    "grad:fc1.weight",  # weight gradient product
    "grad:fc2.bias",
    "grad:fc3.weight",
]


def scale(target: str, factor: float) -> Perturb:
    def perturb(name: str, tensor: torch.Tensor) -> torch.Tensor:
        return tensor * factor if name == target else tensor

    return perturb


@pytest.mark.parametrize("target", FORWARD_AND_BACKWARD)
def test_a_one_per_mille_error_anywhere_fails(
    batch: tuple[torch.Tensor, torch.Tensor], target: str
) -> None:
    result = check_agreement(build_model(0), *batch, CPU, perturb=scale(target, 1.001))
    assert not result.passed
    assert result.worst_ratio > 2
    assert result.detail.startswith("DISAGREE: ")


@pytest.mark.parametrize("amp_dtype", [torch.float16, torch.bfloat16])
def test_amp_check_fails_on_a_ten_percent_error(
    batch: tuple[torch.Tensor, torch.Tensor], amp_dtype: torch.dtype
) -> None:
    result = check_agreement(build_model(0), *batch, CPU, amp_dtype, scale("z:fc2", 1.2))
    assert not result.passed


def test_garbage_from_a_wrong_kernel_fails(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    def wrong_kernel(name: str, tensor: torch.Tensor) -> torch.Tensor:
        if name != "z:fc1":
            return tensor
        return tensor + (torch.randn_like(tensor) - tensor.detach())  # random values, same graph

    result = check_agreement(build_model(0), *batch, CPU, perturb=wrong_kernel)
    assert not result.passed
    assert result.worst_ratio > 100


def test_nan_fails(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    def nan(name: str, tensor: torch.Tensor) -> torch.Tensor:
        if name == "grad:fc2.weight":
            tensor = tensor.clone()
            tensor[0, 0] = float("nan")
        return tensor

    result = check_agreement(build_model(0), *batch, CPU, perturb=nan)
    assert not result.passed
    assert result.worst_tensor == "grad:fc2.weight"
    assert result.max_abs_diff == float("inf")


def test_rounding_noise_of_another_summation_order_passes(
    batch: tuple[torch.Tensor, torch.Tensor],
) -> None:
    # A GPU sums in another order: relative noise ~1e-7 on every result must not fail the check,
    # even where it moves a ReLU input across zero (gradients are compared op by op).
    generator = torch.Generator().manual_seed(0)

    def noise(name: str, tensor: torch.Tensor) -> torch.Tensor:
        jitter = torch.randn(tensor.shape, generator=generator).to(tensor.dtype)
        return tensor * (1 + 2e-7 * jitter)

    result = check_agreement(build_model(0), *batch, CPU, perturb=noise)
    assert result.passed, result.detail


def test_the_model_is_not_modified(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    model = build_model(3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    check_agreement(model, *batch, CPU, torch.bfloat16)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())


# --- the CNN: convolutions, batch-norm (train and eval mode), max-pooling ----------------------


@pytest.fixture(scope="module")
def fashion_batch(real_data: dict[str, Path]) -> tuple[torch.Tensor, torch.Tensor]:
    """64 real Fashion-MNIST test images: the CNN's float64 reference costs ~1 s per check on
    this CPU at 64 (the job itself uses 256), and every step's claim holds per batch."""
    dataset = load_dataset(real_data["fashion-mnist"], "fashion-mnist")
    x = images_tensor(dataset.arrays["test_images"])[:64]
    y = labels_tensor(dataset.arrays["test_labels"])[:64]
    return normalise(x, dataset.spec.mean, dataset.spec.std), y


@pytest.mark.parametrize("amp_dtype", [None, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", [0, 1])
def test_cnn_honest_computation_agrees(
    fashion_batch: tuple[torch.Tensor, torch.Tensor], amp_dtype: torch.dtype | None, seed: int
) -> None:
    result = check_agreement(build_model(seed, "cnn"), *fashion_batch, CPU, amp_dtype)
    assert result.passed, result.detail
    assert result.worst_ratio < 0.5


def test_cnn_on_mnist_agrees(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    result = check_agreement(build_model(0, "cnn"), batch[0][:64], batch[1][:64], CPU)
    assert result.passed, result.detail
    assert result.worst_ratio < 0.5


def test_cnn_detail_counts_every_step(fashion_batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    result = check_agreement(build_model(0, "cnn"), *fashion_batch, CPU)
    # 3 end to end (train and eval logits, loss) + 14 step outputs + the loss gradient + 13
    # input gradients, max-pooling's 3 compared twice (window sums, off the maxima) + 11
    # parameter gradients (3 conv, 3 x 2 batch-norm, 2 linear).
    assert "batch 64, 45 tensors" in result.detail
    assert "convolutions: max sum of |terms|" in result.detail


CNN_TARGETS = [
    ("conv1", 1.001),  # first convolution
    ("bn1", 1.001),  # batch-norm, batch statistics
    ("relu2", 1.001),
    ("pool3", 1.001),
    ("fc", 1.001),
    ("loss", 1.001),
    ("grad:fc", 1.001),  # loss gradient
    ("grad:pool2", 1.001),  # convolution backward (input gradient of conv3)
    ("grad:conv2", 1.001),  # batch-norm backward
    ("grad:bn1", 1.001),  # ReLU backward
    ("grad:bn2.weight", 1.001),
    ("grad:bn3.bias", 1.001),
    ("grad:fc.weight", 1.001),
    ("eval:logits", 1.001),  # batch-norm with running statistics (the inference kernels)
    # Convolution weight gradients sum many terms that cancel (conv1: 784 per image): fp32
    # itself gets conv1's wrong by ~0.02-0.04 % of its value (batch 256), so a 0.1 % error
    # cannot be told from rounding there.
    ("grad:conv1.weight", 1.03),
    ("grad:conv2.weight", 1.01),
    ("grad:conv3.weight", 1.002),
]


@pytest.mark.parametrize(("target", "factor"), CNN_TARGETS)
def test_cnn_a_small_error_anywhere_fails(
    fashion_batch: tuple[torch.Tensor, torch.Tensor], target: str, factor: float
) -> None:
    model = build_model(0, "cnn")
    result = check_agreement(model, *fashion_batch, CPU, perturb=scale(target, factor))
    assert not result.passed, result.detail
    assert result.worst_ratio > 2


def test_cnn_max_pool_gradient_sent_to_the_wrong_pixel_fails(
    fashion_batch: tuple[torch.Tensor, torch.Tensor],
) -> None:
    def shifted(name: str, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.roll(1, dims=-1) if name == "grad:relu1" else tensor

    result = check_agreement(build_model(0, "cnn"), *fashion_batch, CPU, perturb=shifted)
    assert not result.passed
    assert result.worst_tensor.startswith("grad:relu1 (")


def test_cnn_max_pool_may_break_ties_either_way(
    fashion_batch: tuple[torch.Tensor, torch.Tensor],
) -> None:
    # Where a window's four inputs are equal (the images' uniform background), another kernel may
    # route the gradient to another of them: here the last instead of the first.
    seen: dict[str, torch.Tensor] = {}
    tied_windows: list[int] = []

    def other_tie_break(name: str, tensor: torch.Tensor) -> torch.Tensor:
        if name == "relu1":
            seen["x"] = tensor.detach()
        if name != "grad:relu1":
            return tensor
        x = seen["x"]
        corners = [x[..., i::2, j::2] for i in (0, 1) for j in (0, 1)]
        tied = (corners[0] == corners[1]) & (corners[0] == corners[2]) & (corners[0] == corners[3])
        tied_windows.append(int(tied.sum()))
        total = sum(tensor[..., i::2, j::2] for i in (0, 1) for j in (0, 1))
        moved = tensor.clone()
        for i in (0, 1):
            for j in (0, 1):
                keep = total if (i, j) == (1, 1) else torch.zeros_like(total)
                moved[..., i::2, j::2] = torch.where(tied, keep, tensor[..., i::2, j::2])
        return moved

    result = check_agreement(build_model(0, "cnn"), *fashion_batch, CPU, perturb=other_tie_break)
    assert tied_windows and tied_windows[0] > 1000
    assert result.passed, result.detail
