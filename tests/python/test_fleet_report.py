"""``rocmlab fleet-report``: coverage of the declared hosts, the state rules, drift and slow flags,
the fleet.json schema, malformed input, exit codes, and the JUnit, HTML and text outputs.

Smoke reports are variations of one real report (tests/fixtures/fleet/PROVENANCE.md); each test
says what it changes.
"""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fleet_testutil import (
    cache_record,
    doctor_document,
    failed_check,
    fleet_report,
    hosts_by_name,
    preflight_record,
    read_outputs,
    ready_reports,
    real_report,
    rollout_record,
    schema2,
    smoke_report,
    write_fleet,
)
from rocmlab_testutil import REPO

from rocmlab.cli import main
from rocmlab.fleet.schema import FLEET_SCHEMA

# --- coverage and the state rules -------------------------------------------------------------


def test_every_declared_host_ready_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_fleet(tmp_path, reports=ready_reports("ws-01", "ws-02", "ws-10"))
    code, fleet, out = fleet_report(tmp_path, "ws-10,ws-01,ws-02", capsys)
    assert code == 0
    assert fleet["ready"] is True
    assert fleet["summary"] == {
        "declared": 3, "ready": 3, "not_ready": 0, "drift": 0, "slow": 0, "undeclared": 0,
    }  # fmt: skip
    assert [h["host"] for h in fleet["hosts"]] == ["ws-01", "ws-02", "ws-10"]  # natural order
    host = fleet["hosts"][0]
    assert host["state"] == "ready" and host["reason"] is None
    assert host["test_accuracy"] == real_report()["test_accuracy"]
    assert host["machine"] == "ws-01"
    assert "fleet: 3 of 3 hosts ready" in out


@pytest.mark.parametrize(
    ("rollout", "state", "reason"),
    [
        (("unreachable", None), "unreachable", "unreachable"),
        (("skipped", "user logged in"), "skipped", "skipped: user logged in"),
        (
            ("quarantined", "smoke job failed: accuracy 0.31 below 0.94"),
            "quarantined",
            "quarantined: smoke job failed: accuracy 0.31 below 0.94",
        ),
        (
            ("failed", "rocm_packages: apt-get install rocm-hip-sdk exited 100"),
            "failed",
            "failed: rocm_packages: apt-get install rocm-hip-sdk exited 100",
        ),
        (("not_run", None), "not_run", "not run (the rollout stopped before this host)"),
        (
            ("rolled_back", "health gate failed on ROCm 7.1.1 (...); rolled back to ROCm 6.4.2"),
            "rolled_back",
            "rolled back: health gate failed on ROCm 7.1.1 (...); rolled back to ROCm 6.4.2",
        ),
    ],
)
def test_a_declared_host_without_a_report_fails_with_the_rollouts_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture, rollout: tuple[str, str | None], state: str,
    reason: str,
) -> None:  # fmt: skip
    write_fleet(
        tmp_path,
        reports=ready_reports("ws-01"),
        rollout={"ws-02.json": rollout_record("ws-02", *rollout)},
    )
    code, fleet, out = fleet_report(tmp_path, "ws-01,ws-02", capsys)
    assert code == 1
    host = hosts_by_name(fleet)["ws-02"]
    assert (host["ready"], host["state"], host["reason"]) == (False, state, reason)
    assert f"ws-02  {state.upper()}" in out and reason in out


