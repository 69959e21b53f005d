"""The models: the tutorial's 784-128-64-10 MLP and a small CNN (conv + batch-norm + max-pool).

Each model is a fixed sequence of named steps (``STEPS``), so that the numeric check can recompute
every step from the device's own input to it, and the checkpoint check can wrap groups of steps
(``SEGMENTS``) in ``torch.utils.checkpoint``. ``forward`` runs the same steps.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# Steps without parameters, by name; every other step names a submodule.
STATELESS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "maxpool": lambda x: F.max_pool2d(x, 2),
    "flatten": lambda x: x.flatten(1),
}


class StepModel(nn.Module):
    """A model that is a fixed sequence of steps: (name of the step's output, operation)."""

    INPUT_SHAPE: tuple[int, ...] = ()
    STEPS: tuple[tuple[str, str], ...] = ()
    SEGMENTS: tuple[int, ...] = ()  # numbers of consecutive steps checkpointed together

    def shape_input(self, x: torch.Tensor) -> torch.Tensor:
        """A batch of images (N x 784 or N x 1 x 28 x 28) in the shape the first step takes."""
        return x.reshape(x.shape[0], *self.INPUT_SHAPE)

    def run_step(self, op: str, x: torch.Tensor) -> torch.Tensor:
        """Apply one step: a stateless operation or the submodule named ``op``."""
        function = STATELESS.get(op)
        return function(x) if function is not None else getattr(self, op)(x)

    def segments(self) -> list[tuple[tuple[str, str], ...]]:
        """The steps grouped as ``SEGMENTS`` says."""
        groups, start = [], 0
        for length in self.SEGMENTS:
            groups.append(self.STEPS[start : start + length])
            start += length
        return groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shape_input(x)
        for _unused, op in self.STEPS:
            x = self.run_step(op, x)
        return x


class TutorialMLP(StepModel):
    """Same layers and activations as the tutorial's ``Net``."""

    INPUT_SHAPE = (784,)
    STEPS = (
        ("z:fc1", "fc1"),
        ("relu:fc1", "relu"),
        ("z:fc2", "fc2"),
        ("relu:fc2", "relu"),
        ("z:fc3", "fc3"),
    )
    SEGMENTS = (2, 2, 1)

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)


CNN_CHANNELS = (8, 16, 32)


class SmallCNN(StepModel):
    """Three blocks of 3x3 convolution (no bias: batch-norm follows), batch-norm, ReLU and 2x2
    max-pooling (28 -> 14 -> 7 -> 3), then one linear layer: 8,834 parameters."""

    INPUT_SHAPE = (1, 28, 28)
    STEPS = (
        *(
            step
            for block in (1, 2, 3)
            for step in (
                (f"conv{block}", f"conv{block}"),
                (f"bn{block}", f"bn{block}"),
                (f"relu{block}", "relu"),
                (f"pool{block}", "maxpool"),
            )
        ),
        ("flatten", "flatten"),
        ("fc", "fc"),
    )
    SEGMENTS = (4, 4, 4, 2)

    def __init__(self) -> None:
        super().__init__()
        channels_in = 1
        for block, channels in enumerate(CNN_CHANNELS, start=1):
            conv = nn.Conv2d(channels_in, channels, 3, padding=1, bias=False)
            setattr(self, f"conv{block}", conv)
            setattr(self, f"bn{block}", nn.BatchNorm2d(channels))
            channels_in = channels
        self.fc = nn.Linear(channels_in * 3 * 3, 10)


MODELS: dict[str, type[StepModel]] = {"mlp": TutorialMLP, "cnn": SmallCNN}


def build_model(seed: int, kind: str = "mlp") -> StepModel:
    """A freshly initialised model; the same seed gives the same weights on every host."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return MODELS[kind]()
    finally:
        torch.random.set_rng_state(generator_state)


def has_batch_norm(model: nn.Module) -> bool:
    """Whether the model has batch-norm layers (train and eval mode then compute differently)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
