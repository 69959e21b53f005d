"""Command line: ``rocmlab smoke`` and ``rocmlab fetch-mnist``.

Importing this module does not import torch: ``fetch-mnist`` runs on hosts without it.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from rocmlab import __version__
from rocmlab.amp import AMP_CHOICES
from rocmlab.datasets import DATASETS
from rocmlab.errors import ExitCode, RocmlabError, UsageError
from rocmlab.gates import DEFAULT_EPOCHS, DEFAULT_RECIPE

EXIT_CODES = """exit codes:
  0  all checks passed
  1  a check failed (or torch is missing)
  2  a GPU was required but the run would be on the CPU
  3  data missing, truncated, altered or not fetchable
  4  bad arguments"""


class Parser(argparse.ArgumentParser):
    """argparse with exit code 4 (not 2) for bad arguments."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}\n{self.format_usage().rstrip()}")


def _number(
    kind: Callable[[str], float], low: float, high: float, what: str
) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: expected {what}")
        return value

    return parse


POSITIVE_INT = _number(int, 1, 1_000_000, "a whole number >= 1")
SEED = _number(int, 0, 2**63 - 1, "a whole number >= 0")
LR = _number(float, 1e-12, 10.0, "a learning rate in (0, 10]")
MOMENTUM = _number(float, 0.0, 0.999, "a momentum in [0, 0.999]")
FRACTION = _number(float, 0.0, 1.0, "an accuracy between 0 and 1")
SECONDS = _number(float, 0.0, 3600.0, "seconds between 0 and 3600")
ATTEMPTS = _number(int, 1, 100, "a whole number between 1 and 100")


