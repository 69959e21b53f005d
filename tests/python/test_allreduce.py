"""``rocmlab allreduce``: bandwidth arithmetic, exact-sum check, pair planning, report schema,
and real gloo jobs under torchrun: three "nodes" on this machine (c10d rendezvous on 127.0.0.1, host
names from ROCMLAB_HOST_NAME), passing with pairwise mode, and losing a rank mid-run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
import torch.distributed as dist
from rocmlab_testutil import REPO, run_cli

from rocmlab.allreduce.bandwidth import algbw_gbps, allreduce_bus_factor, busbw_gbps, size_figures
from rocmlab.allreduce.exactsum import (
    COMPARE_CHUNK_PERIODS,
    FLOAT32_EXACT,
    PERIOD,
    compare_exact,
    contribution_row,
    exact_allreduce,
    expected_row,
    period_for,
)
from rocmlab.allreduce.job import short_error, size_entry
from rocmlab.allreduce.liveness import Liveness, Watchdog
from rocmlab.allreduce.msgsize import format_bytes, parse_sizes
from rocmlab.allreduce.pairs import flag_slow, nodes_from_hosts, plan_pairs, round_robin
from rocmlab.allreduce.report import ALLREDUCE_SCHEMA, new_report, summary_lines, write_json
from rocmlab.cli import main
from rocmlab.torchjob.distributed import host_name, node_rank

HOSTS = ("node-a", "node-b", "node-c")


# -- bandwidth as nccl-tests computes it ---------------------------------------------------------
def test_bus_factor_is_nccl_tests_2_n_minus_1_over_n() -> None:
    # doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for an all-reduce.
    assert allreduce_bus_factor(1) == 0.0
    assert allreduce_bus_factor(2) == 1.0
    assert allreduce_bus_factor(4) == 1.5
    assert allreduce_bus_factor(8) == 1.75
    with pytest.raises(ValueError, match="ranks 0"):
        allreduce_bus_factor(0)


def test_bandwidth_of_known_numbers() -> None:
    # 64 MiB in 1 ms on 8 ranks: algbw = 67108864 / 1e9 / 1e-3 GB/s; busbw = that * 14/8.
    assert algbw_gbps(64 * 1024**2, 1e-3) == pytest.approx(67.108864)
    assert busbw_gbps(64 * 1024**2, 1e-3, 8) == pytest.approx(117.440512)
    assert algbw_gbps(1024**3, 0.5) == pytest.approx(2.147483648)
    with pytest.raises(ValueError, match="positive"):
        algbw_gbps(1024, 0.0)


def test_size_time_is_the_mean_over_ranks_as_nccl_tests_default() -> None:
    figures = size_figures(4 * 1024**2, [1e-3, 2e-3, 3e-3], ranks=3)
    assert figures["time_us"] == pytest.approx(2000.0)
    assert figures["time_us_max"] == pytest.approx(3000.0)
    assert figures["algbw_gbps"] == pytest.approx(4 * 1024**2 / 1e9 / 2e-3)
    assert figures["busbw_gbps"] == pytest.approx(figures["algbw_gbps"] * 4 / 3)


# -- sizes ----------------------------------------------------------------------------------------
def test_size_ranges_and_lists() -> None:
    assert parse_sizes("1K:8K") == (1024, 2048, 4096, 8192)
    assert parse_sizes("1K:64M")[-1] == 64 * 1024**2 and len(parse_sizes("1K:64M")) == 17
    assert parse_sizes("3K:12K") == (3072, 6144, 12288)
    assert parse_sizes("1M,4K,4k,64KiB") == (4096, 65536, 1024**2)
    assert parse_sizes("8") == (8,)
    assert [format_bytes(n) for n in (4, 1024, 1536 * 1024, 64 * 1024**2, 4 * 1024**3)] == [
        "4 B", "1 KiB", "1.5 MiB", "64 MiB", "4 GiB",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("0", "'0' is out of range"),
        ("6", "'6' is not a multiple of 4 bytes"),
        ("8G", "'8G' is out of range"),
        ("64M:1K", "'64M:1K' starts above its end"),
        ("1K:2K:4K", "'1K:2K:4K' has more than one ':'"),
        ("1X", "'1X' is not a size"),
        (",", "',' names no size"),
    ],
)
def test_bad_sizes_exit_4_naming_the_option_and_what_is_accepted(
    spec: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["allreduce", "--sizes", spec]) == 2
    err = capsys.readouterr().err
    assert f"argument --sizes: {problem}" in err
    assert "expected a range LO:HI" in err and "a comma list" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "0"], "argument --timeout: '0' is out of range"),
        (["--slow-fraction", "2"], "argument --slow-fraction: '2' is out of range"),
        (["--pair-size", "5"], "argument --pair-size: '5' is not a multiple of 4 bytes"),
        (["--backend", "mpi"], "argument --backend: invalid choice: 'mpi'"),
        (["--iters", "0"], "argument --iters: '0' is out of range"),
        (["--backend", "nccl", "--device", "cpu"], "--backend nccl needs GPUs"),
        (["--device", "cuda", "--backend", "gloo"], "--backend gloo runs on the CPU"),
    ],
)
def test_bad_options_exit_4(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["allreduce", *args]) == 2
    assert message in capsys.readouterr().err


# -- the exact sum --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def one_rank_group() -> Iterator[None]:
    """A real one-rank gloo process group in this process (an in-memory store)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_expected_sum_equals_the_sum_of_the_contributions() -> None:
    for members in (1, 2, 3, 7, 300):
        period = period_for(members)
        total = sum(contribution_row(j, period) for j in range(members))
        assert torch.equal(expected_row(members, period), total)
        assert members * period <= FLOAT32_EXACT  # every partial sum is exact in float32
    assert period_for(3) == PERIOD and period_for(2**20) == 16


