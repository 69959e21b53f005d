"""The tutorial's model: a 784-128-64-10 multilayer perceptron."""

from __future__ import annotations

import torch
from torch import nn


class TutorialMLP(nn.Module):
    """Same layers and activations as the tutorial's ``Net``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.shape[0], -1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def build_model(seed: int) -> TutorialMLP:
    """A freshly initialised model; the same seed gives the same weights on every host."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return TutorialMLP()
    finally:
        torch.random.set_rng_state(generator_state)