def build_parser() -> Parser:
    """The ``rocmlab`` argument parser."""
    parser = Parser(
        prog="rocmlab",
        description="Prove that a ROCm (or CUDA) GPU trains correctly: the MNIST smoke job.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rocmlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    smoke = sub.add_parser(
        "smoke",
        help="train the tutorial's MLP on MNIST and check device, numbers, learning and speed",
        description=(
            "Train the tutorial's 784-128-64-10 MLP with the dataset resident on the device;\n"
            "check that the GPU's forward and backward agree with a float64 CPU reference, that\n"
            "the loss falls and that test accuracy reaches its gate; measure samples/s and\n"
            "matmul TFLOP/s. Under `torchrun --nproc-per-node N`: DistributedDataParallel.\n"
            "The tutorial's exact recipe: --optimizer sgd --lr 0.01 --momentum 0 --batch-size 64"
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    smoke.add_argument(
        "--data",
        type=Path,
        required=True,
        metavar="DIR",
        help="directory with the IDX files (flat or torchvision's MNIST/raw/, "
        "gzipped or not); nothing is downloaded",
    )
    smoke.add_argument(
        "--dataset",
        choices=sorted(DATASETS),
        default="mnist",
        help="which dataset DIR holds (default: %(default)s)",
    )
    smoke.add_argument(
        "--device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="auto: the GPU when torch sees one, else the CPU; ROCm uses 'cuda' "
        "(default: %(default)s)",
    )
    smoke.add_argument(
        "--require-gpu",
        action="store_true",
        help="fail with exit code 2 when the run would be on the CPU",
    )
    smoke.add_argument(
        "--epochs",
        type=POSITIVE_INT,
        default=DEFAULT_EPOCHS,
        metavar="N",
        help="training epochs (default: %(default)s)",
    )
    smoke.add_argument(
        "--batch-size",
        type=POSITIVE_INT,
        default=DEFAULT_RECIPE["batch_size"],
        metavar="N",
        help="batch size per process (default: %(default)s)",
    )
    smoke.add_argument(
        "--optimizer",
        choices=("adam", "sgd"),
        default=DEFAULT_RECIPE["optimizer"],
        help="(default: %(default)s)",
    )
    smoke.add_argument(
        "--lr",
        type=LR,
        default=DEFAULT_RECIPE["lr"],
        metavar="F",
        help="learning rate (default: %(default)s)",
    )
    smoke.add_argument(
        "--momentum",
        type=MOMENTUM,
        default=None,
        metavar="F",
        help="SGD momentum (default: 0; only with --optimizer sgd)",
    )
    smoke.add_argument(
        "--amp",
        choices=AMP_CHOICES,
        default="auto",
        help="mixed precision: auto picks bf16 where the GPU has it (never on "
        "gfx10xx), else fp16; off on the CPU (default: %(default)s)",
    )
    smoke.add_argument(
        "--min-accuracy",
        type=FRACTION,
        default=None,
        metavar="F",
        help="test accuracy gate (default: per dataset, epochs and recipe; see docs/smoke-job.md)",
    )
    smoke.add_argument(
        "--seed",
        type=SEED,
        default=0,
        metavar="N",
        help="seed for weights and shuffling (default: %(default)s)",
    )
    smoke.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        dest="json_path",
        help="also write the report as JSON to PATH (rank 0 only)",
    )
    smoke.set_defaults(func=cmd_smoke)

    fetch = sub.add_parser(
        "fetch-mnist",
        help="stage the IDX files from a mirror URL or a directory, verifying SHA-256",
        description=(
            "Copy or download the dataset's four IDX files into DEST, each verified against its\n"
            "known SHA-256 before it is moved in place. Downloads resume after a cut connection\n"
            "and are retried a bounded number of times with exponential back-off. Files already\n"
            "in DEST that verify are kept. Needs no PyTorch."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fetch.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="SOURCE",
        help="mirror base URL (http://, https://, file://) holding "
        "train-images-idx3-ubyte.gz etc., or a directory (flat or MNIST/raw/)",
    )
    fetch.add_argument(
        "--dest",
        type=Path,
        required=True,
        metavar="DIR",
        help="directory to stage the files in (created if missing)",
    )
    fetch.add_argument(
        "--dataset", choices=sorted(DATASETS), default="mnist", help="(default: %(default)s)"
    )
    fetch.add_argument(
        "--attempts",
        type=ATTEMPTS,
        default=5,
        metavar="N",
        help="download attempts per file (default: %(default)s)",
    )
    fetch.add_argument(
        "--timeout",
        type=_number(float, 0.1, 3600.0, "seconds in [0.1, 3600]"),
        default=30.0,
        metavar="S",
        help="network timeout in seconds (default: %(default)s)",
    )
    fetch.add_argument(
        "--retry-delay",
        type=SECONDS,
        default=1.0,
        metavar="S",
        help="first back-off in seconds, doubled per retry, at most 30 (default: %(default)s)",
    )
    fetch.set_defaults(func=cmd_fetch)
    return parser


def cmd_smoke(args: argparse.Namespace) -> int:
    """Run ``rocmlab smoke``."""
    if args.momentum is not None and args.optimizer != "sgd":
        raise UsageError(f"--momentum {args.momentum:g}: only valid with --optimizer sgd")
    if args.require_gpu and args.device == "cpu":
        raise UsageError("--require-gpu contradicts --device cpu: drop one of them")
    from rocmlab.torch_import import import_torch

    import_torch()
    from rocmlab.smoke import SmokeOptions, run_smoke

    options = SmokeOptions(
        data=args.data,
        dataset=args.dataset,
        device=args.device,
        require_gpu=args.require_gpu,
        epochs=args.epochs,
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        lr=args.lr,
        momentum=args.momentum or 0.0,
        amp=args.amp,
        min_accuracy=args.min_accuracy,
        seed=args.seed,
        json_path=args.json_path,
    )
    return run_smoke(options)


def cmd_fetch(args: argparse.Namespace) -> int:
    """Run ``rocmlab fetch-mnist``."""
    from rocmlab.fetch import FetchOptions, fetch_dataset

    options = FetchOptions(
        attempts=args.attempts, timeout=args.timeout, retry_delay=args.retry_delay
    )
    staged = fetch_dataset(args.source, args.dest, DATASETS[args.dataset], options)
    print(f"{args.dataset}: {len(staged)} files staged and verified in {args.dest}")
    return int(ExitCode.PASSED)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rocmlab`` console script."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return int(ExitCode.BAD_ARGUMENTS)
        return int(args.func(args))
    except RocmlabError as exc:
        print(f"rocmlab: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130