def test_members_contribute_different_patterns() -> None:
    rows = [contribution_row(j, PERIOD) for j in range(5)]
    assert all(not torch.equal(rows[0], row) for row in rows[1:])


def test_exact_allreduce_passes_unperturbed(one_rank_group: None) -> None:
    for count in (1, 250, 251, 1000, 4096):
        check = exact_allreduce(count, 0, 1, torch.device("cpu"))
        assert check.exact and check.elements == count and check.max_abs_error == 0.0


@pytest.mark.parametrize(
    ("perturb", "wrong", "error"),
    [
        (lambda t: t.__setitem__(777, t[777] + 1), 1, 1.0),
        # The next float32 after the value: the smallest possible error is still an error.
        (lambda t: t.__setitem__(5, torch.nextafter(t[5], torch.tensor(1e9))), 1, None),
        (lambda t: t.__setitem__(42, float("nan")), 1, math.nan),
        # A contribution counted twice: every element is off.
        (lambda t: t.add_(contribution_row(0, PERIOD).float().repeat(5)[:1000]), 1000, None),
    ],
    ids=["plus-one", "one-ulp", "nan", "counted-twice"],
)
def test_exact_allreduce_fails_on_a_perturbed_result(
    one_rank_group: None, perturb: Any, wrong: int, error: float | None
) -> None:
    check = exact_allreduce(1000, 0, 1, torch.device("cpu"), corrupt=perturb)
    assert not check.exact
    assert check.wrong == wrong
    if error is not None and math.isnan(error):
        assert math.isnan(check.max_abs_error)
    elif error is not None:
        assert check.max_abs_error == error
    else:
        assert check.max_abs_error > 0


def test_compare_finds_an_error_past_the_first_chunk() -> None:
    period = period_for(1)
    count = period * COMPARE_CHUNK_PERIODS + 1000
    result = expected_row(1, period).float().repeat(count // period + 1)[:count].clone()
    assert compare_exact(result, expected_row(1, period)).exact
    result[count - 3] += 2
    check = compare_exact(result, expected_row(1, period))
    assert (check.wrong, check.first_wrong, check.max_abs_error) == (1, count - 3, 2.0)


def test_size_entry_names_the_ranks_with_wrong_sums() -> None:
    per_rank = [
        {"rank": 0, "seconds": 1e-3, "iters": 20, "wrong": 0, "max_abs_error": 0.0},
        {"rank": 1, "seconds": 3e-3, "iters": 18, "wrong": 4, "max_abs_error": 2.0},
        {"rank": 2, "seconds": 2e-3, "iters": 20, "wrong": 0, "max_abs_error": 0.0},
    ]
    entry = size_entry(4096, 3, per_rank)
    assert entry["correct"] is False and entry["wrong_ranks"] == [1]
    assert (entry["wrong_elements"], entry["max_abs_error"], entry["iters"]) == (4, 2.0, 18)
    assert entry["time_us"] == pytest.approx(2000.0)


# -- pairs ----------------------------------------------------------------------------------------
def test_host_name_override_and_node_rank() -> None:
    assert host_name({"ROCMLAB_HOST_NAME": "rack1-node7"}) == "rack1-node7"
    assert host_name({}) == socket.gethostname()
    assert (node_rank({"GROUP_RANK": "3"}), node_rank({})) == (3, None)


def test_nodes_group_ranks_by_host_in_rank_order() -> None:
    nodes = nodes_from_hosts(["b", "b", "a", "a", "c"])
    assert [(n.host, n.ranks) for n in nodes] == [("b", (0, 1)), ("a", (2, 3)), ("c", (4,))]


@pytest.mark.parametrize("count", [2, 3, 5, 6])
def test_round_robin_covers_every_pair_once_each_node_once_per_round(count: int) -> None:
    rounds = round_robin(list(range(count)))
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == [(a, b) for a in range(count) for b in range(a + 1, count)]
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))


