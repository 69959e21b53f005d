"""``rocmlab fetch-mnist``: stage a dataset's IDX files. Needs no PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path

from rocmlab.commands.argtypes import ATTEMPTS, SECONDS, number
from rocmlab.common import contract
from rocmlab.common.errors import ExitCode
from rocmlab.common.outputs import staging_directory
from rocmlab.datasets.catalog import DATASETS

NAME = "fetch-mnist"


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rocmlab fetch-mnist``."""
    fetch = sub.add_parser(
        NAME,
        help="stage the IDX files from a mirror URL or a directory, verifying SHA-256",
        description=(
            "Copy or download the dataset's four IDX files into DEST, each verified against its\n"
            "known SHA-256 before it is moved in place. Downloads resume after a cut connection\n"
            "and are retried a bounded number of times with exponential back-off. Files already\n"
            "in DEST that verify are kept. Needs no PyTorch."
        ),
        epilog=contract.exit_codes_help(NAME),
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
        help="directory to stage the files in (created, with its parents, if missing)",
    )
    fetch.add_argument(
        "--dataset",
        choices=sorted(contract.DATASETS),
        default="mnist",
        help="(default: %(default)s)",
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
        type=number(float, 0.1, 3600.0, "seconds in [0.1, 3600]"),
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
    fetch.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``rocmlab fetch-mnist``."""
    from rocmlab.datasets.fetch import FetchOptions, fetch_dataset

    staging_directory("--dest", args.dest)
    options = FetchOptions(
        attempts=args.attempts, timeout=args.timeout, retry_delay=args.retry_delay
    )
    staged = fetch_dataset(args.source, args.dest, DATASETS[args.dataset], options)
    print(f"{args.dataset}: {len(staged)} files staged and verified in {args.dest}")
    return int(ExitCode.PASSED)
