"""Several processes under ``torchrun``: process group, all-reduce check, gathering results.

NCCL on GPUs (RCCL on ROCm, same name in torch), gloo on the CPU. Works on one machine
(``torchrun --standalone``) and across machines (``torchrun --nnodes N --rdzv-backend c10d
--rdzv-endpoint HOST:PORT``): torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK (the node's
rank) and MASTER_ADDR/MASTER_PORT (the job's store, served by node rank 0's agent), which the
``env://`` initialisation reads; each process takes the GPU of its LOCAL_RANK on its own node.

Without torchrun's agent (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by hand or by another
launcher), :func:`serve_or_join_store` has rank 0 serve the store itself, on a port it has taken
first (``rendezvous``), so that a port held by another process is named, not a traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from rocmlab.common.errors import ExitCode, RocmlabError, UsageError
from rocmlab.torchjob.distenv import (
    HOST_NAME_ENV,
    DistContext,
    context_from_env,
    host_name,
    node_rank,
)
from rocmlab.torchjob.rendezvous import PortInUse, listen_socket, port_holder, port_in_use_message

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
# The most JSON one rank may send in gather/broadcast_json (rank descriptions, per-size results,
# per-pair results): far above what a rank writes, far below what would exhaust the others.
MAX_JSON_BYTES = 16 * 1024 * 1024


class StoreError(RocmlabError):
    """Rank 0 cannot serve the job's store (its port is taken): exit 1, the job failed."""

    exit_code = ExitCode.CHECK_FAILED


def init_process_group(
    ctx: DistContext,
    device: torch.device,
    timeout: timedelta = INIT_TIMEOUT,
    backend: str | None = None,
    single_process: bool = False,
    store: dist.Store | None = None,
) -> DistContext:
    """Join the job's process group (env:// rendezvous from torchrun).

    ``backend``: nccl or gloo (default: nccl on a GPU, gloo on the CPU). ``timeout`` bounds the
    initialisation and, as the process group's timeout, every collective: gloo raises in the
    waiting rank; NCCL's watchdog tears the process down (TORCH_NCCL_ASYNC_ERROR_HANDLING=3, the
    default). ``single_process``: also make a one-rank group (in-process store) when not under
    torchrun, for commands whose collectives must run either way. ``store``: the job's store
    when rocmlab serves it (serve_or_join_store), instead of the env:// rendezvous.
    """
    if not ctx.enabled and not single_process:
        return ctx
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    kwargs: dict[str, Any] = {"backend": backend, "timeout": timeout}
    if device.type == "cuda" and backend == "nccl":
        kwargs["device_id"] = device
    if not ctx.enabled:
        kwargs.update(store=dist.HashStore(), rank=0, world_size=1)
    elif store is not None:
        pg_store = dist.PrefixStore("rocmlab/pg", store)
        kwargs.update(store=pg_store, rank=ctx.rank, world_size=ctx.world_size)
    dist.init_process_group(**kwargs)
    return DistContext(ctx.rank, ctx.local_rank, ctx.world_size, backend)


def store_address(environ: Mapping[str, str] | None = None) -> str:
    """``MASTER_ADDR:MASTER_PORT``: where the job's store is served."""
    env = os.environ if environ is None else environ
    return f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"


def agent_serves_store(environ: Mapping[str, str] | None = None) -> bool:
    """Whether torchrun's agent serves the job's store (TORCHELASTIC_USE_AGENT_STORE=True)."""
    env = os.environ if environ is None else environ
    return env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def store_endpoint(environ: Mapping[str, str] | None = None) -> tuple[str, int]:
    """MASTER_ADDR and MASTER_PORT, checked (UsageError, exit 2, naming them)."""
    env = os.environ if environ is None else environ
    address, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
    if not address or not port:
        raise UsageError(
            "WORLD_SIZE > 1 without torchrun needs MASTER_ADDR and MASTER_PORT (the address of "
            "rank 0's machine and a free TCP port on it): set both, or start the job with torchrun"
        )
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(f"MASTER_PORT {port!r}: expected a TCP port from 1 to 65535")
    return address, int(port)


def serve_or_join_store(ctx: DistContext, timeout: timedelta) -> dist.Store | None:
    """The job's store for the process group when torchrun's agent does not serve it (None
    when it does): rank 0 serves it on MASTER_PORT, the other ranks connect to it.

    Rank 0 takes the port itself first: a port held by another process is a StoreError naming
    the address, the holder (when /proc shows it) and what to do. The others' connection is
    bounded by the caller's watchdog: torch's client can wait without end on a port that
    accepts connections but does not answer as a store.
    """
    if not ctx.enabled or agent_serves_store():
        return None
    address, port = store_endpoint()
    if ctx.rank != 0:
        return dist.TCPStore(address, port, is_master=False, timeout=timeout)
    try:
        sock = listen_socket(port)
    except PortInUse as exc:
        raise StoreError(port_in_use_message(address, port, port_holder(port))) from exc
    except OSError as exc:
        raise StoreError(
            f"cannot serve the job's store at {address}:{port}: {exc.strerror or exc}"
        ) from exc
    fd = sock.detach()  # the store's server owns the listening socket from here on
    try:
        return dist.TCPStore(
            address, port, ctx.world_size, True, timeout,
            wait_for_workers=False, master_listen_fd=fd,
        )  # fmt: skip
    except BaseException:
        os.close(fd)
        raise


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


def _check_lengths(lengths: list[int]) -> None:
    """Refuse, before allocating for it, JSON a rank says is larger than MAX_JSON_BYTES."""
    for rank, length in enumerate(lengths):
        if not 0 <= length <= MAX_JSON_BYTES:
            raise ValueError(
                f"rank {rank} announced {length} bytes of JSON; a rank may send 0 to "
                f"{MAX_JSON_BYTES}"
            )


def gather(ctx: DistContext, obj: Any, device: torch.device) -> list[Any]:
    """Every rank's JSON-serialisable ``obj``, in rank order (``[obj]`` without a process group).

    Sent as JSON bytes in uint8 tensors: ``all_gather_object`` would need numpy.
    """
    if not ctx.enabled:
        return [obj]
    data = _json_tensor(obj, device)
    length = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    lengths = [torch.zeros_like(length) for _unused in range(ctx.world_size)]
    dist.all_gather(lengths, length)
    sizes = [int(n) for n in lengths]
    _check_lengths(sizes)
    buffer = torch.zeros(max(sizes), dtype=torch.uint8, device=device)
    buffer[: data.numel()] = data
    buffers = [torch.empty_like(buffer) for _unused in range(ctx.world_size)]
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
    _check_lengths([length])
    buffer = torch.zeros(length, dtype=torch.uint8, device=device)
    if ctx.is_main:
        buffer.copy_(data)
    dist.broadcast(buffer, src=0)
    return _json_from(buffer, length)


def shutdown(ctx: DistContext) -> None:
    """Leave the process group (also a one-rank group made with ``single_process``)."""
    if dist.is_initialized():
        dist.destroy_process_group()
