"""``rocmlab allreduce``: do the ranks of a job, on one machine or many, reduce correctly and fast?

Run under torchrun (one process per GPU, or a few per CPU machine). Order: device, the job's store
(heartbeats), process group, rank descriptions, then for each message size an exact all-reduce
check and a timed run, then (``--pairwise``) every pair of nodes, then the report.

Bounded failure: every step must finish within ``--timeout`` seconds. A step that does not (a rank
that never joins the process group, a host that dies or is cut off mid-run, a link that stalls)
ends in the watchdog; a backend error (gloo's "connection closed" when a peer dies) ends there at
once. Either way the rank records why it leaves, reads the heartbeats to name the lost ranks and
their hosts (``liveness``), writes its report when it leads its node, prints one line naming them
and exits 1; the process-group timeout, set later than the watchdog, is only a backstop.
The job's store: under torchrun its agent serves it; without torchrun rank 0 serves it
(distributed.serve_or_join_store), and a port held by another process ends rank 0 at once with a
message naming the port and its holder, and the other ranks within ``--timeout`` with a message
naming the address and what to do. What other ranks and hosts say (host names, device names,
another rank's abort line) is printed through textsafe.for_terminal.
Imported only when the command runs, after ``rocmlab.torchjob.torch_import.import_torch()``.
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from rocmlab.allreduce.bandwidth import size_figures
from rocmlab.allreduce.exactsum import SumCheck, exact_allreduce
from rocmlab.allreduce.liveness import Diagnosis, Liveness, Watchdog, heartbeat_interval
from rocmlab.allreduce.msgsize import ELEMENT_BYTES, format_bytes
from rocmlab.allreduce.pairs import flag_slow, nodes_from_hosts, plan_pairs
from rocmlab.allreduce.report import new_report, summary_lines, write_json
from rocmlab.common.errors import ExitCode, RocmlabError, UsageError
from rocmlab.common.textsafe import for_terminal
from rocmlab.torchjob import distributed
from rocmlab.torchjob.device import DeviceInfo, probe_device, synchronize
from rocmlab.torchjob.progress import Progress
from rocmlab.torchjob.rendezvous import store_unreachable_hint

BACKENDS = ("auto", "nccl", "gloo")
TIME_BUDGET_FRACTION = 0.125  # warm-up, then the timed iterations, each planned to fit in this
PROBES = 3  # operations timed one by one to plan how many fit
BACKSTOP_S = 30.0  # the process group's own timeout comes this much after the watchdog's
SIGNALS = (signal.SIGTERM, signal.SIGINT)
SIGNAL_POLL_S = 0.2  # how often the signal thread looks whether the run is leaving
THREAD_WAIT_S = 5.0  # the most the watchdog and signal threads take to end at the run's end
_SOURCE_PREFIX = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*")


@dataclass(frozen=True)
class AllreduceOptions:
    """Validated command-line options of ``rocmlab allreduce``."""

    sizes: tuple[int, ...]
    iters: int
    warmup: int
    backend: str
    device: str
    timeout: float
    pairwise: bool
    pair_size: int
    max_pairs: int
    slow_fraction: float
    seed: int
    json_path: Path | None


def short_error(exc: BaseException) -> str:
    """``Type: first sentence`` of a backend error, without gloo's source-file prefix."""
    lines = str(exc).strip().splitlines()
    text = _SOURCE_PREFIX.sub("", lines[0]) if lines else ""
    text = text.split(". ")[0].rstrip(".")
    return f"{type(exc).__name__}: {text[:200]}"


def device_request(backend: str, device: str) -> str:
    """The ``--device`` to probe: ``--backend gloo`` runs on the CPU unless told otherwise."""
    return "cpu" if backend == "gloo" and device == "auto" else device


def choose_backend(requested: str, device: torch.device) -> str:
    """nccl (RCCL on ROCm) on GPUs, gloo on CPUs.

    nccl cannot reduce CPU tensors; gloo's all_gather takes no GPU tensors, so gloo runs on the
    CPU here (``--backend gloo`` on a GPU machine checks the network, not the GPUs).
    """
    if requested not in BACKENDS:
        raise UsageError(f"--backend {requested!r}: expected one of {', '.join(BACKENDS)}")
    if requested == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if requested == "nccl" and device.type != "cuda":
        raise UsageError(
            "--backend nccl needs GPUs but the run is on the CPU: use --backend gloo "
            "(or auto), or run where torch sees a GPU"
        )
    return requested


