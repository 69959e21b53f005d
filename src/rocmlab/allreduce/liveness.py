"""Who is still there when a step fails: heartbeats in the job's store, and a per-step watchdog.

Under torchrun every worker can reach the job's TCP store (MASTER_ADDR:MASTER_PORT; with the c10d
rendezvous the torchrun agent of node rank 0 serves it). Each rank's heartbeat thread increments
``hb/<rank>`` there every ``interval`` seconds; it sets ``host/<rank>`` once at the start. A rank
that leaves on its own (a failure it saw, a signal, bad arguments) first sets ``exit/<rank>`` to
why, and, when it fails, ``abort`` to a line naming itself and the reason: the heartbeat threads of
the others see it within one interval and end their ranks too, instead of leaving them blocked
until their own timeout in a collective that can no longer complete. When a step fails, the rank
reads every counter twice, ``window`` seconds apart: a rank whose counter did not move and that
left no ``exit`` record is *lost*: killed, frozen, its host down or cut off. Its heartbeat thread
runs whatever its main thread is blocked in, so a rank that is merely waiting in the same
collective is never called lost. When the store itself stops answering, the node that serves it
(node rank 0) is the one that went away.

No PyTorch here: the store is anything with ``add``, ``set``, ``get`` and ``check`` (a
``torch.distributed.Store``); rocmlab.torchjob.distributed creates it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class Store(Protocol):
    """The part of ``torch.distributed.Store`` used here."""

    def add(self, key: str, value: int) -> int: ...
    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...


def heartbeat_interval(timeout: float) -> float:
    """Seconds between heartbeats: a tenth of the step timeout, within [0.2, 2]."""
    return min(2.0, max(0.2, timeout / 10))


@dataclass(frozen=True)
class Peer:
    """Another rank as the store describes it."""

    rank: int
    host: str | None
    detail: str  # "no heartbeat for N s" / "never started" / its exit record

    def name(self) -> str:
        """``rank 3 (host node-b)``."""
        return f"rank {self.rank} (host {self.host or 'unknown'})"

    def as_dict(self) -> dict[str, Any]:
        """For the report's ``lost_ranks``."""
        return {"rank": self.rank, "host": self.host, "detail": self.detail}


@dataclass
class Diagnosis:
    """What the store said about the other ranks when a step failed."""

    lost: list[Peer] = field(default_factory=list)
    left: list[Peer] = field(default_factory=list)
    store_error: str | None = None

    def describe(self, store_address: str, store_host: str | None) -> str:
        """One sentence naming the lost ranks and their hosts (or the lost store)."""
        if self.store_error is not None:
            host = f", host {store_host}" if store_host else ""
            return (
                f"the job's store at {store_address} (node rank 0{host}) stopped answering "
                f"({self.store_error}): that node is gone or cut off"
            )
        parts = []
        if self.lost:
            names = "; ".join(f"{p.name()}: {p.detail}" for p in self.lost)
            parts.append(f"lost {names}")
        if self.left:
            shown = self.left[:3]
            names = "; ".join(f"{p.name()}: {p.detail}" for p in shown)
            more = f" and {len(self.left) - 3} more" if len(self.left) > 3 else ""
            parts.append(f"left on their own: {names}{more}")
        if not parts:
            return "every other rank is alive (a slow or stuck link, or a hung device?)"
        return "; ".join(parts)


