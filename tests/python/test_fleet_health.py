"""``rocmlab fleet-report`` with the hosts' health reports (REPORTS_DIR/health/<host>.json):
the verdict and its age in the table, the HTML, fleet.json and the JUnit XML; a FAIL verdict
makes the host not ready with the check and its fix; a missing or stale report fails only with
--health-max-age; a health report that cannot be used makes the host unreadable, as any record.
The health reports are real: ``rocmlab health --json`` run on the doctor's fixture machines."""

from __future__ import annotations

import copy
import json
import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from fleet_testutil import fleet_report, ready_reports, write_fleet
from health_testutil import health, machine

from rocmlab.cli import main
from rocmlab.health.report import TIME_FORMAT


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """A passing and a failing health report, each from a run on a fixture machine."""
    tmp = tmp_path_factory.mktemp("health")
    healthy = machine(tmp / "healthy", "radeon-healthy", ("provisioned",))
    code, out, passing = health(healthy, "--account", "alice")
    assert code == 0 and passing is not None, out
    broken = machine(tmp / "broken", "instinct-healthy", ("mi210-counters",),
                     kernel_log="doctor/kernel-logs/radeon-7900xtx-boot.log")  # fmt: skip
    health(broken)
    (broken.ctx.sysfs_root / "bus/pci/devices/0000:01:00.0/ras/umc_err_count").write_text(
        "ue: 2\nce: 0\nde: 0\n"
    )
    code, out, failing = health(broken)
    assert code == 1 and failing is not None, out
    return {"pass": passing, "fail": failing}


