"""Several processes under ``torchrun``: process group, all-reduce check, gathering results.

NCCL on GPUs (RCCL on ROCm, same name in torch), gloo on the CPU. Works on one machine
(``torchrun --standalone``) and across machines (``torchrun --nnodes N --rdzv-backend c10d
--rdzv-endpoint HOST:PORT``): torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK (the node's
rank) and MASTER_ADDR/MASTER_PORT (the job's store, served by node rank 0's agent), which the
``env://`` initialisation reads; each process takes the GPU of its LOCAL_RANK on its own node.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from rocmlab.distenv import HOST_NAME_ENV, DistContext, context_from_env, host_name, node_rank

__all__ = [
    "HOST_NAME_ENV",
    "DistContext",
    "allreduce_check",
    "broadcast_int",
    "context_from_env",
    "gather",
    "host_name",
    "init_process_group",
    "node_rank",
    "shutdown",
]

INIT_TIMEOUT = timedelta(minutes=5)


def init_process_group(
    ctx: DistContext,
    device: torch.device,
    timeout: timedelta = INIT_TIMEOUT,
    backend: str | None = None,
    single_process: bool = False,
) -> DistContext:
    """Join the job's process group (env:// rendezvous from torchrun).

    ``backend``: nccl or gloo (default: nccl on a GPU, gloo on the CPU). ``timeout`` bounds the
    initialisation and, as the process group's timeout, every collective: gloo raises in the
    waiting rank; NCCL's watchdog tears the process down (TORCH_NCCL_ASYNC_ERROR_HANDLING=3, the
    default). ``single_process``: also make a one-rank group (in-process store) when not under
    torchrun, for commands whose collectives must run either way.
    """
    if not ctx.enabled and not single_process:
        return ctx
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    kwargs: dict[str, Any] = {"backend": backend, "timeout": timeout}
    if device.type == "cuda" and backend == "nccl":
        kwargs["device_id"] = device
    if not ctx.enabled:
        kwargs.update(store=dist.HashStore(), rank=0, world_size=1)
    dist.init_process_group(**kwargs)
    return DistContext(ctx.rank, ctx.local_rank, ctx.world_size, backend)


def store_address(environ: Mapping[str, str] | None = None) -> str:
    """``MASTER_ADDR:MASTER_PORT``: where the job's store is served."""
    env = os.environ if environ is None else environ
    return f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"


def job_store(timeout: timedelta) -> dist.Store:
    """A new client connection to the job's store, its keys under rocmlab/<run>/.

    With torchrun's c10d rendezvous the store is served by node rank 0's agent and shared with the
    rendezvous (TORCHELASTIC_USE_AGENT_STORE); a prefix per run and restart keeps keys apart.
    """
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout
    )
    run = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"rocmlab/{run}/{restart}", store)


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


def _json_tensor(obj: Any, device: torch.device) -> torch.Tensor:
    return torch.frombuffer(bytearray(json.dumps(obj).encode()), dtype=torch.uint8).to(device)


def _json_from(buffer: torch.Tensor, length: int) -> Any:
    return json.loads(bytes(buffer[:length].cpu().tolist()))


def gather(ctx: DistContext, obj: Any, device: torch.device) -> list[Any]:
    """Every rank's JSON-serialisable ``obj``, in rank order (``[obj]`` without a process group).

    Sent as JSON bytes in uint8 tensors: ``all_gather_object`` would need numpy.
    """
    if not ctx.enabled:
        return [obj]
    data = _json_tensor(obj, device)
    length = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    lengths = [torch.zeros_like(length) for _ in range(ctx.world_size)]
    dist.all_gather(lengths, length)
    sizes = [int(n) for n in lengths]
    buffer = torch.zeros(max(sizes), dtype=torch.uint8, device=device)
    buffer[: data.numel()] = data
    buffers = [torch.empty_like(buffer) for _ in range(ctx.world_size)]
    dist.all_gather(buffers, buffer)
    return [_json_from(b, n) for b, n in zip(buffers, sizes, strict=True)]


def broadcast_int(ctx: DistContext, value: int, device: torch.device) -> int:
    """Rank 0's ``value`` on every rank."""
    if not ctx.enabled:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=0)
    return int(tensor)


def broadcast_json(ctx: DistContext, obj: Any, device: torch.device) -> Any:
    """Rank 0's JSON-serialisable ``obj`` on every rank (what the others pass is ignored)."""
    if not ctx.enabled:
        return obj
    data = _json_tensor(obj if ctx.is_main else None, device)
    length = broadcast_int(ctx, data.numel(), device)
    buffer = torch.zeros(length, dtype=torch.uint8, device=device)
    if ctx.is_main:
        buffer.copy_(data)
    dist.broadcast(buffer, src=0)
    return _json_from(buffer, length)


def shutdown(ctx: DistContext) -> None:
    """Leave the process group (also a one-rank group made with ``single_process``)."""
    if dist.is_initialized():
        dist.destroy_process_group()