def test_a_declared_host_with_nothing_at_all_is_no_report(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_fleet(tmp_path, reports=ready_reports("ws-01"))
    code, fleet, out = fleet_report(tmp_path, "ws-01,ws-02", capsys)
    assert code == 1
    host = hosts_by_name(fleet)["ws-02"]
    assert (host["state"], host["reason"]) == ("no_report", "no report")
    assert fleet["summary"]["not_ready"] == 1
    assert "ws-02  NO_REPORT  no report" in out


def test_the_rollout_state_wins_over_a_passing_report(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A host skipped this time keeps an old passing report: the rollout's state decides."""
    write_fleet(
        tmp_path,
        reports=ready_reports("ws-01", "ws-02"),
        rollout={
            "ws-01.json": rollout_record("ws-01", "ready"),
            "ws-02.json": rollout_record("ws-02", "skipped", "GPU compute process running"),
        },
    )
    code, fleet, _ = fleet_report(tmp_path, "ws-01,ws-02", capsys)
    assert code == 1
    hosts = hosts_by_name(fleet)
    assert hosts["ws-01"]["ready"] is True
    assert hosts["ws-01"]["rollout"]["state"] == "ready"
    assert hosts["ws-02"]["reason"] == "skipped: GPU compute process running"
    assert hosts["ws-02"]["test_accuracy"] is not None  # the old report is still shown


def test_the_rollout_state_wins_and_names_an_unusable_report_too(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_fleet(
        tmp_path,
        reports={"ws-01.json": "{"},
        rollout={"ws-01.json": rollout_record("ws-01", "skipped", "user logged in")},
    )
    _, fleet, _ = fleet_report(tmp_path, "ws-01", capsys)
    host = fleet["hosts"][0]
    assert host["state"] == "skipped"
    assert host["reason"].startswith("skipped: user logged in; also unreadable report: ws-01.json")


def test_ready_needs_a_passing_report_even_when_the_rollout_says_ready(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    reports = {"ws-02.json": failed_check(smoke_report("ws-02"), "accuracy", "0.5 < gate 0.94")}
    rollouts = {f"{h}.json": rollout_record(h, "ready") for h in ("ws-01", "ws-02")}
    write_fleet(tmp_path, reports=reports, rollout=rollouts)
    code, fleet, _ = fleet_report(tmp_path, "ws-01,ws-02", capsys)
    assert code == 1
    hosts = hosts_by_name(fleet)
    assert hosts["ws-01"]["reason"] == "no report (the rollout record says ready)"
    assert hosts["ws-02"]["state"] == "smoke_failed"
    assert hosts["ws-02"]["reason"] == (
        "smoke job failed: accuracy: 0.5 < gate 0.94 (the rollout record says ready)"
    )


def test_a_host_whose_installed_release_is_not_the_configured_one_is_not_ready(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """What the rollout read from each host after its change, not the inventory, decides; AMD's
    /opt/rocm/.info/version ("7.1.0-20") and rocm_repo_version ("7.1") name one release."""
    hosts = ("ws-01", "ws-02", "ws-03", "ws-04")

    def ready(host: str, installed: str | None, configured: str | None) -> dict[str, Any]:
        return rollout_record(
            host, "ready", rocm={"installed": installed, "configured": configured}
        )

    rollouts = {
        "ws-01.json": ready("ws-01", "7.1.0-20", "7.1"),
        "ws-02.json": ready("ws-02", "6.4.2", "7.1"),
        "ws-03.json": ready("ws-03", None, "7.1"),
        # The distribution's ROCm: no release is configured, none is compared.
        "ws-04.json": ready("ws-04", None, None),
    }
    # Before the change every host had 6.4.2 (the preflight's reading): the rollout's wins.
    preflight = {f"{h}.json": preflight_record(h, rocm_version="6.4.2") for h in hosts}
    write_fleet(tmp_path, reports=ready_reports(*hosts), rollout=rollouts, preflight=preflight)
    code, fleet, out = fleet_report(tmp_path, ",".join(hosts), capsys)
    assert code == 1
    found = hosts_by_name(fleet)
    assert (found["ws-01"]["state"], found["ws-01"]["versions"]["rocm"]) == ("ready", "7.1.0-20")
    assert found["ws-02"]["state"] == "release_differs"
    assert found["ws-02"]["reason"] == "installed 6.4.2, configured 7.1"
    assert found["ws-02"]["versions"]["rocm"] == "6.4.2"
    assert found["ws-03"]["reason"] == "installed no ROCm release, configured 7.1"
    assert found["ws-04"]["state"] == "ready" and found["ws-04"]["versions"]["rocm"] is None
    assert found["ws-02"]["rollout"]["rocm"] == {"installed": "6.4.2", "configured": "7.1"}
    assert re.search(r"ws-02 +RELEASE_DIFFERS .*installed 6\.4\.2, configured 7\.1", out), out
    jsonschema.validate(fleet, FLEET_SCHEMA)


def test_a_rollout_record_with_a_bad_release_entry_fails_that_host(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = rollout_record("ws-01", "ready", rocm={"installed": "7.1.0", "configured": "7.1"})
    bad["rocm"]["installed"] = 7.1
    write_fleet(tmp_path, reports=ready_reports("ws-01"), rollout={"ws-01.json": bad})
    _, fleet, _ = fleet_report(tmp_path, "ws-01", capsys)
    host = fleet["hosts"][0]
    assert host["state"] == "unreadable"
    assert "'rocm.installed' is number 7.1, expected string or null" in host["reason"]


def test_without_rollout_records_a_failed_report_fails_with_its_error(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    crashed = smoke_report("ws-01", passed=False, exit_code=3, checks=[])
    crashed["error"] = "t10k-images-idx3-ubyte: 1000 bytes, expected 7840016"
    write_fleet(tmp_path, reports={"ws-01.json": crashed})
    code, fleet, _ = fleet_report(tmp_path, "ws-01", capsys)
    assert code == 1
    assert fleet["hosts"][0]["reason"] == (
        "smoke job failed: t10k-images-idx3-ubyte: 1000 bytes, expected 7840016"
    )


def test_a_failed_preflight_explains_a_missing_report(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_fleet(
        tmp_path,
        preflight={"ws-01.json": preflight_record("ws-01", failed={"disk_space": "3 GiB free"})},
    )
    _, fleet, _ = fleet_report(tmp_path, "ws-01", capsys)
    host = fleet["hosts"][0]
    assert host["reason"] == "no report; preflight failed: disk_space"
    failing = [c for c in host["checks"] if c["status"] == "fail"]
    assert failing == [
        {"source": "preflight", "name": "disk_space", "status": "fail",
         "detail": "3 GiB free", "fix": None}
    ]  # fmt: skip


# --- drift -----------------------------------------------------------------------------------


def test_versions_that_differ_from_the_majority_are_flagged_not_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    hosts = ("ws-01", "ws-02", "ws-03", "ws-04")
    reports = {f"{h}.json": smoke_report(h, gpu="rx7900xtx") for h in hosts}
    reports["ws-02.json"]["torch_version"] = "2.8.0+rocm6.3"
    reports["ws-03.json"]["hip_version"] = "6.2.41133"
    preflight = {f"{h}.json": preflight_record(h) for h in hosts}
    preflight["ws-04.json"] = preflight_record("ws-04", rocm_version="6.4.2", kernel="6.12.9-amd64")
    write_fleet(tmp_path, reports=reports, preflight=preflight)
    code, fleet, out = fleet_report(tmp_path, ",".join(hosts), capsys)
    assert code == 0  # drift is a flag, not a failure
    drift = {name: host["drift"] for name, host in hosts_by_name(fleet).items()}
    assert drift["ws-01"] == []
    assert drift["ws-02"] == [
        {"field": "torch", "value": "2.8.0+rocm6.3", "majority": "2.9.1+rocm6.3"}
    ]
    assert drift["ws-03"] == [{"field": "hip", "value": "6.2.41133", "majority": "6.3.42131"}]
    assert drift["ws-04"] == [
        {"field": "rocm", "value": "6.4.2", "majority": "6.3.1"},
        {"field": "kernel", "value": "6.12.9-amd64", "majority": "6.1.0-28-amd64"},
    ]
    assert fleet["summary"]["drift"] == 3
    assert fleet["drift"]["rocm"] == {"majority": "6.3.1", "counts": {"6.3.1": 3, "6.4.2": 1}}
    assert "[DRIFT torch 2.8.0+rocm6.3]" in out


def test_a_tie_has_no_majority_and_flags_every_host(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    reports = {
        "a.json": smoke_report("a", torch_version="2.9.1+rocm6.3"),
        "b.json": smoke_report("b", torch_version="2.8.0+rocm6.3"),
    }
    write_fleet(tmp_path, reports=reports)
    _, fleet, _ = fleet_report(tmp_path, "a,b", capsys)
    assert fleet["drift"]["torch"]["majority"] is None
    for host in fleet["hosts"]:
        assert [d["majority"] for d in host["drift"]] == [None]


def test_missing_versions_are_not_drift(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """CPU runs have no HIP version, hosts without preflight records no ROCm or kernel."""
    reports = {
        "gpu.json": smoke_report("gpu", gpu="rx7900xtx", torch_version="2.13.0+cpu"),
        "cpu.json": smoke_report("cpu"),
    }
    write_fleet(tmp_path, reports=reports, preflight={"gpu.json": preflight_record("gpu")})
    _, fleet, _ = fleet_report(tmp_path, "gpu,cpu", capsys)
    assert all(host["drift"] == [] for host in fleet["hosts"])


# --- slow hosts ------------------------------------------------------------------------------


def speed_fleet(tmp_path: Path, speeds: dict[str, tuple[str, float]]) -> Path:
    """One report per host with its GPU model and samples/s."""
    reports = {
        f"{host}.json": smoke_report(host, gpu=gpu, speed=speed)
        for host, (gpu, speed) in speeds.items()
    }
    return write_fleet(tmp_path, reports=reports)


SPEEDS = {
    "rx-1": ("rx7900xtx", 100_000.0),
    "rx-2": ("rx7900xtx", 98_000.0),
    "rx-3": ("rx7900xtx", 102_000.0),
    "rx-4": ("rx7900xtx", 60_000.0),  # 0.61 x the median (98,000)
    "rx-5": ("rx7900xtx", 75_000.0),  # 0.76 x the median
    "mi-1": ("mi210", 20_000.0),  # alone with its model: never slow
}


def test_a_host_below_the_fraction_of_its_models_median_is_slow(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    speed_fleet(tmp_path, SPEEDS)
    code, fleet, out = fleet_report(tmp_path, ",".join(SPEEDS), capsys)
    assert code == 0  # slow is a flag, not a failure
    slow = {name: host["slow"] for name, host in hosts_by_name(fleet).items()}
    assert {name for name, flag in slow.items() if flag} == {"rx-4"}
    assert slow["rx-4"]["device_name"] == "AMD Radeon RX 7900 XTX"
    assert slow["rx-4"]["median"] == 98_000.0
    assert math.isclose(slow["rx-4"]["ratio"], 60_000 / 98_000)
    groups = {g["device_name"]: g for g in fleet["speed_groups"]}
    assert groups["AMD Instinct MI210"]["hosts"] == ["mi-1"]
    assert math.isclose(groups["AMD Radeon RX 7900 XTX"]["threshold"], 0.7 * 98_000)
    assert "rx-4  READY  [SLOW 0.61x median]" in out


def test_runs_with_more_processes_are_compared_among_themselves(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """samples/s sums the processes of a run: a 4-GPU run is no peer of 1-GPU runs."""
    speed_fleet(tmp_path, {"a": ("mi210", 60_000.0), "b": ("mi210", 61_000.0)})
    quads = {
        f"{host}.json": smoke_report(host, gpu="mi210", speed=speed, world_size=4)
        for host, speed in (("quad-1", 230_000.0), ("quad-2", 232_000.0))
    }
    write_fleet(tmp_path, reports=quads)
    _, fleet, _ = fleet_report(tmp_path, "a,b,quad-1,quad-2", capsys)
    # Together the median would be 145,500 and a and b below 0.7 of it.
    assert all(host["slow"] is None for host in fleet["hosts"])
    assert [(g["world_size"], g["hosts"]) for g in fleet["speed_groups"]] == [
        (1, ["a", "b"]), (4, ["quad-1", "quad-2"]),
    ]  # fmt: skip


def test_slow_fraction_moves_the_threshold(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    speed_fleet(tmp_path, SPEEDS)
    _, fleet, _ = fleet_report(tmp_path, ",".join(SPEEDS), capsys, "--slow-fraction", "0.8")
    assert {h["host"] for h in fleet["hosts"] if h["slow"]} == {"rx-4", "rx-5"}
    assert fleet["slow_fraction"] == 0.8
    _, fleet, _ = fleet_report(tmp_path, ",".join(SPEEDS), capsys, "--slow-fraction", "0.6")
    assert not any(h["slow"] for h in fleet["hosts"])  # 60,000 is above 0.6 x 98,000


def test_exactly_at_the_threshold_is_not_slow(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    speed_fleet(tmp_path, {"a": ("mi210", 1000.0), "b": ("mi210", 1000.0), "c": ("mi210", 700.0)})
    _, fleet, _ = fleet_report(tmp_path, "a,b,c", capsys)
    assert all(host["slow"] is None for host in fleet["hosts"])  # 700 is not below 0.7 x 1000


def test_a_group_of_one_is_never_slow(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    speed_fleet(tmp_path, {"fast": ("mi210", 90_000.0), "lone": ("rx7900xtx", 10.0)})
    _, fleet, _ = fleet_report(tmp_path, "fast,lone", capsys)
    assert all(host["slow"] is None for host in fleet["hosts"])


# --- schema ----------------------------------------------------------------------------------


def test_the_schema_is_valid_and_rejects_what_it_should(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    jsonschema.Draft202012Validator.check_schema(FLEET_SCHEMA)
    write_fleet(tmp_path, reports=ready_reports("a"))
    _, fleet, _ = fleet_report(tmp_path, "a,b", capsys)
    for bad in (
        {**fleet, "surprise": 1},
        {**fleet, "schema_version": 2},
        {**fleet, "hosts": [{**fleet["hosts"][0], "state": "fine"}]},
        {**fleet, "hosts": [{**fleet["hosts"][0], "ready": "yes"}]},
        {k: v for k, v in fleet.items() if k != "summary"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, FLEET_SCHEMA)


# --- malformed input -------------------------------------------------------------------------


def truncated() -> str:
    text = json.dumps(real_report(), indent=2)
    return text[: len(text) // 2]


def without(key: str) -> dict[str, Any]:
    report = smoke_report("web1")
    del report[key]
    return report


def contradicting() -> dict[str, Any]:
    report = smoke_report("web1")
    report["checks"][-1]["passed"] = False
    return report


def bad_doctor() -> dict[str, Any]:
    checks = [{"name": "render_group", "status": "meh", "saw": "", "fix": None, "evidence": []}]
    return schema2(smoke_report("web1"), doctor=doctor_document("web1", checks))


MALFORMED_REPORTS = {
    "truncated": (truncated(), "; the file is truncated"),
    "empty": ("", "unreadable report: web1.json: empty file"),
    "not UTF-8": (b"\xff\xfe{}", "unreadable report: web1.json: not UTF-8 text (byte 0)"),
    "NaN": (
        json.dumps(smoke_report("web1", samples_per_second=math.nan)),
        "not valid JSON: NaN is not a JSON number",
    ),
    "not an object": ("[1, 2]", "unreadable report: web1.json: the document is array"),
    "missing passed": (without("passed"), "unreadable report: web1.json: missing key 'passed'"),
    "missing checks": (without("checks"), "missing key 'checks'"),
    "wrong type": (
        smoke_report("web1", samples_per_second="fast"),
        "'samples_per_second' is string 'fast', expected number or null",
    ),
    "bool for a number": (
        smoke_report("web1", test_accuracy=True),
        "'test_accuracy' is boolean True, expected number or null",
    ),
    "unknown backend": (
        smoke_report("web1", backend="hip"),
        "'backend' is 'hip', expected one of 'rocm', 'cuda', 'cpu', null",
    ),
    "bad check": (
        smoke_report("web1", checks=[{"name": "numeric", "passed": "yes", "detail": ""}]),
        "'checks[0].passed' is string 'yes', expected boolean",
    ),
    "schema 5": (
        smoke_report("web1", schema_version=5),
        "schema_version 5: this rocmlab reads schema 1, 2, 3 and 4",
    ),
    "schema 2 without its keys": (
        smoke_report("web1", schema_version=2),
        "missing key 'doctor'",
    ),
    "bad embedded doctor": (
        bad_doctor(),
        "'doctor.checks[0].status' is 'meh', expected one of 'pass', 'warn', 'fail'",
    ),
    "contradicting itself": (
        contradicting(),
        "says passed but check accuracy failed: the report contradicts itself",
    ),
    "passed without checks": (
        smoke_report("web1", checks=[]),
        "says passed but it lists no checks: the report contradicts itself",
    ),
    # The accuracy check's own rule, test_accuracy >= min_accuracy, whatever the checks say.
    "passed below its own accuracy gate": (
        smoke_report("web1", test_accuracy=0.312, min_accuracy=0.94),
        "says passed but its test_accuracy 0.312 is below its own gate, min_accuracy 0.94: the "
        "report contradicts itself",
    ),
    "passed without an accuracy": (
        smoke_report("web1", test_accuracy=None),
        "says passed but it has no test_accuracy and min_accuracy to judge it by",
    ),
    "a choice of another type": (
        smoke_report("web1", backend=["rocm"]),
        "'backend' is ['rocm'], expected one of 'rocm', 'cuda', 'cpu', null",
    ),
}


@pytest.mark.parametrize("case", MALFORMED_REPORTS)
def test_a_malformed_report_fails_that_host_with_the_reason(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    content, reason = MALFORMED_REPORTS[case]
    write_fleet(tmp_path, reports={"web1.json": content, **ready_reports("web2")})
    code, fleet, out = fleet_report(tmp_path, "web1,web2", capsys)
    assert code == 1
    hosts = hosts_by_name(fleet)
    assert hosts["web1"]["state"] == "unreadable"
    assert reason in hosts["web1"]["reason"]
    assert hosts["web1"]["reason"].startswith("unreadable report: web1.json: ")
    assert hosts["web2"]["ready"] is True  # the others are judged as usual
    assert "web1  UNREADABLE  unreadable report: web1.json" in out


def test_a_report_at_its_own_accuracy_gate_is_ready_and_one_below_it_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Each report is judged against the gate it records (min_accuracy), not another host's."""
    write_fleet(
        tmp_path,
        reports={
            "web1.json": smoke_report("web1", test_accuracy=0.94, min_accuracy=0.94),
            "web2.json": smoke_report("web2", test_accuracy=0.9, min_accuracy=0.85),
            "web3.json": smoke_report("web3", test_accuracy=0.9, min_accuracy=0.9001),
        },
    )
    code, fleet, out = fleet_report(tmp_path, "web1,web2,web3", capsys)
    hosts = hosts_by_name(fleet)
    assert code == 1 and hosts["web1"]["ready"] and hosts["web2"]["ready"]
    assert hosts["web3"]["state"] == "unreadable"
    assert (
        "web3  UNREADABLE  unreadable report: web3.json: says passed but its test_accuracy" in out
    )


ODD_VALUES = (None, "x", 1, 1.5, True, [], {}, [{}], {"a": None})


def variants(doc: dict[str, Any]) -> list[Any]:
    """``doc`` with each key, and each key of its objects and of its arrays' first object,
    deleted or replaced by each of ODD_VALUES; and its JSON text cut at 25 places."""
    out: list[Any] = []
    paths: list[tuple[Any, ...]] = [()]
    for key, value in doc.items():
        if isinstance(value, dict):
            paths.append((key,))
        if isinstance(value, list) and value and isinstance(value[0], dict):
            paths.append((key, 0))
    for path in paths:
        target = doc
        for step in path:
            target = target[step]
        for key in list(target):
            for replacement in (*ODD_VALUES, "<delete>"):
                changed = copy.deepcopy(doc)
                inner = changed
                for step in path:
                    inner = inner[step]
                if replacement == "<delete>":
                    del inner[key]
                else:
                    inner[key] = replacement
                out.append(changed)
    text = json.dumps(doc)
    out += [text[: len(text) * n // 26] for n in range(1, 26)]
    return out


def test_no_variation_of_the_records_crashes_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Every key of a schema-2 report (doctor included), a preflight and a rollout record
    deleted or given another type, and every record cut short: each host is judged, none
    crashes the run, and a host is only ready when its records are whole and passed."""
    doctor = doctor_document("h", DOCTOR_CHECKS[4:])
    kinds = {
        "reports": schema2(smoke_report("h"), doctor=doctor, amp_speedup=1.5,
                           techniques={"amp": (True, "ok")}),
        "preflight": preflight_record("h"),
        "rollout": rollout_record("h", "ready"),
    }  # fmt: skip
    hosts: list[str] = []
    for kind, doc in kinds.items():
        for index, variant in enumerate(variants(doc)):
            host = f"{kind}-{index}"
            hosts.append(host)
            if isinstance(variant, dict) and "host" in variant and variant["host"] == "h":
                variant["host"] = host
            records = {"reports": {f"{host}.json": smoke_report(host)}} if kind != "reports" else {}
            records.setdefault(kind, {})[f"{host}.json"] = variant
            write_fleet(tmp_path, **records)
    code, fleet, _ = fleet_report(tmp_path, ",".join(hosts), capsys)
    assert code == 1 and len(fleet["hosts"]) == len(hosts) > 500
    for host in fleet["hosts"]:
        assert host["ready"] or host["reason"], host["host"]
        if host["ready"]:
            assert host["problems"] == [] and host["smoke_passed"] is True


def test_a_report_for_an_undeclared_host_is_listed_not_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_fleet(
        tmp_path,
        reports=ready_reports("web1", "web9"),
        rollout={"web8.json": rollout_record("web8", "ready")},
    )
    code, fleet, out = fleet_report(tmp_path, "web1", capsys)
    assert code == 0
    assert fleet["summary"]["declared"] == 1 and fleet["summary"]["undeclared"] == 2
    assert fleet["undeclared"] == [
        {"file": "web9.json", "reason": "a report for a host not in the inventory: not counted"},
        {
            "file": "fleet/rollout/web8.json",
            "reason": "a rollout record for a host not in the inventory: not counted",
        },
    ]
    assert "undeclared: web9.json" in out


def test_two_reports_for_one_host_fail_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    reports = {"web1.json": smoke_report("web1"), "web1.JSON": smoke_report("web1-old")}
    write_fleet(tmp_path, reports=reports)
    code, fleet, _ = fleet_report(tmp_path, "web1", capsys)
    assert code == 1
    assert fleet["hosts"][0]["reason"] == (
        "two reports for one host: web1.json, web1.JSON (remove the stale one)"
    )
    assert fleet["undeclared"] == []


def test_a_report_named_in_another_case_is_not_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_fleet(tmp_path, reports={"Web1.json": smoke_report("web1")})
    _, fleet, _ = fleet_report(tmp_path, "web1", capsys)
    assert fleet["hosts"][0]["reason"] == (
        "report named Web1.json, expected web1.json (inventory host names are case-sensitive)"
    )


def test_hosts_that_differ_only_in_case_each_have_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_fleet(tmp_path, reports=ready_reports("web1", "WEB1"))
    code, fleet, _ = fleet_report(tmp_path, "web1,WEB1", capsys)
    assert code == 0
    assert {h["machine"] for h in fleet["hosts"]} == {"web1", "WEB1"}


def test_the_same_passing_report_for_two_hosts_fails_both(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The smoke report's own host (the machine's hostname) may differ from the inventory name;
    a report byte-for-byte equal to another host's is a copy, not a run."""
    report = smoke_report("lab-pc")
    write_fleet(tmp_path, reports={"web1.json": report, "web2.json": report})
    code, fleet, _ = fleet_report(tmp_path, "web1,web2", capsys)
    assert code == 1
    hosts = hosts_by_name(fleet)
    assert hosts["web1"]["reason"] == (
        "report web1.json is identical to web2.json: a copied report, not a run on this host"
    )
    assert hosts["web2"]["state"] == "unreadable"


@pytest.mark.parametrize(
    ("kind", "content", "reason"),
    [
        ("rollout", '{"schema_version": 1, "host": "web1", "st', "unreadable rollout record: "
         "fleet/rollout/web1.json: not valid JSON"),
        ("rollout", rollout_record("web2", "ready"),
         "rollout record fleet/rollout/web1.json is for host 'web2', not 'web1'"),
        ("rollout", rollout_record("web1", "done"), "'state' is 'done', expected one of"),
        ("rollout", {**rollout_record("web1", "ready"), "batch": "2"},
         "'batch' is string '2', expected integer or null"),
        ("preflight", {**preflight_record("web1"), "facts": None},
         "unreadable preflight record: fleet/preflight/web1.json: 'facts' is null"),
        ("preflight", preflight_record("web2"),
         "preflight record fleet/preflight/web1.json is for host 'web2', not 'web1'"),
    ],
)  # fmt: skip
def test_a_malformed_rollout_or_preflight_record_fails_that_host(
    kind: str, content: Any, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_fleet(tmp_path, reports=ready_reports("web1"), **{kind: {"web1.json": content}})
    code, fleet, _ = fleet_report(tmp_path, "web1", capsys)
    assert code == 1
    assert fleet["hosts"][0]["state"] == "unreadable"
    assert reason in fleet["hosts"][0]["reason"]


def test_the_previous_run_outputs_are_not_records(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_fleet(tmp_path, reports=ready_reports("web1"))
    fleet_report(tmp_path, "web1", capsys)
    code, fleet, _ = fleet_report(tmp_path, "web1", capsys)
    assert code == 0 and fleet["undeclared"] == []


# --- schema 2: doctor, techniques, profile; the fleet-wide records -----------------------------

DOCTOR_CHECKS = [
    {"name": "render_group", "status": "fail",
     "saw": "researcher is not in the render group",
     "fix": "set user_groups_users: [researcher] and log in again", "evidence": []},
    {"name": "kernel_log", "status": "warn", "saw": "1 amdgpu line",
     "fix": None, "evidence": ["amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 timeout"]},
    {"name": "secure_boot", "status": "skip", "saw": "no EFI", "fix": None, "evidence": []},
    {"name": "opencl", "status": "error", "saw": "FileNotFoundError: clinfo",
     "fix": None, "evidence": []},
    {"name": "gfx_target", "status": "pass", "saw": "gfx1100 in the wheel's arches",
     "fix": None, "evidence": []},
]  # fmt: skip


def schema2_fleet(tmp_path: Path) -> Path:
    """web1: schema 2 passing with techniques and AMP; web2: doctor failed, training stopped;
    web3: a schema 1 report; plus a cache and cluster record and web1's profile trace."""
    web1 = schema2(
        smoke_report("web1", gpu="rx7900xtx"),
        doctor=doctor_document("web1", DOCTOR_CHECKS[4:]),
        techniques={
            "accumulation": (True, "4 micro-batches agree with one batch of 512: max diff 2e-7"),
            "checkpoint": (True, "gradients agree: max diff 0"),
            "amp": (True, "fp32 1.90 s, bf16 1.02 s per epoch; accuracy 0.961 / 0.960"),
            "profile": (True, "12 steps profiled, trace web1.trace.json"),
        },
        amp_speedup=1.86,
        profile={"trace": "web1.trace.json", "top_kernels": []},
    )
    web2 = schema2(
        smoke_report("web2", gpu="rx7900xtx", passed=False, exit_code=1, checks=[]),
        doctor=doctor_document("web2", DOCTOR_CHECKS),
    )
    web2["error"] = "doctor failed: render_group"
    cache = cache_record(apt=(2_500_000_000, 40_000_000_000), wheels=(4_100_000_000, 6_100_000_000))
    cluster = {"schema_version": 1, "verdict": "fail", "backend": "gloo", "world_size": 3,
               "error": "rank 2 (web3) never joined within 120 s"}  # fmt: skip
    return write_fleet(
        tmp_path,
        reports={"web1.json": web1, "web2.json": web2, **ready_reports("web3")},
        extra={
            "web1.trace.json": {"traceEvents": []},
            "fleet/cache.json": cache,
            "fleet/cluster.json": cluster,
        },
    )


def test_schema_2_reports_show_doctor_techniques_and_amp(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    schema2_fleet(tmp_path)
    code, fleet, _ = fleet_report(tmp_path, "web1,web2,web3", capsys)
    assert code == 1
    hosts = hosts_by_name(fleet)
    assert hosts["web1"]["ready"] and hosts["web3"]["ready"]
    assert hosts["web1"]["report_schema"] == 2 and hosts["web3"]["report_schema"] == 1
    assert hosts["web1"]["doctor"] == {"verdict": "pass"}
    assert [(t["name"], t["passed"]) for t in hosts["web1"]["techniques"]] == [
        ("accumulation", True), ("checkpoint", True), ("amp", True), ("profile", True),
    ]  # fmt: skip
    assert hosts["web1"]["amp_speedup"] == 1.86
    assert fleet["undeclared"] == []  # web1.trace.json is web1's profile, not a host
    web2 = hosts["web2"]
    assert web2["reason"] == "smoke job failed: doctor failed: render_group"
    assert web2["doctor"] == {"verdict": "fail"}
    render = next(c for c in web2["checks"] if c["name"] == "render_group")
    assert render["fix"] == "set user_groups_users: [researcher] and log in again"
    assert fleet["cache"]["kinds"]["apt"]["served_bytes"] == 40_000_000_000
    assert fleet["cluster"]["verdict"] == "fail"


def test_unreadable_fleet_wide_records_are_reported_not_fatal(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_fleet(
        tmp_path,
        reports=ready_reports("web1"),
        extra={"fleet/cache.json": '{"schema_version": 1, "cache_', "fleet/cluster.json": "{}"},
    )
    code, fleet, out = fleet_report(tmp_path, "web1", capsys)
    assert code == 0  # they are about the fleet, not a declared host
    assert "the file is truncated" in fleet["cache"]["problem"]
    assert fleet["cluster"]["problem"] == (
        "has neither 'verdict' (a string) nor 'passed' (a boolean)"
    )
    assert "cache: unreadable fleet/cache.json" in out


# --- outputs ---------------------------------------------------------------------------------


def test_junit_has_a_case_per_host_and_check(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    schema2_fleet(tmp_path)
    fleet_report(tmp_path, "web1,web2,web3,web4", capsys)
    fleet, _, junit = read_outputs(tmp_path)
    root = ET.fromstring(junit.encode())
    assert root.tag == "testsuites"
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    assert list(suites) == ["web1", "web2", "web3", "web4", "fleet"]
    for host in fleet["hosts"]:
        cases = suites[host["host"]].findall("testcase")
        assert len(cases) == 1 + len(host["checks"])
        assert cases[0].get("name") == "ready"
        assert (cases[0].find("failure") is None) == host["ready"]
    web2 = {c.get("name"): c for c in suites["web2"].findall("testcase")}
    failure = web2["doctor.render_group"].find("failure")
    assert failure is not None
    assert failure.get("message") == "researcher is not in the render group"
    assert "fix: set user_groups_users: [researcher]" in (failure.text or "")
    assert web2["doctor.opencl"].find("error") is not None
    assert web2["doctor.secure_boot"].find("skipped") is not None
    assert "WARN: 1 amdgpu line" in (web2["doctor.kernel_log"].findtext("system-out") or "")
    missing = suites["web4"].find("testcase/failure")
    assert missing is not None and missing.get("message") == "no_report: no report"
    cluster = suites["fleet"].find("testcase/failure")
    assert cluster is not None and "rank 2 (web3) never joined" in (cluster.get("message") or "")
    failures = sum(s.find("failure") is not None for s in root.iter("testcase"))
    assert root.get("failures") == str(failures)
    assert root.get("tests") == str(len(list(root.iter("testcase"))))


def test_junit_survives_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    report = failed_check(smoke_report("web1"), "accuracy", "kernel said \x1b[31mno\x1b[0m\x00")
    write_fleet(tmp_path, reports={"web1.json": report})
    fleet_report(tmp_path, "web1", capsys)
    _, _, junit = read_outputs(tmp_path)
    root = ET.fromstring(junit.encode())
    failure = root.find("testsuite/testcase[@name='smoke.accuracy']/failure")
    assert failure is not None
    # XML 1.0 cannot carry ESC or NUL: they are written as visible escapes.
    assert failure.get("message") == "kernel said \\x1b[31mno\\x1b[0m\\x00"


def test_html_is_self_contained_with_every_host_and_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    schema2_fleet(tmp_path)
    write_fleet(tmp_path, reports={"web5.json": smoke_report("web5", gpu="rx7900xtx", speed=10.0)})
    fleet_report(tmp_path, "web1,web2,web3,web4,web5", capsys)
    _, page, _ = read_outputs(tmp_path)
    lowered = page.lower()
    for external in ("http://", "https://", "<link", "<script", "src=", "url(", "@import"):
        assert external not in lowered, external
    rows = re.findall(r'<tr class="host \w+" data-host="([^"]+)" data-state="(\w+)"', page)
    assert rows == [
        ("web1", "ready"), ("web2", "smoke_failed"), ("web3", "ready"), ("web4", "no_report"),
        ("web5", "ready"),
    ]  # fmt: skip
    assert 'data-host="web2" data-state="smoke_failed" data-ready="false"' in page
    assert 'data-host="web5" data-state="ready" data-ready="true" data-flags="slow"' in page
    for text in (
        "NOT READY: 3 of 5 hosts ready",
        "set user_groups_users: [researcher] and log in again",  # a failed check's fix
        "AMP speed-up 1.86x",
        "accumulation",
        "Cluster check",
        "rank 2 (web3) never joined within 120 s",
        "Lab cache",
        "37.3 GiB",  # 40,000,000,000 bytes served
        "<svg",
        "AMD Radeon RX 7900 XTX: 3 host(s)",
    ):
        assert text in page, text


def test_html_escapes_what_the_records_say(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_fleet(
        tmp_path,
        rollout={"web1.json": rollout_record("web1", "failed", '<script>alert("x")</script>')},
    )
    fleet_report(tmp_path, "web1", capsys)
    _, page, _ = read_outputs(tmp_path)
    assert "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


def test_stdout_has_one_line_per_host(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    schema2_fleet(tmp_path)
    out = fleet_report(tmp_path, "web1,web2,web3,web4", capsys)[2]
    lines = out.splitlines()
    assert lines[0].split() == ["HOST", "STATE", "DETAIL"]
    assert [line.split()[:2] for line in lines[1:5]] == [
        ["web1", "READY"], ["web2", "SMOKE_FAILED"], ["web3", "READY"], ["web4", "NO_REPORT"],
    ]  # fmt: skip
    assert "accuracy 0.9538" in lines[3]
    assert "cluster check: fail" in out
    assert lines[-2].startswith("fleet: 2 of 4 hosts ready")
    assert lines[-1].startswith("wrote ")


# --- usage and exit codes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "one of the arguments --inventory --hosts is required"),
        (["--hosts", "a", "--inventory", "x"], "argument --inventory: not allowed with argument"),
        (["--hosts", "a", "--slow-fraction", "0"],
         "argument --slow-fraction: '0' is out of range: expected a fraction in (0, 1]"),
        (["--hosts", "a", "--slow-fraction", "-0.5"], "argument --slow-fraction: '-0.5' is out of"),
        (["--hosts", "a", "--slow-fraction", "1.01"], "argument --slow-fraction: '1.01' is out of"),
        (["--hosts", "a", "--slow-fraction", "nan"], "argument --slow-fraction: 'nan' is out of"),
        (["--hosts", "a", "--slow-fraction", "most"],
         "argument --slow-fraction: 'most' is not a fraction in (0, 1]"),
        (["--hosts", "a,,b"], "--hosts 'a,,b': an empty host name"),
        (["--hosts", "a,../b"], "host name '../b' cannot name a report file"),
        (["--hosts", "ws-1,fleet"], "host 'fleet' cannot be reported"),
        (["--inventory", "/nonexistent/hosts.yml"], "--inventory /nonexistent/hosts.yml: no such"),
    ],
)  # fmt: skip
def test_bad_usage_exits_2_naming_what_is_wrong(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["fleet-report", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "fleet.json").exists()


def test_slow_fraction_1_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_fleet(tmp_path, reports=ready_reports("a"))
    assert fleet_report(tmp_path, "a", capsys, "--slow-fraction", "1")[0] == 0


def test_a_missing_reports_dir_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["fleet-report", str(tmp_path / "nope"), "--hosts", "a"]) == 2
    assert "REPORTS_DIR" in capsys.readouterr().err


def test_outputs_that_cannot_be_written_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "fleet.json").mkdir()
    assert main(["fleet-report", str(tmp_path), "--hosts", "a"]) == 2  # before the report is made
    assert capsys.readouterr() == (
        "",
        f"rocmlab: error: REPORTS_DIR {str(tmp_path)!r}: fleet.json: a directory, which the "
        "report cannot replace; nothing was written\n",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.json"]  # nothing else written


def test_exit_codes_of_the_process_without_torch(tmp_path: Path) -> None:
    """Through a real process where ``import torch`` fails, as on a controller without it."""
    write_fleet(tmp_path, reports=ready_reports("a"))
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from rocmlab.cli import main\n"
        "sys.exit(main(sys.argv[1:]))"
    )
    for hosts, expected in (("a", 0), ("a,b", 1), ("a,", 2)):
        result = subprocess.run(
            [sys.executable, "-c", code, "fleet-report", str(tmp_path), "--hosts", hosts],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert result.returncode == expected, result.stderr
