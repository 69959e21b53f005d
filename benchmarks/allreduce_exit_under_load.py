#!/usr/bin/env python3
"""Does `rocmlab allreduce` end cleanly, run after run, while the machine is loaded?

Each run starts three torchrun agents on this machine, one "node" and one rank each, over the
loopback (c10d rendezvous, gloo on the CPU), as tests/python/test_allreduce.py does, while
another process keeps every core busy. A run passes when all three agents exit 0 within LIMIT
seconds; an agent still running then is killed with its worker and counted as 124 (what
`timeout` returns). One line per run: every agent's exit code and the run's wall time, then a
summary; the exit status is 1 when any run failed. A failed run's logs stay in the directory
printed at the start.

Usage: benchmarks/allreduce_exit_under_load.py [--runs 20] [--limit 180] [--no-load]
        [-- ALLREDUCE ARGS]  (default args: --sizes 1K:256K --pairwise --pair-size 256K
        --slow-fraction 0.001 --timeout 60). Needs torch (CPU) in this Python.
Results: docs/cluster-check.md, "A clean exit".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ("node-a", "node-b", "node-c")
# The slow-pair check is off (F = 0.001): a loaded machine makes pairs slow, and what is measured
# here is whether the run ends cleanly, not the bandwidth.
DEFAULT_ARGS = [
    "--sizes", "1K:256K", "--pairwise", "--pair-size", "256K", "--slow-fraction", "0.001",
    "--timeout", "60",
]  # fmt: skip
LOAD = "while True: pass"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def kill_tree(agent: subprocess.Popen[bytes]) -> None:
    """SIGKILL an agent, its process group and its workers (each in its own session)."""
    for pid in children(agent.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(agent.pid, signal.SIGKILL)
    agent.wait()


def one_run(number: int, logs: Path, args: list[str], limit: float) -> dict:
    """Three agents, one rank each; every agent's exit code (124: killed at LIMIT) and the time."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    agents: dict[str, subprocess.Popen[bytes]] = {}
    started = time.monotonic()
    for index, host in enumerate(HOSTS):
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(HOSTS)),
            "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"bench-{port}",
            "--rdzv-conf", f"is_host={'true' if index == 0 else 'false'},join_timeout=120",
            "-m", "rocmlab", "allreduce", *args,
        ]  # fmt: skip
        with (logs / f"run{number:02d}-{host}.log").open("w") as log:
            agents[host] = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**env, "ROCMLAB_HOST_NAME": host},
                start_new_session=True,
            )
    codes: dict[str, int] = {}
    try:
        for host, agent in agents.items():
            try:
                codes[host] = agent.wait(max(0.0, started + limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_tree(agent)
                codes[host] = 124
    finally:  # interrupted: leave nothing running
        for agent in agents.values():
            if agent.poll() is None:
                kill_tree(agent)
    seconds = time.monotonic() - started
    aborted = [
        host
        for host in HOSTS
        if "terminate called" in (logs / f"run{number:02d}-{host}.log").read_text(errors="replace")
    ]
    return {"run": number, "codes": codes, "seconds": round(seconds, 1), "aborted": aborted}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--limit", type=float, default=180.0, help="seconds per run")
    parser.add_argument("--no-load", action="store_true", help="do not load the cores")
    parser.add_argument("allreduce", nargs="*", help="rocmlab allreduce's arguments")
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    args = options.allreduce or DEFAULT_ARGS
    logs = Path(tempfile.mkdtemp(prefix="rocmlab-allreduce-exit-"))
    cores = os.cpu_count() or 1
    load = [] if options.no_load else [
        subprocess.Popen([sys.executable, "-c", LOAD]) for _unused in range(cores)
    ]  # fmt: skip
    print(
        f"{options.runs} run(s) of rocmlab allreduce {' '.join(args)}: 3 torchrun agents, one "
        f"rank each, loopback; {len(load)} busy process(es) on {cores} core(s); logs in {logs}",
        flush=True,
    )
    results = []
    try:
        for number in range(1, options.runs + 1):
            result = one_run(number, logs, args, options.limit)
            results.append(result)
            codes = " ".join(f"{h}={c}" for h, c in result["codes"].items())
            aborted = ", ".join(result["aborted"])
            extra = f" terminate called: {aborted}" if aborted else ""
            print(f"run {number:2d}: {codes} {result['seconds']:6.1f} s{extra}", flush=True)
    finally:
        for process in load:
            process.kill()
            process.wait()
    passed = [r for r in results if set(r["codes"].values()) == {0}]
    times = sorted(r["seconds"] for r in results)
    print(
        f"{len(passed)} of {len(results)} run(s) passed (every agent exit 0); time min "
        f"{times[0]} s, median {times[len(times) // 2]} s, max {times[-1]} s"
    )
    print(json.dumps({"args": args, "load_processes": len(load), "results": results}))
    return 0 if len(passed) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
