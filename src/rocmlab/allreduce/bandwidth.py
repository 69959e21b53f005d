"""All-reduce time and bandwidth, computed the way nccl-tests reports them. Needs no PyTorch.

nccl-tests' doc/PERFORMANCE.md (github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):

- *algorithm bandwidth* ``algbw = S / t``, S the message size in bytes, t the time of one operation;
- *bus bandwidth* of an all-reduce ``busbw = algbw * 2(n-1)/n`` for n ranks: every element needs
  n-1 additions and n assignments, 2(n-1) transfers spread over n links, so busbw is comparable with
  the hardware's link bandwidth whatever the rank count. (With one rank nothing moves: busbw 0.)

The units and the time follow nccl-tests' code: GB/s are 10⁹ bytes per second
(``AllReduceGetBw`` in src/all_reduce.cu divides bytes by 1.0E9 and by seconds); the time of a size
is the wall time of ``iters`` back-to-back operations divided by ``iters`` on each rank, then
averaged over the ranks (``BenchTime`` in src/common.cu, whose ``-a`` option defaults to the
average); the time of the smallest size is the latency.
"""

from __future__ import annotations

from collections.abc import Sequence

GB = 1e9


def allreduce_bus_factor(ranks: int) -> float:
    """2(n-1)/n: busbw / algbw of an all-reduce over ``ranks`` ranks."""
    if ranks < 1:
        raise ValueError(f"ranks {ranks}: expected at least 1")
    return 2 * (ranks - 1) / ranks


def algbw_gbps(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (10⁹ bytes per second)."""
    if seconds <= 0:
        raise ValueError(f"time {seconds!r} s: expected a positive time")
    return nbytes / GB / seconds


def busbw_gbps(nbytes: int, seconds: float, ranks: int) -> float:
    """Bus bandwidth of an all-reduce in GB/s."""
    return algbw_gbps(nbytes, seconds) * allreduce_bus_factor(ranks)


def mean_time(rank_seconds: Sequence[float]) -> float:
    """The time nccl-tests reports by default: per-rank times averaged over the ranks."""
    if not rank_seconds:
        raise ValueError("no rank timed this size")
    return sum(rank_seconds) / len(rank_seconds)


def size_figures(nbytes: int, rank_seconds: Sequence[float], ranks: int) -> dict[str, float]:
    """``time_us`` (mean over ranks), ``time_us_max`` (slowest rank), algbw and busbw in GB/s."""
    seconds = mean_time(rank_seconds)
    return {
        "time_us": seconds * 1e6,
        "time_us_max": max(rank_seconds) * 1e6,
        "algbw_gbps": algbw_gbps(nbytes, seconds),
        "busbw_gbps": busbw_gbps(nbytes, seconds, ranks),
    }