def test_all_pairs_when_few_and_a_balanced_seeded_sample_when_many() -> None:
    assert plan_pairs(3, 100, 0) == ([(0, 1), (0, 2), (1, 2)], False)
    sample, sampled = plan_pairs(40, 60, seed=7)
    assert sampled and len(sample) == len(set(sample)) == 60
    degree = Counter(x for p in sample for x in p)
    assert len(degree) == 40  # every node is measured ...
    assert max(degree.values()) - min(degree.values()) <= 2  # ... about equally often
    assert plan_pairs(40, 60, seed=7) == (sample, True)
    assert plan_pairs(40, 60, seed=8)[0] != sample


def test_one_slow_node_of_three_is_flagged_where_a_plain_median_would_not_be() -> None:
    hosts = [("a", "b"), ("a", "c"), ("b", "c")]
    busbw = [10.0, 2.0, 2.1]  # c's link is slow: both its pairs; the median pair is slow
    verdict = flag_slow(hosts, busbw, 0.5)
    assert verdict.median_busbw == 2.1  # half of this flags nothing
    assert verdict.reference_busbw == 10.0
    assert verdict.slow == (1, 2) and verdict.suspects == ("c",)


def test_uniform_pairs_and_a_lone_pair_are_not_slow() -> None:
    hosts = [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]
    assert flag_slow(hosts, [9.0, 10.0, 11.0, 10.5, 9.5, 10.0], 0.5).slow == ()
    assert flag_slow([("a", "b")], [0.1], 0.5).slow == ()
    one_link = flag_slow(hosts, [10.0, 10.0, 10.0, 10.0, 10.0, 3.0], 0.5)
    assert one_link.slow == (5,) and one_link.suspects == ()  # a link, not a host


# -- liveness ------------------------------------------------------------------------------------
def test_watchdog_names_the_step_that_outlived_the_timeout() -> None:
    expired: list[str] = []
    done = threading.Event()
    watchdog = Watchdog(0.5, lambda step: (expired.append(step), done.set()))
    watchdog.start()
    for i in range(4):  # steps that finish in time
        watchdog.step(f"quick {i}")
        time.sleep(0.1)
    watchdog.step("stuck")
    assert done.wait(10)
    assert expired == ["stuck"]


def test_diagnosis_names_silent_ranks_not_those_alive_or_gone_on_purpose() -> None:
    store = dist.HashStore()
    ranks = [Liveness(store, store, rank, 4, 0.1) for rank in range(4)]
    for rank, liveness in enumerate(ranks):
        liveness.start(f"host-{rank}")
    ranks[2].stop()  # stops beating, says nothing: lost
    ranks[3].record_exit("failed: saw a closed connection")
    ranks[3].stop()
    diagnosis = ranks[0].diagnose(0.5)
    assert [(p.rank, p.host) for p in diagnosis.lost] == [(2, "host-2")]
    assert [(p.rank, p.detail) for p in diagnosis.left] == [(3, "failed: saw a closed connection")]
    assert "lost rank 2 (host host-2)" in diagnosis.describe("h:1", "host-0")
    ranks[1].stop()


def test_a_failing_rank_stops_the_others_through_their_heartbeat() -> None:
    store = dist.HashStore()
    stopped: list[str] = []
    seen = threading.Event()
    waiting = Liveness(
        store, store, 0, 2, 0.1, on_abort=lambda text: (stopped.append(text), seen.set())
    )
    failing = Liveness(store, store, 1, 2, 0.1, on_abort=lambda text: stopped.append("self"))
    waiting.start("host-0")
    failing.start("host-1")
    failing.record_exit(
        "saw a closed connection", "rank 1 (host-1) failed: saw a closed connection"
    )
    assert seen.wait(5)
    time.sleep(0.3)  # the failing rank does not stop itself, nor the other twice
    assert stopped == ["rank 1 (host-1) failed: saw a closed connection"]
    waiting.stop()
    failing.stop()