def aged(doc: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The report as if it had finished ``seconds`` ago."""
    doc = copy.deepcopy(doc)
    doc["finished"] = time.strftime(TIME_FORMAT, time.gmtime(time.time() - seconds))
    doc["started"] = doc["finished"]
    return doc


def hosts(fleet: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {host["host"]: host for host in fleet["hosts"]}


def test_verdict_and_age_shown_and_a_fail_makes_the_host_not_ready(
    reports: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fleet(
        tmp_path,
        reports=ready_reports("web1", "web2", "web3"),
        extra={
            "health/web1.json": aged(reports["pass"], 240),
            "health/web2.json": aged(reports["fail"], 3 * 3600),
        },
    )
    code, fleet, out = fleet_report(tmp_path, "web1,web2,web3", capsys)
    assert code == 1
    by_name = hosts(fleet)
    web1, web2, web3 = by_name["web1"], by_name["web2"], by_name["web3"]
    assert web1["ready"] and web1["health"]["verdict"] == "pass"
    assert 240 <= web1["health"]["age_seconds"] < 300 and web1["health"]["tier"] == 0
    assert web1["files"]["health"] == "health/web1.json"
    assert not web2["ready"] and web2["state"] == "health_failed"
    assert web2["reason"].startswith("health: ras_errors: uncorrectable errors: drain the node")
    assert web2["reason"].endswith("(tier 0, 3h ago)")
    assert [f["name"] for f in web2["health"]["failed"]] == ["ras_errors"]
    assert {"source": "health", "name": "ras_errors", "status": "fail"}.items() <= next(
        c for c in web2["checks"] if c["source"] == "health" and c["name"] == "ras_errors"
    ).items()
    assert web3["ready"] and web3["health"] is None  # no report: shown, not failing
    lines = out.splitlines()
    assert lines[0].split() == ["HOST", "STATE", "HEALTH", "DETAIL"]
    assert lines[1].split()[:4] == ["web1", "READY", "PASS", "4m"]
    assert lines[2].split()[:4] == ["web2", "HEALTH_FAILED", "FAIL", "3h"]
    assert lines[3].split()[:3] == ["web3", "READY", "\u2014"]


def test_html_and_junit_carry_the_health_verdict(
    reports: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fleet(
        tmp_path,
        reports=ready_reports("web1", "web2"),
        extra={"health/web1.json": reports["pass"], "health/web2.json": reports["fail"]},
    )
    fleet_report(tmp_path, "web1,web2", capsys)
    page = (tmp_path / "fleet.html").read_text()
    assert '<th scope="col">Health</th>' in page
    assert 'data-host="web2" data-state="health_failed" data-ready="false"' in page
    assert '<span class="badge bad">FAIL</span><div class="sub"' in page
    assert "health/ras_errors" in page
    root = ET.fromstring((tmp_path / "fleet.junit.xml").read_bytes())
    suite = next(s for s in root.iter("testsuite") if s.get("name") == "web2")
    ready = next(c for c in suite.iter("testcase") if c.get("name") == "ready")
    assert ready.find("failure").get("message").startswith("health_failed: health: ras_errors")
    case = next(c for c in suite.iter("testcase") if c.get("name") == "health.ras_errors")
    assert "fix: uncorrectable errors" in case.find("failure").text
    passing = next(s for s in root.iter("testsuite") if s.get("name") == "web1")
    assert passing.get("failures") == "0"


def test_a_maximum_age_fails_missing_and_stale_reports(
    reports: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fleet(
        tmp_path,
        reports=ready_reports("web1", "web2", "web3"),
        extra={
            "health/web1.json": aged(reports["pass"], 600),
            "health/web2.json": aged(reports["pass"], 3 * 3600),
        },
    )
    code, fleet, _ = fleet_report(tmp_path, "web1,web2,web3", capsys, "--health-max-age", "2h")
    assert code == 1 and fleet["health_max_age_seconds"] == 7200
    by_name = hosts(fleet)
    assert by_name["web1"]["ready"]
    assert by_name["web2"]["state"] == "health_stale"
    assert by_name["web2"]["reason"] == (
        "health: the last report is 3h old, older than --health-max-age 2h"
    )
    assert by_name["web3"]["state"] == "health_missing"
    assert by_name["web3"]["reason"] == "health: no report (--health-max-age 2h)"
    assert "health reports older than 2h fail the host" in (tmp_path / "fleet.html").read_text()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.update(verdict="pass"),
         "says verdict pass but check ras_errors failed: the report contradicts itself"),
        (lambda d: d.update(finished="yesterday"),
         "'finished' is 'yesterday', expected a UTC time such as 2026-01-30T08:00:00Z"),
        (lambda d: d.update(tier=7), "'tier' is 7, expected one of 0, 1, 2"),
        (lambda d: d.update(tool="rocmlab doctor"),
         "'tool' is 'rocmlab doctor', expected one of 'rocmlab health'"),
        (lambda d: d["checks"][0].update(status="broken"), "'checks[0].status' is 'broken'"),
    ],
)  # fmt: skip
def test_a_health_report_that_cannot_be_used_makes_the_host_unreadable(
    change: Any,
    reason: str,
    reports: dict[str, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = copy.deepcopy(reports["fail"])
    change(doc)
    write_fleet(tmp_path, reports=ready_reports("web1"), extra={"health/web1.json": doc})
    code, fleet, _ = fleet_report(tmp_path, "web1", capsys)
    host = hosts(fleet)["web1"]
    assert code == 1 and host["state"] == "unreadable"
    assert host["reason"].startswith("unreadable health report: health/web1.json: ")
    assert reason in host["reason"]


def test_health_reports_are_read_as_every_record_is(
    reports: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fleet(
        tmp_path,
        reports=ready_reports("web1", "web2"),
        extra={"health/old-host.json": reports["pass"]},
    )
    (tmp_path / "health" / "web1.json").symlink_to(tmp_path / "health" / "old-host.json")
    os.mkfifo(tmp_path / "health" / "web2.json")
    code, fleet, _ = fleet_report(tmp_path, "web1,web2", capsys)
    by_name = hosts(fleet)
    assert code == 1
    assert "a symbolic link, not followed" in by_name["web1"]["reason"]
    assert "a FIFO (named pipe), not a regular file" in by_name["web2"]["reason"]
    assert {"file": "health/old-host.json",
            "reason": "a health report for a host not in the inventory: not counted"} in fleet[
        "undeclared"]  # fmt: skip


def test_a_health_directory_that_is_a_link_stops_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fleet(tmp_path, reports=ready_reports("web1"))
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (tmp_path / "health").symlink_to(elsewhere)
    assert main(["fleet-report", str(tmp_path), "--hosts", "web1"]) == 2
    assert "health is a symbolic link" in capsys.readouterr().err
    assert not (tmp_path / "fleet.json").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [("soon", "'soon' is not an age"), ("0", "'0' is out of range"), ("400d", "out of range")],
)
def test_bad_maximum_ages_exit_2(
    value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fleet-report", str(tmp_path), "--hosts", "a", "--health-max-age", value]) == 2
    assert message in capsys.readouterr().err


def test_without_health_reports_the_outputs_are_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fleet(tmp_path, reports=ready_reports("web1"))
    code, fleet, out = fleet_report(tmp_path, "web1", capsys)
    assert code == 0 and fleet["health_max_age_seconds"] is None
    assert hosts(fleet)["web1"]["health"] is None
    assert out.splitlines()[0].split() == ["HOST", "STATE", "DETAIL"]
    assert ">Health<" not in (tmp_path / "fleet.html").read_text()
    assert json.loads((tmp_path / "fleet.json").read_text())["hosts"][0]["files"]["health"] is None