def world_sync(device: torch.device, group: dist.ProcessGroup | None = None) -> None:
    """A one-element all-reduce, waited for: every member has reached this point."""
    flag = torch.ones(1, dtype=torch.float32, device=device)
    dist.all_reduce(flag, group=group)
    synchronize(device)


def time_allreduce(
    count: int,
    device: torch.device,
    iters: int,
    warmup: int,
    budget: float,
    group: dist.ProcessGroup | None = None,
) -> tuple[float, int]:
    """Seconds per all-reduce of ``count`` float32 on this rank, and the iterations timed.

    One untimed operation (connection set-up), then PROBES timed one by one; from the slowest, the
    members agree (MIN) on how many operations fit in ``budget`` seconds, so that the ``warmup``
    operations and the ``iters`` timed ones each stay near it on a slow link (fewer then, at least
    one timed). Then, as
    nccl-tests does, the members synchronise and the wall time of the back-to-back operations is
    divided by their number. The buffer holds zeros: the sum stays exact however often it is
    reduced.
    """
    buffer = torch.zeros(count, dtype=torch.float32, device=device)
    dist.all_reduce(buffer, group=group)
    synchronize(device)
    slowest = 1e-9
    for _unused in range(PROBES):
        start = time.perf_counter()
        dist.all_reduce(buffer, group=group)
        synchronize(device)
        slowest = max(slowest, time.perf_counter() - start)
    fits = torch.tensor([min(budget / slowest, 1e9)], dtype=torch.float64, device=device)
    dist.all_reduce(fits, op=dist.ReduceOp.MIN, group=group)
    fits_n = int(fits.item())
    for _unused in range(min(warmup, fits_n)):
        dist.all_reduce(buffer, group=group)
    timed = max(1, min(iters, fits_n))
    world_sync(device, group)
    start = time.perf_counter()
    for _unused in range(timed):
        dist.all_reduce(buffer, group=group)
    synchronize(device)
    return (time.perf_counter() - start) / timed, timed