class SlowStore:
    """A real in-memory store (torch's HashStore) whose ``add`` takes DELAY seconds, as on a
    loaded store host; ``beating`` is set once the heartbeat thread is inside one."""

    def __init__(self, delay: float) -> None:
        self.inner = dist.HashStore()
        self.delay = delay
        self.beating = threading.Event()

    def add(self, key: str, value: int) -> int:
        if threading.current_thread().name == "rocmlab-heartbeat":
            self.beating.set()
            time.sleep(self.delay)
        return self.inner.add(key, value)

    def set(self, key: str, value: str) -> None:
        self.inner.set(key, value)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def check(self, keys: list[str]) -> bool:
        return self.inner.check(keys)


def test_stopping_the_heartbeat_waits_for_its_store_operation_within_the_bound() -> None:
    """A heartbeat thread still in a store operation when the interpreter exits is stopped inside
    torch's C++ code: "terminate called without an active exception", SIGABRT (what a rank did
    at the end of a passed run on a loaded machine). stop(wait) returns once the thread has left
    it, and says so when the bound is too short."""
    before = set(threading.enumerate())
    store = SlowStore(2.0)
    liveness = Liveness(store, store, 0, 1, 0.01)
    liveness.start("host-0")
    assert store.beating.wait(10)
    assert liveness.stop(wait=0.05) is False  # still in its store operation, and said so
    assert liveness.stop(wait=10) is True
    assert set(threading.enumerate()) <= before


def test_the_watchdog_ends_when_stopped_with_a_wait() -> None:
    before = set(threading.enumerate())
    watchdog = Watchdog(30, lambda step: None)
    watchdog.start()
    watchdog.step("a step")
    assert watchdog.stop(wait=10) is True
    assert set(threading.enumerate()) <= before


def test_a_run_leaves_the_process_group_and_no_thread_of_its_own() -> None:
    # In a process of its own, as a rank runs: what is left when the interpreter would exit.
    code = (
        "import sys, threading\n"
        "import torch.distributed as dist\n"
        "from rocmlab.cli import main\n"
        "code = main(['allreduce', '--sizes', '1K', '--iters', '2', '--warmup', '1'])\n"
        "print(sorted(t.name for t in threading.enumerate()), dist.is_initialized())\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "['MainThread'] False"


def test_short_backend_errors() -> None:
    gloo = RuntimeError(
        "[/x/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.3]:41234. "
        "This is typically caused by a remote worker crashing."
    )
    assert short_error(gloo) == "RuntimeError: Connection closed by peer [10.0.0.3]:41234"


# -- the report -----------------------------------------------------------------------------------
def test_schema_is_valid_and_a_fresh_report_conforms(tmp_path: Path) -> None:
    jsonschema.Draft202012Validator.check_schema(ALLREDUCE_SCHEMA)
    report = new_report("h", 0, 3, 20, 5, 60.0)
    jsonschema.validate(report, ALLREDUCE_SCHEMA)
    report["sizes"] = [{"bytes": 4096}]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, ALLREDUCE_SCHEMA)
    report = new_report("h", 0, 3, 20, 5, 60.0)
    report["max_abs_error"] = float("nan")
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        jsonschema.validate(report, ALLREDUCE_SCHEMA)
    del report["max_abs_error"]
    report.update(error="x", lost_ranks=[{"rank": 1, "host": None, "detail": "never started"}])
    write_json(report, tmp_path / "r.json")
    jsonschema.validate(json.loads((tmp_path / "r.json").read_text()), ALLREDUCE_SCHEMA)
    assert summary_lines(report)[-1] == "rocmlab allreduce: FAILED"
    assert list(tmp_path.iterdir()) == [tmp_path / "r.json"]  # no temporary file left


