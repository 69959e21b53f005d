"""This process's place in a ``torchrun`` job, read from the environment. No torch needed.

The smoke job reads it before importing torch, so that a run interrupted while torch loads still
knows whether it is the rank that writes the report.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from rocmlab.common.errors import UsageError


@dataclass(frozen=True)
class DistContext:
    """This process's place in the job; world_size 1 means a plain single-process run."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        """Rank 0 prints and writes the report."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """Whether a process group is in use."""
        return self.world_size > 1


def context_from_env(environ: Mapping[str, str] | None = None) -> DistContext:
    """Read RANK, LOCAL_RANK and WORLD_SIZE as set by torchrun."""
    env = os.environ if environ is None else environ
    try:
        world = int(env.get("WORLD_SIZE", "1"))
        rank = int(env.get("RANK", "0"))
        local_rank = int(env.get("LOCAL_RANK", "0"))
    except ValueError as exc:
        raise UsageError(f"WORLD_SIZE/RANK/LOCAL_RANK must be integers ({exc})") from exc
    if world < 1 or not 0 <= rank < world:
        raise UsageError(f"RANK {rank} and WORLD_SIZE {world}: expected 0 <= RANK < WORLD_SIZE")
    return DistContext(rank=rank, local_rank=local_rank, world_size=world)


HOST_NAME_ENV = "ROCMLAB_HOST_NAME"


def host_name(environ: Mapping[str, str] | None = None) -> str:
    """This machine's host name, or ROCMLAB_HOST_NAME when set.

    The override names a node where the host name says nothing (containers that all call
    themselves after an image) and lets tests run several "nodes" on one machine.
    """
    env = os.environ if environ is None else environ
    return env.get(HOST_NAME_ENV) or socket.gethostname()


def node_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """The node's rank among the job's nodes (torchrun's GROUP_RANK), None outside torchrun."""
    value = (os.environ if environ is None else environ).get("GROUP_RANK")
    return int(value) if value is not None and value.isdigit() else None
