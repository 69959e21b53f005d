"""Tier 1's probe of one GPU, run as ``python -m rocmlab.health.gpu_probe`` in a process of its
own (the health check picks the GPU with ROCR_VISIBLE_DEVICES before this process starts HIP).
Prints one JSON line and exits 0; exits 3 when PyTorch cannot be imported.

Two computations, both from rocmlab's existing probes:

- the smoke job's matmul speed probe (rocmlab.smoke.matmul_probe): float32 TFLOP/s, a few
  rows of the product recomputed in float64 on the CPU and compared within its tolerance;
- an exact sum computed by a matrix multiply: ``ones(R, M) @ C``, where row j of C is member
  j's contribution of the all-reduce check (rocmlab.allreduce.exactsum): every output element
  is the sum of M small whole numbers, at most 2**24, which float32 holds exactly, so each
  element must equal the exact sum bit for bit; any difference is a wrong result, never
  rounding.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

EXACT_MEMBERS = 256  # rows of C: the numbers summed into each element
EXACT_ROWS = 64  # rows of the product
EXACT_PERIODS = 64  # the product has EXACT_PERIODS x period columns


def exact_matmul(
    device: torch.device, corrupt: Callable[[torch.Tensor], None] | None = None
) -> dict[str, Any]:
    """The exact-sum matrix multiply on ``device``, compared with rocmlab.allreduce.exactsum.
    ``corrupt``, when given, alters the product before the comparison (the tests show a wrong
    one fails)."""
    import torch

    from rocmlab.allreduce.exactsum import (
        compare_exact,
        contribution_row,
        expected_row,
        fill_periodic,
        period_for,
    )

    period = period_for(EXACT_MEMBERS)
    columns = period * EXACT_PERIODS
    contributions = torch.empty(EXACT_MEMBERS, columns, dtype=torch.float32, device=device)
    for member in range(EXACT_MEMBERS):
        fill_periodic(contributions[member], contribution_row(member, period))
    ones = torch.ones(EXACT_ROWS, EXACT_MEMBERS, dtype=torch.float32, device=device)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        product = ones @ contributions
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    if corrupt is not None:
        corrupt(product)
    check = compare_exact(product.reshape(-1), expected_row(EXACT_MEMBERS, period))
    return {
        "elements": check.elements,
        "wrong": check.wrong,
        "max_abs_error": None if math.isnan(check.max_abs_error) else check.max_abs_error,
        "first_wrong": check.first_wrong,
        "shape": [EXACT_ROWS, EXACT_MEMBERS, columns],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rocmlab.health.gpu_probe")
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    parser.add_argument("--size", type=int, default=0, help="matmul size (0: by device)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        import torch
    except ImportError as exc:
        print(json.dumps({"error": f"PyTorch is not importable by {sys.executable}: {exc}"}))
        return 3
    from rocmlab.smoke.matmul_probe import matmul_probe

    answer: dict[str, Any] = {
        "torch": str(torch.__version__),
        "hip": getattr(torch.version, "hip", None),
    }
    if args.device == "cuda":
        if not torch.cuda.is_available():
            answer["error"] = "torch sees no GPU (torch.cuda.is_available() is False)"
            print(json.dumps(answer))
            return 0
        device = torch.device("cuda", 0)
        props = torch.cuda.get_device_properties(0)
        answer["device_name"] = str(props.name)
        answer["arch"] = str(getattr(props, "gcnArchName", "") or "")
        size = args.size or 2048
    else:
        device = torch.device("cpu")
        answer["device_name"] = "cpu"
        size = args.size or 256
    probe = matmul_probe(device, torch.float32, size, min_seconds=0.2)
    answer["matmul"] = {
        "n": probe.n,
        "tflops": probe.tflops,
        "rel_err": probe.rel_err if probe.rel_err != float("inf") else None,
        "passed": probe.passed,
    }
    answer["exact"] = exact_matmul(device)
    answer["seconds"] = time.monotonic() - started
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
