"""Unit tests for plugins/modules/rocmlab_cluster_verdict.py (role cluster_check): the verdict on
one torchrun job of the cluster check from what every host returned, and the hosts it names.

The torchrun outputs are cut from real runs of torchrun 2.13 (three agents with c10d on this
machine, one of them unable to reach the rendezvous) and of rocmlab allreduce losing a rank.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "rocmlab_cluster_verdict", REPO / "plugins" / "modules" / "rocmlab_cluster_verdict.py"
)
assert _spec is not None and _spec.loader is not None
verdict = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verdict)

HOSTS = ["node-a", "node-b", "node-c"]
ENDPOINT = "10.0.0.1:29400"

# torchrun's last lines when its rendezvous deadline passed, and when the store went away or never
# answered (the agent that cannot connect, and one whose rendezvous host has given up).
RDZV_TIMEOUT = """\
  File ".../torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 680, in run
    raise RendezvousTimeoutError
torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError
"""
RDZV_CONNECTION = (
    '  File ".../torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 180, '
    "in _create_tcp_store\n"
    "    raise RendezvousConnectionError(\n"
    "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the "
    "C10d store has failed. See inner exception for details.\n"
)
CUDA_MISSING = """\
  File ".../torch/distributed/run.py", line 744, in determine_local_world_size
    raise ValueError("Cuda is not available.") from e
