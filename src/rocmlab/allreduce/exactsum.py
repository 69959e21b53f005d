"""The exact all-reduce check: contributions whose sum is known, compared element by element.

Member ``j`` of a group of ``m`` contributes, at element ``i``, ``1 + ((i + 7j) mod P)`` as
float32, with the period P = min(251, 2**24 // m). Every partial sum, in whatever order the backend
adds (ring, tree, chunks), is a whole number at most m·P ≤ 2**24, which float32 holds exactly
(24-bit significand), so the result must equal the expected sum bit for bit: any difference is an
error, never rounding. The pattern differs between members (a contribution dropped or counted
twice changes the sum) and along the message with a prime period that is no power of two (a chunk
written at the wrong offset changes it too).

The expected sums are computed on the CPU in int64 from the formula, and the result is copied to
the CPU to be compared: on a GPU backend this is the comparison with a CPU reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

PERIOD = 251  # prime
FLOAT32_EXACT = 2**24  # every integer up to this is a float32
COMPARE_CHUNK_PERIODS = 2**14  # compare ~4M elements at a time (bounded host memory)


def period_for(members: int) -> int:
    """The pattern's period for a group of ``members``: sums stay at most 2**24."""
    if not 1 <= members <= FLOAT32_EXACT:
        raise ValueError(f"{members} members: expected 1 to {FLOAT32_EXACT}")
    return min(PERIOD, FLOAT32_EXACT // members)


def contribution_row(member: int, period: int) -> torch.Tensor:
    """One period of member ``member``'s contribution (int64, on the CPU)."""
    return 1 + (torch.arange(period, dtype=torch.int64) + 7 * member) % period


def expected_row(members: int, period: int) -> torch.Tensor:
    """One period of the exact sum over ``members`` members (int64, on the CPU)."""
    member = torch.arange(members, dtype=torch.int64).unsqueeze(1)
    index = torch.arange(period, dtype=torch.int64).unsqueeze(0)
    return (1 + (index + 7 * member) % period).sum(dim=0)


def fill_periodic(buffer: torch.Tensor, row: torch.Tensor) -> None:
    """Write ``row`` over and over into the 1-D ``buffer`` (any device)."""
    period = row.numel()
    row = row.to(device=buffer.device, dtype=buffer.dtype)
    whole = buffer.numel() // period * period
    if whole:
        buffer[:whole].view(-1, period).copy_(row.expand(whole // period, period))
    buffer[whole:].copy_(row[: buffer.numel() - whole])


@dataclass(frozen=True)
class SumCheck:
    """How a result compared with the exact sum."""

    elements: int
    wrong: int
    max_abs_error: float  # 0.0 when exact; NaN when a wrong element is NaN
    first_wrong: int | None  # element index

    @property
    def exact(self) -> bool:
        """Every element equals the exact sum."""
        return self.wrong == 0


def compare_exact(result: torch.Tensor, expected: torch.Tensor) -> SumCheck:
    """Compare the 1-D float32 ``result`` (any device) with the periodic int64 ``expected`` row."""
    period = expected.numel()
    chunk = period * COMPARE_CHUNK_PERIODS
    count = result.numel()
    tile = expected.to(torch.float32).repeat(math.ceil(min(count, chunk) / period))
    wrong, worst, first = 0, 0.0, None
    for start in range(0, count, chunk):  # chunks start at multiples of the period
        part = result[start : start + chunk].detach().to("cpu", torch.float32)
        want = tile[: part.numel()]
        bad = part != want  # NaN compares unequal: counted wrong
        n_bad = int(bad.sum())
        if n_bad:
            if first is None:
                first = start + int(bad.nonzero()[0])
            error = float((part[bad].double() - want[bad].double()).abs().max())
            worst = error if math.isnan(error) or error > worst else worst  # NaN sticks
            wrong += n_bad
    return SumCheck(count, wrong, worst, first)


def exact_allreduce(
    count: int,
    member: int,
    members: int,
    device: torch.device,
    group: dist.ProcessGroup | None = None,
    corrupt: Callable[[torch.Tensor], None] | None = None,
) -> SumCheck:
    """All-reduce (SUM) ``count`` float32 elements of the known pattern over ``group``; check it.

    ``member`` is this process's rank in ``group``, ``members`` the group's size. ``corrupt``, when
    given, alters the reduced tensor in place before the comparison (the tests use it to show that
    a perturbed result fails).
    """
    period = period_for(members)
    buffer = torch.empty(count, dtype=torch.float32, device=device)
    fill_periodic(buffer, contribution_row(member, period))
    dist.all_reduce(buffer, op=dist.ReduceOp.SUM, group=group)
    if corrupt is not None:
        corrupt(buffer)
    return compare_exact(buffer, expected_row(members, period))