# -- one process, without torchrun ----------------------------------------------------------------
def test_one_process_runs_without_torchrun(tmp_path: Path) -> None:
    result = run_cli(
        "allreduce", "--sizes", "4K,64K", "--iters", "5", "--json", str(tmp_path / "r.json")
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(report, ALLREDUCE_SCHEMA)
    assert report["passed"] and (report["world_size"], report["nodes"]) == (1, 1)
    assert [s["bytes"] for s in report["sizes"]] == [4096, 65536]
    assert all(s["correct"] and s["busbw_gbps"] == 0 for s in report["sizes"])  # nothing moves
    assert report["ranks"][0]["node_rank"] is None and report["pairwise"] is None
    assert "rocmlab allreduce: PASSED" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU")
def test_device_cuda_without_a_gpu_exits_4_with_a_report(tmp_path: Path) -> None:
    result = run_cli("allreduce", "--device", "cuda", "--json", str(tmp_path / "r.json"))
    assert result.returncode == 4
    report = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(report, ALLREDUCE_SCHEMA)
    assert report["exit_code"] == 4 and "no GPU available" in report["error"]


def test_sigterm_mid_run_reports_and_exits_143(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "rocmlab", "allreduce", "--sizes", "4K", "--iters", "1000000",
         "--timeout", "400", "--json", str(tmp_path / "r.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().startswith("allreduce: gloo on cpu")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    report = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(report, ALLREDUCE_SCHEMA)
    assert report["exit_code"] == 143
    assert report["error"].startswith("stopped by SIGTERM during ")  # the step it was in


# -- real jobs under torchrun ---------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Job:
    """Three torchrun agents on this machine, one "node" each."""

    logs: dict[str, Path]
    agents: dict[str, subprocess.Popen[bytes]]
    signalled: list[int] = field(default_factory=list)

    def log(self, host: str) -> str:
        return self.logs[host].read_text(errors="replace")

    def worker(self, rank: int) -> tuple[str, int]:
        """(host, pid) of the worker with RANK ``rank``."""
        for host, agent in self.agents.items():
            for pid in self.children(agent.pid):
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                if f"RANK={rank}".encode() in environ:
                    return host, pid
        raise AssertionError(f"no worker with RANK {rank}")

    def wait_started(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any("allreduce: gloo on cpu" in self.log(h) for h in self.logs):
                return
            time.sleep(0.2)
        raise AssertionError("the job did not start:\n" + self.log(HOSTS[0]))

    def wait(self, timeout: float) -> dict[str, int]:
        return {host: agent.wait(timeout) for host, agent in self.agents.items()}

    def stop(self) -> None:
        """SIGKILL what is left: the workers (torchrun starts each in its own session, so they
        are not in their agent's process group) and the agents with their groups."""
        for agent in self.agents.values():
            if agent.poll() is None:
                for pid in self.children(agent.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
        for pid in self.signalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    @staticmethod
    def children(pid: int) -> list[int]:
        try:
            return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return []

    def signal_worker(self, pid: int, how: signal.Signals) -> None:
        self.signalled.append(pid)
        os.kill(pid, how)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Any]:
    jobs: list[Job] = []

    def start(*args: str) -> Job:
        port = free_port()
        logs, agents = {}, {}
        for index, host in enumerate(HOSTS):
            logs[host] = tmp_path / f"{host}.log"
            command = [
                sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(HOSTS)),
                "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}",
                # On one machine every agent matches 127.0.0.1; say which one serves the store.
                "--rdzv-conf", f"is_host={'true' if index == 0 else 'false'},join_timeout=120",
                "-m", "rocmlab", "allreduce", "--json", str(tmp_path / f"{host}.json"), *args,
            ]  # fmt: skip
            with logs[host].open("w") as log:
                agents[host] = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                    env={**os.environ, "ROCMLAB_HOST_NAME": host, "OMP_NUM_THREADS": "1"},
                    start_new_session=True,
                )
        job = Job(logs, agents)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.stop()


def test_three_nodes_pass_with_every_pair_measured(nodes: Any, tmp_path: Path) -> None:
    job = nodes(
        "--sizes", "1K:64K", "--iters", "10", "--warmup", "2", "--timeout", "60",
        "--pairwise", "--pair-size", "64K", "--slow-fraction", "0.1",
    )  # fmt: skip
    codes = job.wait(300)
    assert codes == dict.fromkeys(HOSTS, 0), job.log(HOSTS[0])
    # Every node's local rank 0 wrote the report on its "host"; they agree.
    reports = {h: json.loads((tmp_path / f"{h}.json").read_text()) for h in HOSTS}
    for report in reports.values():
        jsonschema.validate(report, ALLREDUCE_SCHEMA)
    report = next(r for r in reports.values() if r["written_by_rank"] == 0)
    assert {r["written_by_rank"] for r in reports.values()} == {0, 1, 2}
    for other in reports.values():
        assert other["sizes"] == report["sizes"] and other["pairs"] == report["pairs"]
    assert report["passed"] is True and report["exit_code"] == 0 and report["error"] is None
    assert (report["backend"], report["device_type"]) == ("gloo", "cpu")
    assert (report["world_size"], report["nodes"]) == (3, 3)
    assert sorted(report["hosts"]) == list(HOSTS)
    assert sorted(r["host"] for r in report["ranks"]) == list(HOSTS)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2]
    assert all(r["device"] == "cpu" and r["local_rank"] == 0 for r in report["ranks"])
    assert sorted(r["node_rank"] for r in report["ranks"]) == [0, 1, 2]
    # Sizes 1K..64K, each exact on every rank, bandwidth by nccl-tests' formula for n = 3.
    assert [s["bytes"] for s in report["sizes"]] == [1024 * 2**i for i in range(7)]
    for size in report["sizes"]:
        assert size["correct"] and size["wrong_ranks"] == [] and size["max_abs_error"] == 0
        assert size["algbw_gbps"] == pytest.approx(size["bytes"] / 1e9 / (size["time_us"] / 1e6))
        assert size["busbw_gbps"] == pytest.approx(size["algbw_gbps"] * 4 / 3)
    assert report["latency_us"] == report["sizes"][0]["time_us"]
    # 3 nodes x 1 process: 3 pairs, both hosts named, 2 ranks each (busbw = algbw).
    pairwise = report["pairwise"]
    assert (pairwise["pairs_possible"], pairwise["pairs_measured"], pairwise["sampled"]) == (
        3, 3, False,
    )  # fmt: skip
    assert sorted(tuple(sorted(p["hosts"])) for p in report["pairs"]) == [
        ("node-a", "node-b"), ("node-a", "node-c"), ("node-b", "node-c"),
    ]  # fmt: skip
    for pair in report["pairs"]:
        assert pair["correct"] and len(pair["ranks"]) == 2 and pair["slow"] is False
        assert pair["busbw_gbps"] == pytest.approx(pair["algbw_gbps"])
    assert report["slow_pairs"] == [] and report["suspect_hosts"] == []
    names = [c["name"] for c in report["checks"]]
    assert names == ["hosts", "exact_sum", "pairs_exact", "slow_pairs"]
    out = "".join(job.log(h) for h in HOSTS)
    assert out.count("rocmlab allreduce: PASSED") == 1  # printed by rank 0 only


def lose_a_rank(nodes: Any, tmp_path: Path, how: signal.Signals, why: str) -> None:
    timeout = 6.0
    job = nodes("--sizes", "1K:4M", "--iters", "100000", "--timeout", str(timeout))
    job.wait_started()
    # Not node-a, whose agent serves the rendezvous, nor rank 0, whose agent serves the job's
    # store: losing those is torchrun's failure as much as the job's (docs/cluster-check.md).
    rank, (lost_host, pid) = next(
        (r, job.worker(r)) for r in (1, 2) if job.worker(r)[0] != HOSTS[0]
    )
    job.signal_worker(pid, how)
    lost_at = time.monotonic()
    survivors = [h for h in HOSTS if h != lost_host]
    # Margin: the diagnosis window (2.5 heartbeats, at least 1 s), the wait for the other
    # survivors' diagnoses, and process exit on 2 shared cores.
    for host in survivors:
        code = job.agents[host].wait(timeout + 20)
        assert code != 0, job.log(host)
    assert time.monotonic() - lost_at < timeout + 20
    for host in survivors:
        assert f"lost rank {rank} (host {lost_host})" in job.log(host), job.log(host)
        assert why in job.log(host), job.log(host)
    for host in survivors:
        report = json.loads((tmp_path / f"{host}.json").read_text())
        jsonschema.validate(report, ALLREDUCE_SCHEMA)
        assert report["passed"] is False and report["exit_code"] == 1
        assert report["lost_ranks"] == [
            {"rank": rank, "host": lost_host, "detail": report["lost_ranks"][0]["detail"]}
        ]
        assert f"lost rank {rank} (host {lost_host})" in report["error"]


def test_a_killed_rank_ends_the_others_naming_it(nodes: Any, tmp_path: Path) -> None:
    lose_a_rank(nodes, tmp_path, signal.SIGKILL, "no heartbeat for")


def test_a_frozen_rank_ends_the_others_within_the_timeout(nodes: Any, tmp_path: Path) -> None:
    # SIGSTOP: the process keeps its connections but answers nothing, as a host that hangs or
    # drops off the network: only the step timeout can end the others' wait.
    lose_a_rank(nodes, tmp_path, signal.SIGSTOP, "did not finish within --timeout 6 s")