ValueError: Cuda is not available.
"""
LOST_RANK = (
    "rocmlab allreduce: rank 0 (node-a): timing the all-reduce of 1 KiB did not finish within "
    "--timeout 10 s: lost rank 2 (host node-c): no heartbeat for 2.5 s\n"
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    "============================================================\n"
    "rocmlab FAILED\n"
)
NUMPY_WARNING = (
    "/opt/rocmlab/venvs/pytorch/lib/python3.11/site-packages/torch/_subclasses/"
    "functional_tensor.py:368: UserWarning: Failed to initialize NumPy: No module named 'numpy'\n"
)


def b64(document: Any) -> str:
    return base64.b64encode(json.dumps(document).encode()).decode()


def allreduce_doc(host: str, passed: bool = True, **changes: Any) -> dict[str, Any]:
    doc = {
        "tool": "rocmlab allreduce",
        "host": host,
        "passed": passed,
        "error": None,
        "backend": "gloo",
        "device_type": "cpu",
        "world_size": 3,
        "nodes": 3,
        "hosts": list(HOSTS),
        "sizes": [{"bytes": 1024}, {"bytes": 65536}],
        "peak_busbw_gbps": 0.12,
        "latency_us": 812.5,
        "pairwise": {"bytes": 65536},
        "pairs": [{}, {}, {}],
        "checks": [{"name": "exact_sum", "passed": True, "detail": "every element exact"}],
    }
    doc.update(changes)
    return doc


def host_result(
    rc: int | None = 0,
    out: str = "",
    err: str = "",
    report: Any = None,
    reach_failed: bool | None = False,
    finished: int = 1,
    started: bool = True,
    delta: str | None = None,
) -> dict[str, Any]:
    job = {"finished": finished, "rc": rc, "stdout": out, "stderr": err}
    if delta is not None:
        job["delta"] = delta
    return {
        "started": started,
        "job": job,
        "reach": None if reach_failed is None else {"reached": not reach_failed, "msg": ""},
        "report": None if report is None else b64(report),
    }


def judge(results: dict[str, Any], kind: str = "allreduce", **params: Any) -> dict[str, Any]:
    return verdict.judge(
        {
            "kind": kind,
            "hosts": HOSTS,
            "rdzv_host": "node-a",
            "rdzv_endpoint": ENDPOINT,
            "join_timeout": 60,
            "timeout": 300,
            "results": results,
            **params,
        }
    )


def passing_results() -> dict[str, Any]:
    return {
        host: host_result(
            report=allreduce_doc(host), reach_failed=None if host == "node-a" else False
        )
        for host in HOSTS
    }


def test_every_host_exact_passes_and_keeps_the_rendezvous_hosts_copy() -> None:
    result = judge(passing_results())
    assert result["passed"] is True
    assert result["document_host"] == "node-a" and result["document"]["host"] == "node-a"
    assert result["record"] is None and result["lost"] == [] and result["never_joined"] == []
    message = result["message"]
    assert message.startswith("The all-reduce across 3 host(s) passed")
    assert "3 rank(s) on 3 node(s), gloo on cpu" in message
    assert "peak busbw 0.120 GB/s" in message and "3 node pair(s) measured, none slow" in message


def test_a_host_lost_mid_run_is_named_with_the_survivors_diagnosis() -> None:
    results = passing_results()
    del results["node-c"]  # Ansible lost it: not in the play any more
    for host in ("node-a", "node-b"):
        results[host] = host_result(
            rc=1,
            err=NUMPY_WARNING + LOST_RANK.replace("node-a)", f"{host})"),
            report=allreduce_doc(
                host,
                passed=False,
                error="timing the all-reduce of 1 KiB did not finish within --timeout 10 s: "
                "lost rank 2 (host node-c): no heartbeat for 2.5 s",
            ),
        )
    result = judge(results)
    assert result["passed"] is False and result["started"] is True
    assert result["lost"] == ["node-c"]
    message = result["message"]
    assert "lost during the run: node-c" in message
    assert "node-a's report: timing the all-reduce of 1 KiB" in message
    assert "lost rank 2 (host node-c)" in message
    # Each host's own line: rocmlab's message, not the warning or torchrun's banner.
    assert "node-b: exit 1: rocmlab allreduce: rank 0 (node-b)" in message
    assert "node-c: Ansible lost it during the run" in message
    assert result["document_host"] == "node-a"


def test_a_host_whose_job_status_cannot_be_read_is_lost() -> None:
    # A stopped container: docker exec fails, the module never runs, no `finished` in the result.
    results = passing_results()
    results["node-c"]["job"] = {
        "failed": True,
        "msg": "MODULE FAILURE: Error response from daemon: container is not running",
    }
    results["node-c"]["report"] = None
    result = judge(results)
    assert result["passed"] is False and result["lost"] == ["node-c"]
    assert "lost during the run: node-c" in result["message"]
    assert "node-c: Ansible could not read its job any more (MODULE FAILURE" in result["message"]


def test_a_host_that_cannot_reach_the_rendezvous_is_named_as_never_joined() -> None:
    results = {
        "node-a": host_result(
            rc=1, err=NUMPY_WARNING + RDZV_TIMEOUT, reach_failed=None, delta="0:01:02.514873"
        ),
        "node-b": host_result(rc=1, err=RDZV_CONNECTION),
        "node-c": host_result(rc=1, err=RDZV_CONNECTION, reach_failed=True),
    }
    result = judge(results)
    assert result["passed"] is False and result["started"] is False
    assert result["never_joined"] == ["node-c"]
    message = result["message"]
    assert message.startswith("The all-reduce never started")
    assert f"Never joined: node-c (it could not connect to the rendezvous at {ENDPOINT}" in message
    assert "node-a: exit 1 after 63 s: RendezvousTimeoutError;" in message
    assert "node-b: exit 1: RendezvousConnectionError: The connection to the C10d store" in message
    assert message.endswith("See inner exception for details.")  # one full stop, not two
    # No report anywhere: the fleet report gets the verdict's own record.
    assert result["document"] is None
    record = result["record"]
    assert record["tool"] == "rocmlab cluster-check" and record["passed"] is False
    assert record["never_joined"] == ["node-c"] and record["error"] == message


def test_a_host_down_before_joining_is_named() -> None:
    results = {
        "node-a": host_result(rc=1, err=RDZV_TIMEOUT, reach_failed=None),
        "node-b": host_result(rc=1, err=RDZV_CONNECTION),
    }
    result = judge(results)
    assert result["never_joined"] == ["node-c"] and result["lost"] == ["node-c"]
    assert "Never joined: node-c (Ansible lost it (host down or cut off))" in result["message"]


def test_a_torchrun_that_fails_before_joining_is_named_with_its_error() -> None:
    results = {
        "node-a": host_result(rc=1, err=RDZV_TIMEOUT, reach_failed=None),
        "node-b": host_result(rc=1, err=CUDA_MISSING),
        "node-c": host_result(rc=1, err=RDZV_CONNECTION),
    }
    result = judge(results)
    assert result["never_joined"] == ["node-b"]
    assert (
        "node-b (its torchrun failed before joining: ValueError: Cuda is not available.)"
        in result["message"]
    )


def test_no_single_host_is_blamed_without_evidence() -> None:
    results = {
        "node-a": host_result(rc=1, err=RDZV_TIMEOUT, reach_failed=None),
        "node-b": host_result(rc=1, err=RDZV_CONNECTION),
        "node-c": host_result(rc=1, err=RDZV_CONNECTION),
    }
    result = judge(results)
    assert result["started"] is False and result["never_joined"] == []
    assert "No single host is to blame" in result["message"]


def test_slow_pairs_fail_the_check_and_name_the_hosts() -> None:
    detail = (
        "2 of 3 pair(s) below 0.2 x the reference 0.150 GB/s: node-a <-> node-c 0.000 GB/s, "
        "node-b <-> node-c 0.000 GB/s; common host: node-c"
    )
    results = passing_results()
    for host in HOSTS:
        results[host]["job"]["rc"] = 1
        results[host]["report"] = b64(
            allreduce_doc(
                host,
                passed=False,
                checks=[{"name": "slow_pairs", "passed": False, "detail": detail}],
                suspect_hosts=["node-c"],
            )
        )
    result = judge(results)
    assert result["passed"] is False and result["lost"] == []
    assert f"node-a's report: [slow_pairs] {detail}" in result["message"]


def test_a_job_ended_by_timeout_says_so() -> None:
    results = passing_results()
    results["node-b"] = host_result(rc=124, err="rocmlab allreduce: rank 1 (node-b): waiting")
    result = judge(results)
    assert result["passed"] is False
    assert (
        "node-b: did not finish within cluster_check_timeout (300 s): `timeout` sent SIGTERM"
        in result["message"]
    )


def test_a_job_still_running_when_polling_stopped_fails() -> None:
    results = passing_results()
    results["node-c"]["job"]["finished"] = 0
    result = judge(results)
    assert result["passed"] is False
    assert "node-c: its job was still running" in result["message"]


def test_a_report_that_is_not_json_fails_naming_the_host() -> None:
    results = passing_results()
    results["node-b"]["report"] = base64.b64encode(b'{"passed": tr').decode()
    result = judge(results)
    assert result["passed"] is False
    assert "node-b: its report is not JSON" in result["message"]


def test_a_report_nested_too_deep_fails_naming_the_host() -> None:
    results = passing_results()
    results["node-b"]["report"] = base64.b64encode(b"[" * 100_000 + b"]" * 100_000).decode()
    result = judge(results)
    assert result["passed"] is False
    assert "node-b: its report is nested too deep to be one" in result["message"]


def test_a_passed_report_of_the_wrong_shape_is_described_without_a_crash() -> None:
    results = passing_results()
    doc = {**allreduce_doc("node-a"), "sizes": ["x", {"bytes": "many"}], "pairs": "all"}
    doc["peak_busbw_gbps"] = "fast"
    results["node-a"]["report"] = b64(doc)
    message = judge(results)["message"]
    assert "exact at 1 size(s) from 0 to 0 bytes; peak busbw 0.000 GB/s" in message


def test_a_report_refused_on_the_host_fails_naming_the_host_and_why() -> None:
    # What rocmlab_read_report said of a link the account put where the report belongs.
    results = passing_results()
    results["node-b"]["report"] = None
    results["node-b"]["report_refused"] = (
        "/var/lib/rocmlab/cluster/allreduce.json is a symbolic link (to '/etc/shadow'), "
        "which root does not follow"
    )
    result = judge(results)
    assert result["passed"] is False
    assert (
        "node-b: its report was refused (/var/lib/rocmlab/cluster/allreduce.json is a symbolic "
        "link (to '/etc/shadow'), which root does not follow)" in result["message"]
    )


def test_an_allreduce_host_without_its_copy_fails() -> None:
    # Every node's local rank 0 writes its copy: a host that exited 0 without one lost it.
    results = passing_results()
    results["node-b"]["report"] = None
    result = judge(results)
    assert result["passed"] is False
    assert "node-b wrote no report although its torchrun exited 0" in result["message"]


def test_a_report_of_other_nodes_fails() -> None:
    results = passing_results()
    results["node-a"]["report"] = b64(allreduce_doc("node-a", hosts=["x", "y", "z"]))
    result = judge(results)
    assert result["passed"] is False
    assert "are not the cluster's hosts" in result["message"]


def smoke_doc(**changes: Any) -> dict[str, Any]:
    doc = {
        "passed": True,
        "error": None,
        "backend": "cpu",
        "world_size": 3,
        "test_accuracy": 0.9512,
        "samples_per_second": 12345.6,
        "checks": [{"name": "accuracy", "passed": True, "detail": "ok", "rank": None}],
    }
    doc.update(changes)
    return doc


def test_training_passes_with_rank_zeros_report_on_one_host() -> None:
    results = {host: host_result() for host in HOSTS}
    results["node-b"]["report"] = b64(smoke_doc())  # rank 0 ran on node-b
    result = judge(results, kind="smoke")
    assert result["passed"] is True and result["document_host"] == "node-b"
    assert result["message"] == (
        "The training across nodes across 3 host(s) passed: DistributedDataParallel over 3 "
        "rank(s), cpu; test accuracy 95.12 %, 12346 samples/s."
    )


def test_training_that_fails_a_check_names_it() -> None:
    results = {host: host_result(rc=1 if host == "node-b" else 0) for host in HOSTS}
    results["node-b"]["report"] = b64(
        smoke_doc(
            passed=False,
            checks=[{"name": "accuracy", "passed": False, "detail": "0.4 below the gate 0.9"}],
        )
    )
    result = judge(results, kind="smoke")
    assert result["passed"] is False
    assert "node-b's report: [accuracy] 0.4 below the gate 0.9" in result["message"]


def test_training_without_a_report_after_a_lost_host_is_not_called_never_started() -> None:
    # Rank 0 writes at the end only: a run cut short has no report, but its workers ran.
    results = {
        "node-a": host_result(rc=1, out="device: cpu\ndata: mnist", err=LOST_RANK),
        "node-b": host_result(rc=1, err=RDZV_CONNECTION),
    }
    result = judge(results, kind="smoke")
    assert result["started"] is True and result["lost"] == ["node-c"]
    assert "lost during the run: node-c" in result["message"]
    assert result["record"]["lost_hosts"] == ["node-c"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (RDZV_TIMEOUT, "RendezvousTimeoutError"),
        (NUMPY_WARNING + CUDA_MISSING, "ValueError: Cuda is not available."),
        (LOST_RANK, LOST_RANK.splitlines()[0]),
        ("rocmlab: error: argument --sizes: bad\n", "rocmlab: error: argument --sizes: bad"),
        ("just some words\n\n", "just some words"),
        ("", "no output"),
        ("x" * 400, "x" * 297 + "..."),
    ],
)
def test_last_error_finds_what_went_wrong(text: str, expected: str) -> None:
    assert verdict.last_error(text) == expected
