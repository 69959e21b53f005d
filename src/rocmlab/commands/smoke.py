"""``rocmlab smoke``: its arguments, the checks made before anything heavy, and the call into
rocmlab.smoke.job (which imports torch only to run)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rocmlab import docs_url
from rocmlab.commands.argtypes import (
    FRACTION,
    LR,
    MOMENTUM,
    POSITIVE_INT,
    SEED,
    comma_list,
    number,
)
from rocmlab.common import contract
from rocmlab.common.errors import UsageError
from rocmlab.common.outputs import writable_output
from rocmlab.smoke.amp import AMP_CHOICES
from rocmlab.smoke.gates import DEFAULT_EPOCHS, DEFAULT_RECIPE
from rocmlab.smoke.report import load_doctor_document, trace_path_for
from rocmlab.smoke.rocm_wheels import ROCM_SDK_TIMEOUT

ROCM_SDK_SECONDS = number(float, 1.0, 3600.0, "seconds between 1 and 3600")

NAME = "smoke"
EXIT_CODES = contract.exit_codes_help(NAME)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rocmlab smoke``."""
    smoke = sub.add_parser(
        NAME,
        help="train the tutorial's MLP (or a CNN) on MNIST and check device, numbers, learning "
        "and speed",
        description=(
            "Train the tutorial's 784-128-64-10 MLP with the dataset resident on the device;\n"
            "check that the GPU's forward and backward agree with a float64 CPU reference, that\n"
            "the loss falls and that test accuracy reaches its gate; measure samples/s and\n"
            "matmul TFLOP/s. --model cnn trains a small CNN instead; --techniques also checks\n"
            "gradient accumulation, activation checkpointing, mixed precision and a profile.\n"
            "Under `torchrun --nproc-per-node N`: DistributedDataParallel.\n"
            "The tutorial's exact recipe: --optimizer sgd --lr 0.01 --momentum 0 --batch-size 64\n"
            f"The job, its gates and its report: {docs_url('smoke-job.md')}"
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
        choices=sorted(contract.DATASETS),
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
        help="fail with exit code 4 when the run would be on the CPU",
    )
    smoke.add_argument(
        "--model",
        choices=contract.MODELS,
        default="mlp",
        help="mlp: the tutorial's 784-128-64-10 MLP; cnn: a small CNN (3 x conv + batch-norm + "
        "max-pool), each with its own accuracy gates (default: %(default)s)",
    )
    smoke.add_argument(
        "--techniques",
        type=comma_list(contract.TECHNIQUES),
        default=(),
        metavar="LIST",
        help="also check these training techniques, comma-separated: accumulation (gradient "
        "accumulation), checkpoint (activation checkpointing), amp (fp32 vs autocast speed-up; "
        "GPU only), profile (torch.profiler; the Chrome trace goes beside --json)",
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
        help="test accuracy gate (default: per dataset, epochs and recipe; the gates are "
        "listed at the address below)",
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
        help="also write the report as JSON to PATH (rank 0 only); its directory must exist and "
        "be writable (checked before the run; never created)",
    )
    smoke.add_argument(
        "--doctor-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="embed this `rocmlab doctor --json` document in the report under 'doctor'",
    )
    smoke.add_argument(
        "--rocm-sdk-timeout",
        type=ROCM_SDK_SECONDS,
        default=ROCM_SDK_TIMEOUT,
        metavar="SECONDS",
        help="when the venv has ROCm wheels: how long `rocm-sdk test` may run before it is "
        "stopped and fails (default: %(default)g)",
    )
    smoke.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``rocmlab smoke``."""
    if args.momentum is not None and args.optimizer != "sgd":
        raise UsageError(f"--momentum {args.momentum:g}: only valid with --optimizer sgd")
    if args.require_gpu and args.device == "cpu":
        raise UsageError("--require-gpu contradicts --device cpu: drop one of them")
    if "profile" in args.techniques and args.json_path is None:
        raise UsageError(
            "--techniques profile writes its Chrome trace beside the report: give --json PATH"
        )
    if args.json_path is not None:
        writable_output("--json", args.json_path)
        if "profile" in args.techniques:
            writable_output("--json (its profile trace)", trace_path_for(args.json_path))
    doctor = load_doctor_document(args.doctor_json) if args.doctor_json is not None else None
    from rocmlab.smoke.job import run_smoke
    from rocmlab.smoke.options import SmokeOptions

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
        doctor=doctor,
        model=args.model,
        techniques=args.techniques,
        rocm_sdk_timeout=args.rocm_sdk_timeout,
    )
    return run_smoke(options)
