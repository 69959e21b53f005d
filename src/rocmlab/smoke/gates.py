"""The pass/fail checks of a smoke run and their default thresholds. No torch needed."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# Default recipe (strong signal in little time). Measured on CPU with seeds 0 and 1, test accuracy
# after 1/2/3/5 epochs: MNIST 0.953/0.962/0.970/0.974, Fashion-MNIST 0.849/0.852/0.864/0.871.
DEFAULT_RECIPE = {"optimizer": "adam", "lr": 1e-3, "momentum": 0.0, "batch_size": 128}
DEFAULT_EPOCHS = 3

# Accuracy gates per model, dataset and recipe: (minimum epochs, gate), highest matching row wins.
# The default recipe's gates sit about one point under the measured accuracy. Any other
# hyperparameters get the floor measured for the weakest recipe the job supports, the tutorial's
# (SGD lr 0.01, batch 64), about five points lower. MLP, tutorial recipe after 1/2/3 epochs: MNIST
# 0.90/0.92/0.93, Fashion-MNIST 0.785/0.81/0.83.
# CNN (model.SmallCNN), measured with rocmlab's training on the CPU, seeds 0 and 1, the lower
# of the two after 1/2/3 epochs: default recipe MNIST 0.979/0.9825/0.9863, Fashion-MNIST
# 0.8685/0.8701/0.8846; tutorial recipe MNIST 0.9695/0.9738/0.9808, Fashion-MNIST
# 0.8361/0.8625/0.8742.
ACCURACY_GATES: dict[tuple[str, str, bool], tuple[tuple[int, float], ...]] = {
    ("mlp", "mnist", True): ((1, 0.94), (2, 0.955), (3, 0.96)),
    ("mlp", "mnist", False): ((1, 0.85), (2, 0.88), (3, 0.90)),
    ("mlp", "fashion-mnist", True): ((1, 0.83), (2, 0.84), (3, 0.85)),
    ("mlp", "fashion-mnist", False): ((1, 0.72), (2, 0.76), (3, 0.78)),
    ("cnn", "mnist", True): ((1, 0.97), (2, 0.97), (3, 0.975)),
    ("cnn", "mnist", False): ((1, 0.92), (2, 0.925), (3, 0.93)),
    ("cnn", "fashion-mnist", True): ((1, 0.855), (2, 0.86), (3, 0.87)),
    ("cnn", "fashion-mnist", False): ((1, 0.79), (2, 0.81), (3, 0.82)),
}
LOSS_DROP = 0.5  # the last steps' mean loss must be below half of the first steps'


@dataclass(frozen=True)
class Check:
    """One named pass/fail check, with what was measured; ``rank`` for per-process checks."""

    name: str
    passed: bool
    detail: str
    rank: int | None = None

    def as_dict(self) -> dict[str, object]:
        """Plain dict for the JSON report."""
        return asdict(self)


def is_default_recipe(optimizer: str, lr: float, momentum: float, batch_size: int) -> bool:
    """Whether the run uses the default hyperparameters (the stricter accuracy gates apply)."""
    given = {"optimizer": optimizer, "lr": lr, "momentum": momentum, "batch_size": batch_size}
    return given == DEFAULT_RECIPE


def default_min_accuracy(
    dataset: str, epochs: int, default_recipe: bool, model: str = "mlp"
) -> float:
    """The accuracy gate for a model, dataset, number of epochs and recipe."""
    gate = 0.0
    for min_epochs, value in ACCURACY_GATES[(model, dataset, default_recipe)]:
        if epochs >= min_epochs:
            gate = value
    return gate


def accuracy_check(accuracy: float, gate: float, source: str) -> Check:
    """Test accuracy at or above the gate."""
    passed = accuracy >= gate
    return Check("accuracy", passed, f"test accuracy {accuracy:.4f}, gate >= {gate:.4f} ({source})")


def loss_check(first: float, last: float) -> Check:
    """The training loss fell: mean of the last steps below LOSS_DROP x the first steps'."""
    passed = math.isfinite(first) and math.isfinite(last) and last < LOSS_DROP * first
    return Check(
        "loss_falls",
        passed,
        f"mean loss of the first steps {first:.4f}, of the last steps {last:.4f}; "
        f"required below {LOSS_DROP:g} x first",
    )
