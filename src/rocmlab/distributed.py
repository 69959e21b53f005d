"""Several processes under ``torchrun``: process group, all-reduce check, gathering results.

NCCL on GPUs (RCCL on ROCm, same name in torch), gloo on the CPU.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from rocmlab.distenv import DistContext, context_from_env

__all__ = [
    "DistContext",
    "allreduce_check",
    "broadcast_int",
    "context_from_env",
    "gather",
    "init_process_group",
    "shutdown",
]

INIT_TIMEOUT = timedelta(minutes=5)


def init_process_group(ctx: DistContext, device: torch.device) -> DistContext:
    """Join the job's process group (env:// rendezvous from torchrun)."""
    if not ctx.enabled:
        return ctx
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs: dict[str, Any] = {"backend": backend, "timeout": INIT_TIMEOUT}
    if device.type == "cuda":
        kwargs["device_id"] = device
    dist.init_process_group(**kwargs)
    return DistContext(ctx.rank, ctx.local_rank, ctx.world_size, backend)


def allreduce_check(ctx: DistContext, device: torch.device) -> tuple[bool, str]:
    """Sum ``rank + 1`` (times a ramp) over all ranks and compare with the closed form."""
    ramp = torch.arange(1, 1025, dtype=torch.float32, device=device)
    tensor = ramp * (ctx.rank + 1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    expected = ramp * (ctx.world_size * (ctx.world_size + 1) / 2)
    diff = float((tensor - expected).abs().max())
    ok = diff == 0.0
    detail = (
        f"{ctx.backend} all_reduce(SUM) over {ctx.world_size} ranks: max |diff| {diff:g} "
        f"from the expected sum on rank {ctx.rank}"
    )
    return ok, detail


def gather(ctx: DistContext, obj: Any, device: torch.device) -> list[Any]:
    """Every rank's JSON-serialisable ``obj``, in rank order (``[obj]`` without a process group).

    Sent as JSON bytes in uint8 tensors: ``all_gather_object`` would need numpy.
    """
    if not ctx.enabled:
        return [obj]
    data = json.dumps(obj).encode()
    length = torch.tensor([len(data)], dtype=torch.int64, device=device)
    lengths = [torch.zeros_like(length) for _ in range(ctx.world_size)]
    dist.all_gather(lengths, length)
    sizes = [int(n) for n in lengths]
    buffer = torch.zeros(max(sizes), dtype=torch.uint8, device=device)
    buffer[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    buffers = [torch.empty_like(buffer) for _ in range(ctx.world_size)]
    dist.all_gather(buffers, buffer)
    return [json.loads(bytes(b[:n].cpu().tolist())) for b, n in zip(buffers, sizes, strict=True)]


def broadcast_int(ctx: DistContext, value: int, device: torch.device) -> int:
    """Rank 0's ``value`` on every rank."""
    if not ctx.enabled:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=0)
    return int(tensor)


def shutdown(ctx: DistContext) -> None:
    """Leave the process group."""
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
