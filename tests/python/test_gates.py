"""Default accuracy gates, recipe detection and the falling-loss check."""

from __future__ import annotations

import math

import pytest

from rocmlab.smoke.gates import (
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
    ("model", "dataset", "epochs", "default", "gate"),
    [
        ("mlp", "mnist", 1, True, 0.94),
        ("mlp", "mnist", 2, True, 0.955),
        ("mlp", "mnist", 3, True, 0.96),
        ("mlp", "mnist", 20, True, 0.96),
        ("mlp", "mnist", 1, False, 0.85),
        ("mlp", "mnist", 5, False, 0.90),
        ("mlp", "fashion-mnist", 1, True, 0.83),
        ("mlp", "fashion-mnist", 3, True, 0.85),
        ("mlp", "fashion-mnist", 1, False, 0.72),
        ("cnn", "mnist", 1, True, 0.97),
        ("cnn", "mnist", 3, True, 0.975),
        ("cnn", "mnist", 1, False, 0.92),
        ("cnn", "fashion-mnist", 1, True, 0.855),
        ("cnn", "fashion-mnist", 5, True, 0.87),
        ("cnn", "fashion-mnist", 2, False, 0.81),
    ],
)
def test_default_gates(model: str, dataset: str, epochs: int, default: bool, gate: float) -> None:
    assert default_min_accuracy(dataset, epochs, default, model) == gate
    if model == "cnn":  # its own gates, above the MLP's
        assert gate > default_min_accuracy(dataset, epochs, default, "mlp")
    else:  # the MLP's are the default
        assert default_min_accuracy(dataset, epochs, default) == gate


def test_every_model_and_dataset_has_gates() -> None:
    from rocmlab.datasets.catalog import DATASETS
    from rocmlab.smoke.model import MODELS
    from rocmlab.smoke.report import MODEL_CHOICES

    assert set(MODELS) == set(MODEL_CHOICES)
    for model in MODEL_CHOICES:
        for dataset in DATASETS:
            for default in (True, False):
                assert default_min_accuracy(dataset, 1, default, model) > 0.5


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