class Liveness:
    """Heartbeats of this rank, and the diagnosis of the others, through the job's store.

    ``store`` serves the heartbeat thread; ``query_store`` (a second connection) the diagnosis, so
    neither waits for the other.
    """

    def __init__(
        self,
        store: Store,
        query_store: Store,
        rank: int,
        world_size: int,
        interval: float,
        on_abort: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.query = query_store
        self.rank = rank
        self.world_size = world_size
        self.interval = interval
        self.on_abort = on_abort
        self._left = threading.Event()  # this rank recorded its exit: no abort to follow
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="rocmlab-heartbeat", daemon=True)

    def start(self, host: str) -> None:
        """Publish this rank's host and start beating."""
        self.store.set(f"host/{self.rank}", host)
        self.store.add(f"hb/{self.rank}", 1)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.store.add(f"hb/{self.rank}", 1)
                if self.on_abort is None or self._left.is_set() or not self.store.check(["abort"]):
                    continue
                text = self.store.get("abort").decode(errors="replace")
            except Exception:  # the store is gone: the diagnosis will say so
                return
            self._left.set()
            # In its own thread: this one keeps beating while the rank reports and lingers.
            threading.Thread(target=self.on_abort, args=(text,), daemon=True).start()

    def stop(self, wait: float = 0.0) -> bool:
        """Stop beating (at the end of a run that passed or failed on its own) and wait up to
        ``wait`` seconds for the heartbeat thread to end; whether it has ended.

        The thread ends at once when it waits between beats, and within one store operation
        (bounded by its store's timeout) when it is in one: a thread left running into the
        interpreter's exit would be stopped inside torch's C++ code, which aborts the process.
        """
        self._stop.set()
        if wait > 0 and self._thread.is_alive():
            self._thread.join(wait)
        return not self._thread.is_alive()

    def record_exit(self, reason: str, abort: str | None = None) -> None:
        """Say why this rank leaves, so the others do not call it lost (best effort).

        ``abort``: this rank failed; the line the others repeat when they stop because of it.
        """
        self._left.set()
        with contextlib.suppress(Exception):
            self.query.set(f"exit/{self.rank}", reason[:300])
            if abort is not None:
                self.query.set("abort", abort[:400])

    def record_reported(self) -> None:
        """Say this rank has finished its own diagnosis (best effort)."""
        with contextlib.suppress(Exception):
            self.query.set(f"reported/{self.rank}", "1")

    def _counters(self) -> list[int]:
        return [self.query.add(f"hb/{rank}", 0) for rank in range(self.world_size)]

    def _text(self, key: str) -> str | None:
        if not self.query.check([key]):
            return None
        return self.query.get(key).decode(errors="replace")

    def diagnose(self, window: float) -> Diagnosis:
        """Read every counter twice, ``window`` seconds apart; name the silent ranks."""
        try:
            first = self._counters()
            time.sleep(window)
            second = self._counters()
            diagnosis = Diagnosis()
            for rank in range(self.world_size):
                if rank == self.rank:
                    continue
                exit_record = self._text(f"exit/{rank}")
                if exit_record is not None:
                    diagnosis.left.append(Peer(rank, self._text(f"host/{rank}"), exit_record))
                elif second[rank] == 0:
                    diagnosis.lost.append(Peer(rank, None, "never started (no heartbeat)"))
                elif second[rank] == first[rank]:
                    detail = f"no heartbeat for {window:.1f} s"
                    diagnosis.lost.append(Peer(rank, self._text(f"host/{rank}"), detail))
            return diagnosis
        except Exception as exc:
            return Diagnosis(store_error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")

    def wait_for_reports(self, ranks: Sequence[int], seconds: float) -> None:
        """Wait up to ``seconds`` until ``ranks`` have finished their diagnosis.

        The store lives in node rank 0's torchrun agent, which exits as soon as its workers do:
        leaving at once would take the store from the ranks still diagnosing.
        """
        self._wait_for([f"reported/{rank}" for rank in ranks if rank != self.rank], seconds)

    def wait_for_exits(self, seconds: float) -> None:
        """Wait up to ``seconds`` until every other rank has recorded its exit (the rank that
        serves the job's store itself, at the end of a run: leaving first would take the store
        from ranks still recording theirs)."""
        others = [rank for rank in range(self.world_size) if rank != self.rank]
        self._wait_for([f"exit/{rank}" for rank in others], seconds)

    def _wait_for(self, keys: list[str], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while keys and time.monotonic() < deadline:
            try:
                if self.query.check(keys):
                    return
            except Exception:
                return
            time.sleep(0.1)


class Watchdog:
    """Calls ``on_expire(step)`` from its own thread when a step outlives its deadline.

    The main thread names each step (``step``) before entering it; the deadline is ``timeout``
    seconds from then. The thread runs while the main thread is blocked in a collective (torch
    releases the GIL there), so a hang anywhere, in any backend, ends in ``on_expire``.
    """

    def __init__(self, timeout: float, on_expire: Callable[[str], None]) -> None:
        self.timeout = timeout
        self.on_expire = on_expire
        self._lock = threading.Lock()
        self._name = "starting"
        self._deadline: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rocmlab-watchdog", daemon=True)

    def start(self) -> None:
        """Start watching (no step is armed until ``step`` is called)."""
        self._thread.start()

    def step(self, name: str) -> None:
        """Enter step ``name``: it must end within the timeout."""
        with self._lock:
            self._name = name
            self._deadline = time.monotonic() + self.timeout

    @property
    def current(self) -> str:
        """The step the main thread is in."""
        return self._name

    def stop(self, wait: float = 0.0) -> bool:
        """Stop watching; wait up to ``wait`` seconds for the thread to end, and say whether it
        has (it ends within a tick, unless ``on_expire`` is running)."""
        self._stop.set()
        if wait > 0 and self._thread.is_alive():
            self._thread.join(wait)
        return not self._thread.is_alive()

    def _watch(self) -> None:
        tick = min(0.2, self.timeout / 10)
        while not self._stop.wait(tick):
            with self._lock:
                expired = self._deadline is not None and time.monotonic() > self._deadline
                name = self._name
            if expired:
                self.on_expire(name)
                return
