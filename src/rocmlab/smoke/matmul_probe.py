"""Speed probe: achieved TFLOP/s of a square matrix multiply, with its result spot-checked.

A fast but wrong GEMM is worse than a slow one, so a few rows of the product are recomputed in
float64 on the CPU and compared (relative to the largest reference value).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from rocmlab.torchjob.device import synchronize

# Relative error bound of the spot check per dtype (K = n products summed with fp32 accumulation).
MATMUL_RTOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
CHECK_ROWS = 8


@dataclass(frozen=True)
class MatmulResult:
    """One probe: size, dtype, throughput and the spot check."""

    dtype: str
    n: int
    tflops: float
    iterations: int
    rel_err: float
    passed: bool


def default_size(device: torch.device) -> int:
    """Large enough to keep a GPU busy, small enough for a 2-core CPU."""
    return 4096 if device.type == "cuda" else 1024


def matmul_probe(
    device: torch.device, dtype: torch.dtype, n: int, min_seconds: float = 0.25
) -> MatmulResult:
    """Time ``n x n @ n x n`` in ``dtype`` on ``device`` for at least ``min_seconds``."""
    generator = torch.Generator().manual_seed(1234)
    a_cpu = torch.randn(n, n, generator=generator)
    b_cpu = torch.randn(n, n, generator=generator)
    a, b = a_cpu.to(device, dtype), b_cpu.to(device, dtype)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        c = a @ b  # warm-up (kernel selection, allocator)
        synchronize(device)
        iterations, elapsed = 1, 0.0
        while True:
            start = time.perf_counter()
            for _unused in range(iterations):
                c = a @ b
            synchronize(device)
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds or iterations >= 1 << 16:
                break
            iterations = max(iterations * 2, int(iterations * min_seconds / max(elapsed, 1e-6)))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    # Reference from the values actually multiplied (after rounding to dtype).
    ref = a[:CHECK_ROWS].to("cpu", torch.float64) @ b.to("cpu", torch.float64)
    got = c[:CHECK_ROWS].to("cpu", torch.float64)
    rel_err = float((got - ref).abs().max() / ref.abs().max())
    if not torch.isfinite(got).all():
        rel_err = float("inf")
    name = str(dtype).removeprefix("torch.")
    return MatmulResult(
        dtype=name,
        n=n,
        tflops=2 * n**3 * iterations / elapsed / 1e12,
        iterations=iterations,
        rel_err=rel_err,
        passed=rel_err <= MATMUL_RTOL[name],
    )
