"""Default accuracy gates, recipe detection and the falling-loss check."""

from __future__ import annotations

import math

import pytest

from rocmlab.gates import (
    DEFAULT_RECIPE,
    accuracy_check,
    default_min_accuracy,
    is_default_recipe,
    loss_check,
)


def test_default_recipe_detection() -> None:
    assert is_default_recipe(**DEFAULT_RECIPE)
    # The tutorial's recipe is not the default one.
    assert not is_default_recipe(optimizer="sgd", lr=0.01, momentum=0.0, batch_size=64)
    assert not is_default_recipe(optimizer="adam", lr=1e-3, momentum=0.0, batch_size=256)


@pytest.mark.parametrize(
    ("dataset", "epochs", "default", "gate"),
    [
        ("mnist", 1, True, 0.94),
        ("mnist", 2, True, 0.955),
        ("mnist", 3, True, 0.96),
        ("mnist", 20, True, 0.96),
        ("mnist", 1, False, 0.85),
        ("mnist", 5, False, 0.90),
        ("fashion-mnist", 1, True, 0.83),
        ("fashion-mnist", 3, True, 0.85),
        ("fashion-mnist", 1, False, 0.72),
    ],
)
def test_default_gates(dataset: str, epochs: int, default: bool, gate: float) -> None:
    assert default_min_accuracy(dataset, epochs, default) == gate


def test_gates_are_stricter_for_the_default_recipe_and_grow_with_epochs() -> None:
    for dataset in ("mnist", "fashion-mnist"):
        for epochs in range(1, 6):
            strict = default_min_accuracy(dataset, epochs, True)
            assert strict > default_min_accuracy(dataset, epochs, False)
            assert strict >= default_min_accuracy(dataset, max(1, epochs - 1), True)


def test_accuracy_check_is_inclusive() -> None:
    assert accuracy_check(0.96, 0.96, "test").passed
    failed = accuracy_check(0.9599, 0.96, "--min-accuracy")
    assert not failed.passed
    assert failed.detail == "test accuracy 0.9599, gate >= 0.9600 (--min-accuracy)"


@pytest.mark.parametrize(
    ("first", "last", "passed"),
    [
        (2.30, 0.30, True),
        (2.30, 1.14, True),
        (2.30, 1.16, False),  # fell, but not by half
        (2.30, 2.40, False),
        (2.30, math.nan, False),  # diverged
        (math.inf, 0.1, False),
    ],
)
def test_loss_check(first: float, last: float, passed: bool) -> None:
    assert loss_check(first, last).passed is passed