def size_entry(nbytes: int, ranks: int, per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """One size (or pair) of the report from every member's ``seconds``, ``iters`` and check."""
    entry: dict[str, Any] = {
        "bytes": nbytes,
        "elements": nbytes // ELEMENT_BYTES,
        "iters": min(r["iters"] for r in per_rank),
        **size_figures(nbytes, [r["seconds"] for r in per_rank], ranks),
    }
    wrong = [r for r in per_rank if r["wrong"]]
    errors = [r["max_abs_error"] for r in wrong]
    entry.update(
        correct=not wrong,
        wrong_elements=sum(r["wrong"] for r in wrong),
        wrong_ranks=[r["rank"] for r in wrong],
        max_abs_error=(math.nan if any(map(math.isnan, errors)) else max(errors, default=0.0)),
    )
    return entry


def local_result(rank: int, check: SumCheck, seconds: float, iters: int) -> dict[str, Any]:
    """What one rank measured for one size or pair (gathered by every rank)."""
    return {
        "rank": rank,
        "seconds": seconds,
        "iters": iters,
        "wrong": check.wrong,
        "max_abs_error": check.max_abs_error,
        "first_wrong": check.first_wrong,
    }


class AllreduceJob:
    """One rank's run of the check, with its bounded failure path."""

    def __init__(self, options: AllreduceOptions, ctx: distributed.DistContext) -> None:
        self.options = options
        self.ctx = ctx
        self.host = distributed.host_name()
        self.leader = ctx.local_rank == 0  # writes the report on its node
        self.report = new_report(
            self.host, ctx.rank, ctx.world_size, options.iters, options.warmup, options.timeout
        )
        self.progress = Progress(enabled=ctx.is_main)
        self.watchdog = Watchdog(options.timeout, self._timed_out)
        self.liveness: Liveness | None = None
        self.rank_hosts: list[str] = []
        self.budget = options.timeout * TIME_BUDGET_FRACTION
        self._failing = threading.Lock()  # held by whichever thread ends the run
        self._leaving = threading.Event()  # the main thread ends it after its last step
        self._signals: threading.Thread | None = None
        self.store_step = ""  # the step that connects to the job's store
        self.pg_store: dist.Store | None = None  # the store rocmlab serves or joins itself

    # -- entry ----------------------------------------------------------------------------------
    def run(self) -> int:
        """Run the check; return the exit code (or leave the process through ``fail``)."""
        self._watch_signals()
        self.watchdog.start()
        try:
            code = self._run()
        except RocmlabError as exc:  # before the process group: bad usage, no GPU
            reason = f"{type(exc).__name__}: {exc}"
            self._leave(reason, f"{self._name()} stopped: {reason}")
            self.report.update(
                passed=False,
                error=str(exc),
                exit_code=int(exc.exit_code),
                failed_step=self.watchdog.current or None,
            )
            self._write_report()
            raise
        except Exception as exc:  # a collective failed: a peer died, a link broke, the GPU failed
            step = self.watchdog.current
            self.fail(f"{step} failed ({short_error(exc)}){self._hint(step)}")
        self._leave("done")
        return code

    def _step(self, name: str) -> None:
        self.watchdog.step(name)

    def _claim_exit(self) -> None:
        """Leave normally: unless another thread is already failing the run (then it ends it)."""
        if not self._failing.acquire(blocking=False):
            while True:
                time.sleep(1)
        self._leaving.set()
        self.watchdog.stop()

    def _leave(self, reason: str, abort: str | None = None) -> None:
        """End the run from the main thread, after the process group was left (``_run``): record
        why, then stop this rank's threads and wait for them, each within a bound, so that none
        is still in torch's C++ code (a store operation) when the interpreter exits, which
        aborts the process ("terminate called without an active exception").

        The heartbeat thread ends within one store operation, which the store's timeout
        (``--timeout``) bounds; a thread still running after its bound is named on stderr."""
        self._claim_exit()
        running = [] if self.watchdog.stop(wait=THREAD_WAIT_S) else ["the watchdog"]
        liveness = self.liveness
        if liveness is not None:
            liveness.record_exit(reason, abort)
            if self.pg_store is not None and self.ctx.rank == 0:
                # This rank serves the job's store (no torchrun): the others leave first.
                liveness.wait_for_exits(2 * liveness.interval + 1)
            if not liveness.stop(wait=self.options.timeout + 2 * liveness.interval):
                running.append(f"the heartbeat (job's store at {distributed.store_address()})")
        if self._signals is not None:
            self._signals.join(THREAD_WAIT_S)
            if self._signals.is_alive():
                running.append("the signal thread")
        if running:
            print(
                f"rocmlab allreduce: {for_terminal(self._name())}: {', '.join(running)} still "
                "running after the run ended; the process may abort as it exits",
                file=sys.stderr,
            )

    def _name(self) -> str:
        return f"rank {self.ctx.rank} ({self.host})"

    # -- the check ------------------------------------------------------------------------------
    def _run(self) -> int:
        options, ctx = self.options, self.ctx
        if ctx.enabled:
            self.store_step = f"connecting to the job's store at {distributed.store_address()}"
            self._step(self.store_step)
            store_timeout = timedelta(seconds=options.timeout)
            self.pg_store = distributed.serve_or_join_store(ctx, store_timeout)
            self.liveness = self._start_liveness()
        self._step("choosing the device")
        device, info = probe_device(device_request(options.backend, options.device), ctx.local_rank)
        backend = choose_backend(options.backend, device)
        self.report.update(
            backend=backend,
            device_type=device.type,
            torch_version=info.torch_version,
            hip_version=info.hip_version,
            cuda_version=info.cuda_version,
        )
        if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(1)  # gloo reduces on one thread; the rest only contend
        self._step("joining the process group")
        pg_timeout = timedelta(seconds=options.timeout + BACKSTOP_S)
        ctx = distributed.init_process_group(
            ctx, device, pg_timeout, backend, single_process=True, store=self.pg_store
        )
        self.ctx = ctx
        self._step("exchanging rank descriptions")
        ranks = distributed.gather(ctx, self._describe(info), device)
        self.rank_hosts = [r["host"] for r in ranks]
        nodes = nodes_from_hosts(self.rank_hosts)
        self.report.update(ranks=ranks, hosts=[n.host for n in nodes], nodes=len(nodes))
        self.progress.line(
            for_terminal(
                f"allreduce: {backend} on {device.type}, {ctx.world_size} rank(s) on "
                f"{len(nodes)} node(s): {', '.join(n.host for n in nodes)}; timeout "
                f"{options.timeout:g} s per step"
            )
        )
        checks = [self._hosts_check(ranks)]
        checks.append(self._sizes(device))
        if options.pairwise:
            checks.extend(self._pairwise(device, backend))
        self._step("finishing")
        passed = all(c["passed"] for c in checks)
        code = int(ExitCode.PASSED if passed else ExitCode.CHECK_FAILED)
        self.report.update(checks=checks, passed=passed, exit_code=code)
        for line in summary_lines(self.report):
            self.progress.line(for_terminal(line))
        if not self._write_report() and code == ExitCode.PASSED:
            # Not 0 (the caller would look for a report that is not there), not 1 (failed).
            code = int(ExitCode.NOT_WRITTEN)
        world_sync(device)
        distributed.shutdown(ctx)
        return code

    def _start_liveness(self) -> Liveness:
        interval = heartbeat_interval(self.options.timeout)
        # Queries during a failure must not hang on a frozen store host: a short timeout.
        query_timeout = timedelta(seconds=min(self.options.timeout, max(2.0, 5 * interval)))
        liveness = Liveness(
            distributed.job_store(timedelta(seconds=self.options.timeout)),
            distributed.job_store(query_timeout),
            self.ctx.rank,
            self.ctx.world_size,
            interval,
            on_abort=self._aborted,
        )
        liveness.start(self.host)
        return liveness

    def _describe(self, info: DeviceInfo) -> dict[str, Any]:
        return {
            "rank": self.ctx.rank,
            "local_rank": self.ctx.local_rank,
            "node_rank": distributed.node_rank(),
            "host": self.host,
            "device": info.device,
            "device_name": info.device_name,
        }

    @staticmethod
    def _hosts_check(ranks: list[dict[str, Any]]) -> dict[str, Any]:
        """Two torchrun nodes with one host name would be counted as one node."""
        node_ranks: dict[str, set[int]] = {}
        for r in ranks:
            if r["node_rank"] is not None:
                node_ranks.setdefault(r["host"], set()).add(r["node_rank"])
        shared = {host: sorted(n) for host, n in node_ranks.items() if len(n) > 1}
        if shared:
            detail = "; ".join(f"node ranks {n} all call themselves {h}" for h, n in shared.items())
            detail += ": give each machine its own host name (or set ROCMLAB_HOST_NAME)"
            return {"name": "hosts", "passed": False, "detail": detail}
        detail = f"{len({r['host'] for r in ranks})} distinct host name(s), one per node"
        return {"name": "hosts", "passed": True, "detail": detail}

    def _sizes(self, device: torch.device) -> dict[str, Any]:
        ctx, options = self.ctx, self.options
        local = []
        for nbytes in options.sizes:
            count = nbytes // ELEMENT_BYTES
            self._step(f"exact all-reduce of {format_bytes(nbytes)}")
            check = exact_allreduce(count, ctx.rank, ctx.world_size, device)
            self._step(f"timing the all-reduce of {format_bytes(nbytes)}")
            seconds, iters = time_allreduce(
                count, device, options.iters, options.warmup, self.budget
            )
            local.append(local_result(ctx.rank, check, seconds, iters))
        self._step("gathering the results")
        gathered = distributed.gather(ctx, local, device)
        sizes = [
            size_entry(nbytes, ctx.world_size, [per_rank[i] for per_rank in gathered])
            for i, nbytes in enumerate(options.sizes)
        ]
        self.report.update(
            sizes=sizes,
            latency_us=sizes[0]["time_us"],
            peak_busbw_gbps=max(s["busbw_gbps"] for s in sizes),
        )
        wrong = [s for s in sizes if not s["correct"]]
        if wrong:
            detail = "; ".join(
                f"{format_bytes(s['bytes'])}: {s['wrong_elements']} wrong element(s) on rank(s) "
                f"{', '.join(map(str, s['wrong_ranks']))}, max |error| {s['max_abs_error']:g}"
                for s in wrong
            )
        else:
            detail = (
                f"{len(sizes)} size(s) from {format_bytes(sizes[0]['bytes'])} to "
                f"{format_bytes(sizes[-1]['bytes'])}: every element equals the exact sum on all "
                f"{ctx.world_size} rank(s) (checked on the CPU)"
            )
        return {"name": "exact_sum", "passed": not wrong, "detail": detail}

    def _pairwise(self, device: torch.device, backend: str) -> list[dict[str, Any]]:
        ctx, options = self.ctx, self.options
        nodes = nodes_from_hosts(self.rank_hosts)
        possible = len(nodes) * (len(nodes) - 1) // 2
        self._step("planning the pairs")
        plan, sampled = plan_pairs(len(nodes), options.max_pairs, options.seed)
        # Every rank derives the same plan; rank 0's is broadcast so no rank can disagree.
        plan = [tuple(p) for p in distributed.broadcast_json(ctx, plan, device)]
        count = options.pair_size // ELEMENT_BYTES
        pg_timeout = timedelta(seconds=options.timeout + BACKSTOP_S)
        local = []
        for index, (a, b) in enumerate(plan):
            members = sorted(nodes[a].ranks + nodes[b].ranks)
            label = f"pair {nodes[a].host} <-> {nodes[b].host}"
            # torch.distributed.new_group: every rank of the job enters it, in the same order,
            # members or not.
            self._step(f"{label}: creating its group")
            group = dist.new_group(members, timeout=pg_timeout, backend=backend)
            if ctx.rank in members:
                member = members.index(ctx.rank)
                self._step(f"{label}: exact all-reduce of {format_bytes(options.pair_size)}")
                check = exact_allreduce(count, member, len(members), device, group)
                self._step(f"{label}: timing")
                seconds, iters = time_allreduce(
                    count, device, options.iters, options.warmup, self.budget, group
                )
                local.append({"pair": index, **local_result(ctx.rank, check, seconds, iters)})
                dist.destroy_process_group(group)
            self._step(f"{label}: waiting for the pair to finish")
            world_sync(device)  # one pair at a time: each has the network to itself
        self._step("gathering the pair results")
        gathered = [r for per_rank in distributed.gather(ctx, local, device) for r in per_rank]
        pairs = []
        for index, (a, b) in enumerate(plan):
            members = sorted(nodes[a].ranks + nodes[b].ranks)
            per_rank = sorted((r for r in gathered if r["pair"] == index), key=lambda r: r["rank"])
            entry = size_entry(options.pair_size, len(members), per_rank)
            pairs.append({**entry, "hosts": [nodes[a].host, nodes[b].host], "ranks": members})
        verdict = flag_slow(
            [(p["hosts"][0], p["hosts"][1]) for p in pairs],
            [p["busbw_gbps"] for p in pairs],
            options.slow_fraction,
        )
        for index, pair in enumerate(pairs):
            pair["slow"] = index in verdict.slow
        reference = verdict.reference_busbw
        slow_pairs = [
            {
                "hosts": pairs[i]["hosts"],
                "busbw_gbps": pairs[i]["busbw_gbps"],
                "fraction_of_reference": pairs[i]["busbw_gbps"] / reference if reference else 0.0,
            }
            for i in verdict.slow
        ]
        self.report.update(
            pairwise={
                "bytes": options.pair_size,
                "members": "all ranks of both nodes",
                "pairs_possible": possible,
                "pairs_measured": len(pairs),
                "sampled": sampled,
                "seed": options.seed,
                "slow_fraction": options.slow_fraction,
                "reference_busbw_gbps": reference,
                "median_busbw_gbps": verdict.median_busbw,
            },
            pairs=pairs,
            slow_pairs=slow_pairs,
            suspect_hosts=list(verdict.suspects),
        )
        return self._pair_checks(pairs, slow_pairs, verdict.suspects, reference, possible)

    def _pair_checks(
        self,
        pairs: list[dict[str, Any]],
        slow_pairs: list[dict[str, Any]],
        suspects: tuple[str, ...],
        reference: float | None,
        possible: int,
    ) -> list[dict[str, Any]]:
        if not pairs:
            detail = "fewer than two nodes: no pair to measure"
            return [{"name": "pairs", "passed": True, "detail": detail}]
        wrong = [p for p in pairs if not p["correct"]]
        exact_detail = (
            "; ".join(f"{' <-> '.join(p['hosts'])}: {p['wrong_elements']} wrong" for p in wrong)
            if wrong
            else f"{len(pairs)} of {possible} node pair(s): every element exact on every member"
        )
        if slow_pairs:
            slow_detail = "; ".join(
                f"{' <-> '.join(p['hosts'])} {p['busbw_gbps']:.3g} GB/s "
                f"({p['fraction_of_reference']:.0%} of the reference)"
                for p in slow_pairs
            )
            if suspects:
                slow_detail += f"; common host(s): {', '.join(suspects)}"
        else:
            slow_detail = (
                f"no pair below {self.options.slow_fraction:g} x the reference "
                f"{reference:.3g} GB/s (median of each node's best pair)"
            )
        return [
            {"name": "pairs_exact", "passed": not wrong, "detail": exact_detail},
            {"name": "slow_pairs", "passed": not slow_pairs, "detail": slow_detail},
        ]

    def _write_report(self) -> bool:
        """Write the report when this rank leads its node; False when that failed (said on
        stderr, naming the file and why)."""
        if self.options.json_path is None or not self.leader:
            return True
        try:
            write_json(self.report, self.options.json_path)
        except OSError as exc:
            why = exc.strerror or str(exc)
            print(
                f"rocmlab allreduce: {for_terminal(self._name())}: cannot write --json "
                f"{self.options.json_path} ({why})",
                file=sys.stderr,
            )
            return False
        return True

    def _hint(self, step: str) -> str:
        """What to do when the step that failed is the connection to the job's store."""
        if not step or step != self.store_step:
            return ""
        return f": {store_unreachable_hint(distributed.store_address())}"

    # -- the failure path -----------------------------------------------------------------------
    def _timed_out(self, step: str) -> None:
        timeout = self.options.timeout
        self.fail(f"{step} did not finish within --timeout {timeout:g} s{self._hint(step)}")

    def _watch_signals(self) -> None:
        """SIGTERM/SIGINT end the run through ``fail`` (torchrun sends SIGTERM to the other
        workers of a node when one fails). The signals are blocked in this thread, so none of the
        threads created from here on takes them, and a thread waits for them with sigwait: a
        Python handler would only run once the main thread leaves the collective it waits in."""
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)

        def wait() -> None:
            while not self._leaving.is_set():
                info = signal.sigtimedwait(SIGNALS, SIGNAL_POLL_S)
                if info is not None:
                    signum = info.si_signo
                    name = signal.Signals(signum).name
                    self.fail(f"stopped by {name} during {self.watchdog.current}", 128 + signum)

        self._signals = threading.Thread(target=wait, name="rocmlab-signals", daemon=True)
        self._signals.start()

    def _aborted(self, text: str) -> None:
        self.fail(f"stopped during {self.watchdog.current} because {text}", origin=False)

    def fail(self, reason: str, code: int = 1, origin: bool = True) -> NoReturn:
        """Record why, name the lost ranks, report, and leave the process with ``code``.

        ``origin``: this rank saw the failure itself (rather than another rank's abort), and
        tells the others to stop.
        """
        if not self._failing.acquire(blocking=False):
            # Another thread holds the end of the run: a failure, which ends the process, or
            # the main thread leaving after its last step, and then this (helper) thread ends
            # here. The main thread never leaves this way: it sets _leaving only once it holds
            # the end of the run.
            self._leaving.wait()
            raise SystemExit
        self.watchdog.stop()
        interval = heartbeat_interval(self.options.timeout)
        window = max(1.0, 2.5 * interval)
        # Node rank 0 serves the store: its ranks wait for the others' diagnoses (they see the
        # abort within an interval, then read the heartbeats for a window).
        linger = window + 3 * interval + 1
        backstop = threading.Timer(window + linger + 10, os._exit, (code,))
        backstop.daemon = True
        backstop.start()
        liveness = self.liveness
        diagnosis = Diagnosis()
        if liveness is not None:
            liveness.record_exit(reason, f"{self._name()} failed: {reason}" if origin else None)
            diagnosis = liveness.diagnose(window)
        store_host = self.rank_hosts[0] if self.rank_hosts else None
        who = diagnosis.describe(distributed.store_address(), store_host)
        message = f"{reason}: {who}" if liveness is not None else reason
        self.report.update(
            passed=False,
            exit_code=code,
            error=message,
            failed_step=self.watchdog.current,
            lost_ranks=[p.as_dict() for p in diagnosis.lost],
        )
        self._write_report()
        print(f"rocmlab allreduce: {for_terminal(f'{self._name()}: {message}')}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        if liveness is not None:
            liveness.record_reported()
            lost = {p.rank for p in diagnosis.lost}
            alive = [r for r in range(self.ctx.world_size) if r not in lost]
            liveness.wait_for_reports(alive, linger)
        os._exit(code)


def run_allreduce(options: AllreduceOptions) -> int:
    """Run the check on this rank; return its exit code."""
    return AllreduceJob(options, distributed.context_from_env()).run()
