"""Command-line behaviour that needs no training: help, bad arguments (exit 2), no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rocmlab_testutil import REPO, run_cli, without_torch

from rocmlab.cli import main


def test_top_level_help_lists_commands_and_exit_codes() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for text in ("smoke", "fetch-mnist", "exit codes:", "3  data missing"):
        assert text in result.stdout


def test_smoke_help_names_the_tutorial_recipe() -> None:
    result = run_cli("smoke", "--help")
    assert result.returncode == 0
    assert "--optimizer sgd --lr 0.01 --momentum 0 --batch-size 64" in " ".join(
        result.stdout.split()
    )
    for option in (
        "--data",
        "--dataset",
        "--device",
        "--require-gpu",
        "--amp",
        "--min-accuracy",
        "--json",
        "--doctor-json",
        "--model",
        "--techniques",
    ):
        assert option in result.stdout


def test_fetch_help() -> None:
    result = run_cli("fetch-mnist", "--help")
    assert result.returncode == 0
    assert "--from" in result.stdout and "--attempts" in result.stdout


def test_version() -> None:
    assert main(["--version"]) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "usage: rocmlab"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["smoke"], "the following arguments are required: --data"),
        (
            ["smoke", "--data", "d", "--epochs", "0"],
            "argument --epochs: '0' is out of range: expected a whole number >= 1",
        ),
        (
            ["smoke", "--data", "d", "--epochs", "two"],
            "argument --epochs: 'two' is not a whole number >= 1",
        ),
        (
            ["smoke", "--data", "d", "--batch-size", "-5"],
            "argument --batch-size: '-5' is out of range",
        ),
        (
            ["smoke", "--data", "d", "--lr", "abc"],
            "argument --lr: 'abc' is not a learning rate in (0, 10]",
        ),
        (["smoke", "--data", "d", "--lr", "nan"], "argument --lr: 'nan' is out of range"),
        (
            ["smoke", "--data", "d", "--min-accuracy", "97"],
            "argument --min-accuracy: '97' is out of range: expected an accuracy between 0 and 1",
        ),
        (
            ["smoke", "--data", "d", "--amp", "fp8"],
            "argument --amp: invalid choice: 'fp8' (choose from ",
        ),
        (["smoke", "--data", "d", "--device", "hip"], "argument --device: invalid choice: 'hip'"),
        (
            ["smoke", "--data", "d", "--dataset", "cifar10"],
            "argument --dataset: invalid choice: 'cifar10'",
        ),
        (
            ["smoke", "--data", "d", "--momentum", "0.9"],
            "--momentum 0.9: only valid with --optimizer sgd",
        ),
        (
            ["smoke", "--data", "d", "--optimizer", "sgd", "--momentum", "1.5"],
            "argument --momentum: '1.5' is out of range",
        ),
        (
            ["smoke", "--data", "d", "--model", "resnet"],
            "argument --model: invalid choice: 'resnet' (choose from ",
        ),
        (
            ["smoke", "--data", "d", "--techniques", "amp,quantization"],
            "argument --techniques: 'amp,quantization': unknown 'quantization'; expected a "
            "comma-separated list of accumulation, checkpoint, amp, profile",
        ),
        (
            ["smoke", "--data", "d", "--techniques", "profile"],
            "--techniques profile writes its Chrome trace beside the report: give --json PATH",
        ),
        (["fetch-mnist", "--dest", "d"], "the following arguments are required: --from"),
        (
            ["fetch-mnist", "--from", "x", "--dest", "d", "--attempts", "0"],
            "argument --attempts: '0' is out of range",
        ),
    ],
)
def test_bad_arguments_exit_2_naming_option_value_and_choices(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_require_gpu_with_device_cpu_is_contradictory(tmp_path: Path) -> None:
    result = run_cli("smoke", "--data", str(tmp_path), "--device", "cpu", "--require-gpu")
    assert result.returncode == 2
    assert "--require-gpu contradicts --device cpu" in result.stderr


def test_cli_module_does_not_import_torch() -> None:
    code = "import sys, rocmlab.cli, rocmlab.datasets.fetch; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


def test_smoke_without_torch_explains(real_data: dict[str, Path]) -> None:
    result = without_torch("smoke", "--data", str(real_data["mnist"]))
    assert result.returncode == 1
    assert "PyTorch is not importable" in result.stderr


def test_fetch_mnist_works_without_torch(real_data: dict[str, Path], tmp_path: Path) -> None:
    result = without_torch(
        "fetch-mnist", "--from", str(real_data["mnist"]), "--dest", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert "4 files staged and verified" in result.stdout
