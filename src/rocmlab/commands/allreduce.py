"""``rocmlab allreduce``: its arguments, and the call into rocmlab.allreduce.job (imported to
run)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rocmlab import docs_url
from rocmlab.allreduce.msgsize import parse_size, parse_sizes
from rocmlab.commands.argtypes import POSITIVE_INT, SEED, number
from rocmlab.common import contract
from rocmlab.common.errors import UsageError
from rocmlab.common.outputs import writable_output

NAME = "allreduce"
DEFAULT_SIZES = "1K:4M"
EXIT_CODES = contract.exit_codes_help(NAME)


def _sizes_type(text: str) -> tuple[int, ...]:
    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size_type(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{exc}: expected bytes with an optional K/M/G suffix (binary), a multiple of 4, "
            "from 4 B to 4G"
        ) from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rocmlab allreduce``."""
    parser = sub.add_parser(
        NAME,
        help="all-reduce across the ranks of a torchrun job: exact sums, bus bandwidth, node pairs",
        description=(
            "Run under torchrun, on one machine or across machines (c10d rendezvous):\n"
            "  torchrun --nnodes N --nproc-per-node P --rdzv-backend c10d \\\n"
            "    --rdzv-endpoint HOST:PORT --rdzv-id ID -m rocmlab allreduce --json FILE\n"
            "For each size, every rank contributes numbers whose sum is known exactly; the\n"
            "result is compared element by element with the exact sum on every rank, then the\n"
            "all-reduce is timed and reported as nccl-tests does: algbw = bytes / time, busbw =\n"
            "algbw x 2(n-1)/n, latency = time of the smallest size. --pairwise measures every\n"
            "pair of nodes (or a seeded sample) and names the pairs well below the others.\n"
            "Every step must finish within --timeout: a host that dies or stalls ends the job\n"
            "with exit 1 and a message naming it. The report and the cluster check:\n"
            f"{docs_url('cluster-check.md')}"
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--sizes",
        type=_sizes_type,
        default=DEFAULT_SIZES,
        metavar="SPEC",
        help="message sizes: LO:HI doubles from LO to HI (e.g. 1K:64M), or a comma list "
        "(e.g. 4K,1M,16M); bytes, K/M/G binary (default: %(default)s)",
    )
    parser.add_argument(
        "--iters",
        type=POSITIVE_INT,
        default=20,
        metavar="N",
        help="timed all-reduces per size (fewer when they would not fit in an eighth of "
        "--timeout) (default: %(default)s)",
    )
    parser.add_argument(
        "--warmup",
        type=number(int, 0, 1_000_000, "a whole number >= 0"),
        default=5,
        metavar="N",
        help="untimed all-reduces per size before the timed ones (default: %(default)s)",
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "nccl", "gloo"),
        default="auto",
        help="auto: nccl on GPUs (RCCL on ROCm), gloo on CPUs; gloo always runs on the CPU "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="auto: GPU LOCAL_RANK when torch sees GPUs, else the CPU; ROCm uses 'cuda' "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=number(float, 1.0, 86400.0, "seconds between 1 and 86400"),
        default=60.0,
        metavar="S",
        help="seconds each step may take (joining the process group, one size, one pair) "
        "before the rank names the lost ranks and exits 1 (default: %(default)s)",
    )
    parser.add_argument(
        "--pairwise",
        action="store_true",
        help="also measure every pair of nodes (all ranks of both) and flag slow pairs",
    )
    parser.add_argument(
        "--pair-size",
        type=_size_type,
        default=1024**2,
        metavar="SIZE",
        help="message size of the pairwise all-reduce (default: 1M)",
    )
    parser.add_argument(
        "--max-pairs",
        type=POSITIVE_INT,
        default=100,
        metavar="N",
        help="measure at most N pairs: a seeded sample of whole rounds in which every node "
        "meets one partner, when there are more (default: %(default)s)",
    )
    parser.add_argument(
        "--slow-fraction",
        type=number(float, 1e-6, 1.0, "a fraction in (0, 1]"),
        default=0.5,
        metavar="F",
        help="a pair is slow below F x the median of each node's best pair (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=SEED,
        default=0,
        metavar="N",
        help="seed of the pair sample (default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        dest="json_path",
        help="write the report as JSON to FILE (by local rank 0 on every node); its directory "
        "must exist and be writable (checked before the run)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``rocmlab allreduce``."""
    if args.backend == "gloo" and args.device == "cuda":
        raise UsageError(
            "--backend gloo runs on the CPU: drop --device cuda, or use --backend nccl for GPUs"
        )
    if args.backend == "nccl" and args.device == "cpu":
        raise UsageError("--backend nccl needs GPUs: use --backend gloo with --device cpu")
    if args.json_path is not None:
        writable_output("--json", args.json_path)
    from rocmlab.torchjob.torch_import import import_torch

    import_torch()
    from rocmlab.allreduce.job import AllreduceOptions, run_allreduce

    options = AllreduceOptions(
        sizes=args.sizes,
        iters=args.iters,
        warmup=args.warmup,
        backend=args.backend,
        device=args.device,
        timeout=args.timeout,
        pairwise=args.pairwise,
        pair_size=args.pair_size,
        max_pairs=args.max_pairs,
        slow_fraction=args.slow_fraction,
        seed=args.seed,
        json_path=args.json_path,
    )
    return run_allreduce(options)
