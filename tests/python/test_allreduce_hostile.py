"""``rocmlab allreduce`` against what a host or the network may throw at it: the port of the
job's store held by another process, a --json FILE in a missing directory or one that cannot be
written, escape sequences and undecodable bytes in host names, a rank announcing more JSON than
any rank sends.

The store cases are real processes on loopback: two ranks of a gloo job started without torchrun
(RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT), rank 0 serving the store, and a plain
socket listener of this test holding the port. Every process runs under a subprocess timeout, so
that a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from rocmlab_testutil import REPO, run_cli

from rocmlab.allreduce.report import ALLREDUCE_SCHEMA
from rocmlab.torchjob.distributed import MAX_JSON_BYTES, _check_lengths
from rocmlab.torchjob.rendezvous import PortInUse, listen_socket, port_holder

STEP_TIMEOUT = 5
# Starting Python and importing torch on a loaded 2-core test machine, plus the step timeout.
BOUND = STEP_TIMEOUT + 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port held by a plain listener that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


def start_ranks(port: int, tmp_path: Path, *args: str) -> list[subprocess.Popen[str]]:
    """Two ranks of a job without torchrun, "nodes" node-0 and node-1 on this machine."""
    ranks = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "ROCMLAB_HOST_NAME": f"node-{rank}", "OMP_NUM_THREADS": "1",
        }  # fmt: skip
        for name in ("TORCHELASTIC_USE_AGENT_STORE", "GROUP_RANK"):
            env.pop(name, None)
        command = [
            sys.executable, "-m", "rocmlab", "allreduce", "--sizes", "4K,64K", "--iters", "3",
            "--timeout", str(STEP_TIMEOUT), "--json", str(tmp_path / f"node-{rank}.json"), *args,
        ]  # fmt: skip
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env
        )
        ranks.append(process)
    return ranks


def finish(ranks: list[subprocess.Popen[str]]) -> list[tuple[int, str, str, float]]:
    """(exit code, stdout, stderr, seconds) of each rank; kills them all on a hang."""
    start = time.monotonic()
    done = []
    try:
        for process in ranks:
            out, err = process.communicate(timeout=max(1.0, BOUND - (time.monotonic() - start)))
            done.append((process.returncode, out, err, time.monotonic() - start))
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
    return done


def test_two_ranks_without_torchrun_pass_with_rank_0_serving_the_store(tmp_path: Path) -> None:
    (code0, out0, err0, _), (code1, _, err1, _) = finish(start_ranks(free_port(), tmp_path))
    assert (code0, code1) == (0, 0), err0 + err1
    report = json.loads((tmp_path / "node-0.json").read_text())
    jsonschema.validate(report, ALLREDUCE_SCHEMA)
    assert report["passed"] and (report["world_size"], report["nodes"]) == (2, 2)
    assert sorted(report["hosts"]) == ["node-0", "node-1"]
    assert "2 distinct host name(s), one per node" in out0
    assert out0.count("rocmlab allreduce: PASSED") == 1


def test_a_store_port_held_by_another_process_ends_every_rank_with_what_to_do(
    held_port: int, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{held_port}"
    (code0, _, err0, _), (code1, _, err1, took1) = finish(start_ranks(held_port, tmp_path))
    # Rank 0 cannot take the port: it says so at once, naming the holder (this test).
    assert code0 == 1, err0
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert (
        f"cannot serve the job's store at {address}: the port is held by pid {os.getpid()} "
        f"({comm}); stop that process, or choose another port (MASTER_PORT;" in err0
    )
    # Rank 1 reached a port that accepts connections but never answers as a store: it gives up
    # within --timeout, naming the address and what to do.
    assert code1 == 1, err1
    assert (
        f"rank 1 (node-1): connecting to the job's store at {address} did not finish within "
        f"--timeout {STEP_TIMEOUT} s: nothing answered as the job's store at {address}: rank 0 "
        f"did not serve it (read its message), or another process holds port {held_port}" in err1
    )
    assert took1 < BOUND
    for err in (err0, err1):
        assert "Traceback" not in err
    for rank in (0, 1):
        report = json.loads((tmp_path / f"node-{rank}.json").read_text())
        jsonschema.validate(report, ALLREDUCE_SCHEMA)
        assert report["passed"] is False and report["exit_code"] == 1
        assert address in report["error"]
        assert report["failed_step"] == f"connecting to the job's store at {address}"


def test_without_torchrun_master_addr_and_port_are_required(tmp_path: Path) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "", "MASTER_PORT": ""}
    result = run_cli("allreduce", "--timeout", "5", env=env, timeout=BOUND)
    assert result.returncode == 2, result.stderr
    assert "WORLD_SIZE > 1 without torchrun needs MASTER_ADDR and MASTER_PORT" in result.stderr
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "70000"}
    result = run_cli("allreduce", "--timeout", "5", env=env, timeout=BOUND)
    assert result.returncode == 2 and "MASTER_PORT '70000': expected a TCP port" in result.stderr


def test_listen_socket_refuses_a_held_port_and_port_holder_names_the_process(
    held_port: int,
) -> None:
    with pytest.raises(PortInUse):
        listen_socket(held_port)
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert port_holder(held_port) == f"pid {os.getpid()} ({comm})"
    assert port_holder(free_port()) is None
    with listen_socket(0) as sock:  # a free port is taken
        assert sock.getsockname()[1] > 0


# ---------------------------------------------------------------- --json


def test_json_in_a_missing_directory_is_refused_and_not_created(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "deeper" / "r.json"
    result = run_cli("allreduce", "--sizes", "4K", "--json", str(target), timeout=BOUND)
    assert result.returncode == 2
    assert (
        f"--json {target}: the directory {target.parent} does not exist (it is not created)"
        in result.stderr
    )
    assert not (tmp_path / "missing").exists()


def test_json_naming_a_directory_is_refused(tmp_path: Path) -> None:
    result = run_cli("allreduce", "--sizes", "4K", "--json", str(tmp_path), timeout=BOUND)
    assert result.returncode == 2
    assert f"--json {tmp_path}: is a directory; give a file name" in result.stderr


def test_a_report_that_cannot_be_written_does_not_exit_0(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text('{"old": true}\n')

    def small_files() -> None:
        # The probe file is empty and passes the check; the report does not fit: EFBIG.
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    result = subprocess.run(
        [sys.executable, "-m", "rocmlab", "allreduce", "--sizes", "4K", "--iters", "2",
         "--json", str(report)],
        capture_output=True, text=True, cwd=REPO, timeout=BOUND, preexec_fn=small_files,
        check=False,
    )  # fmt: skip
    assert result.returncode == 5, result.stderr
    assert "rocmlab allreduce: PASSED" in result.stdout
    assert f"cannot write --json {report} (File too large)" in result.stderr
    assert report.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary file left


# ---------------------------------------------------------------- what other hosts say


def test_host_names_reach_the_terminal_escaped_and_the_report_as_valid_json(
    tmp_path: Path,
) -> None:
    name = os.fsdecode(b"node\x1b]0;owned\x07\xe2\x80\xae\xff")  # ESC, BEL, U+202E, a bad byte
    report = tmp_path / "r.json"
    result = subprocess.run(
        [sys.executable, "-m", "rocmlab", "allreduce", "--sizes", "4K", "--iters", "2",
         "--json", str(report)],
        capture_output=True, cwd=REPO, timeout=BOUND, check=False,
        env={**os.environ, "ROCMLAB_HOST_NAME": name},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode("utf-8")
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "node(s): node\\x1b]0;owned\\x07\\u202e\\udcff; timeout" in out
    raw = report.read_bytes().decode("utf-8")
    assert "\\ud" not in raw.lower()
    document = json.loads(raw)
    jsonschema.validate(document, ALLREDUCE_SCHEMA)
    assert document["host"] == "node\x1b]0;owned\x07\u202e\\xff"


def test_a_rank_announcing_more_json_than_allowed_is_refused_before_allocating() -> None:
    _check_lengths([10, MAX_JSON_BYTES])
    with pytest.raises(ValueError, match=f"rank 1 announced {MAX_JSON_BYTES + 1} bytes of JSON"):
        _check_lengths([10, MAX_JSON_BYTES + 1, 3])
    with pytest.raises(ValueError, match="rank 0 announced -1 bytes"):
        _check_lengths([-1])
