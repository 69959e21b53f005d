"""``rocmlab fleet-report`` with the hosts' health reports (root's tier 0 in
REPORTS_DIR/health/<host>.json, the smoke account's tier 2 in health/tier2/<host>.json): the
verdict and its age in the table, the HTML, fleet.json and the JUnit XML; a FAIL verdict of
either makes the host not ready with the check and its fix, and the account's report never
hides root's; a missing or stale report fails only with --health-max-age; a health report that
cannot be used makes the host unreadable, as any record. The health reports are real: ``rocmlab
health --json`` run on the doctor's fixture machines (tier 0; a tier-2 report here is such a
report relabelled tier 2: the fleet report reads the same fields of both)."""

from __future__ import annotations

import base64
import copy
import importlib.util
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
from rocmlab.fleet import records
from rocmlab.health.report import TIME_FORMAT

REPO = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location(
    "health_timer_filters", REPO / "plugins" / "filter" / "health_timer.py"
)
assert _SPEC is not None and _SPEC.loader is not None
health_timer = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(health_timer)


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


def tier2(doc: dict[str, Any]) -> dict[str, Any]:
    """The report as the smoke account's tier-2 run would label it."""
    return {**copy.deepcopy(doc), "tier": 2}


def collect(reports_dir: Path, host: str, root: Any = None, account: Any = None) -> dict[str, Any]:
    """What roles/smoke_test/tasks/health-collect.yml does with a host's two reports (None: the
    host has none; a dict is its JSON, bytes as they are): the results its read loop registers,
    each found one kept where its item says, one not found removed; returns health_report_pick's
    answer, the line the play prints."""
    results = []
    for tier, doc, keep in (
        (0, root, f"health/{host}.json"),
        (2, account, f"health/tier2/{host}.json"),
    ):
        item = {"tier": tier, "keep": keep}
        path = reports_dir / keep
        if doc is None:
            results.append({"found": False, "content": "", "item": item})
            path.unlink(missing_ok=True)
            continue
        raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        content = base64.b64encode(raw).decode()
        results.append({"found": True, "content": content, "item": item})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(content))
    return health_timer.health_report_pick(results)


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


@pytest.mark.parametrize("linked", ["health", "health/tier2"])
def test_a_health_directory_that_is_a_link_stops_the_report(
    linked: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fleet(tmp_path, reports=ready_reports("web1"))
    (tmp_path / linked).parent.mkdir(exist_ok=True)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (tmp_path / linked).symlink_to(elsewhere)
    assert main(["fleet-report", str(tmp_path), "--hosts", "web1"]) == 2
    assert f"{linked} is a symbolic link" in capsys.readouterr().err
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


def test_the_accounts_report_adds_a_fail_and_never_hides_roots(
    reports: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root's FAIL 3h ago stands beside the account's later PASS; the account's FAIL stands
    beside root's later PASS; two FAILs are both named; the table shows both reports."""
    write_fleet(tmp_path, reports=ready_reports("web1", "web2", "web3"))
    collect(tmp_path, "web1", aged(reports["fail"], 3 * 3600), tier2(aged(reports["pass"], 60)))
    collect(tmp_path, "web2", aged(reports["pass"], 60), tier2(aged(reports["fail"], 3 * 3600)))
    collect(tmp_path, "web3", aged(reports["fail"], 60), tier2(aged(reports["fail"], 7200)))
    code, fleet, out = fleet_report(tmp_path, "web1,web2,web3", capsys)
    by_name = hosts(fleet)
    assert code == 1 and fleet["summary"]["ready"] == 0
    web1, web2, web3 = by_name["web1"], by_name["web2"], by_name["web3"]
    assert web1["state"] == "health_failed" and web1["health"]["tier"] == 0
    assert web1["reason"].startswith("health: ras_errors: ") and web1["reason"].endswith(
        "(tier 0, 3h ago)"
    )
    assert [(r["tier"], r["verdict"]) for r in web1["health"]["reports"]] == [
        (0, "fail"),
        (2, "pass"),
    ]
    assert web1["files"]["health_tier2"] == "health/tier2/web1.json"
    assert web2["state"] == "health_failed" and web2["health"]["tier"] == 2
    assert web2["reason"].endswith("(tier 2, 3h ago)")
    assert web3["reason"].count("ras_errors") == 2 and "; also ras_errors" in web3["reason"]
    lines = {line.split()[0]: line for line in out.splitlines()[1:4]}
    assert "FAIL 3h (tier 2: PASS 1m)" in lines["web1"]
    assert "FAIL 3h (tier 0: PASS 1m)" in lines["web2"]
    page = (tmp_path / "fleet.html").read_text()
    assert "FAIL, tier 0, 3h ago" in page and "PASS, tier 2, 1m ago" in page
    sources = {c["source"]: c["status"] for c in web2["checks"] if c["name"] == "ras_errors"}
    assert sources.keys() == {"health", "health_tier2"} and sources["health_tier2"] == "fail"


@pytest.mark.parametrize(
    ("account", "why"),
    [
        # A report finished in 2099: it would outlast every tier-0 report after it.
        (
            lambda doc: tier2({**doc, "finished": "2099-12-31T00:00:00Z"}),
            "'finished' is '2099-12-31T00:00:00Z', later than now (",
        ),
        # A pass without a single check: it proves nothing.
        (
            lambda doc: tier2({**doc, "verdict": "pass", "checks": []}),
            "says verdict pass but it lists no checks: it proves nothing",
        ),
        # A tier-0 report in the account's file: the account's word all the same.
        (lambda doc: doc, "'tier' is 0, and this file holds only a tier 2 report"),
    ],
)
def test_a_tier_2_report_from_the_future_or_without_checks_hides_no_tier_0_fail(
    account: Any,
    why: str,
    reports: dict[str, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Through the controller's path (the role's read results, health_report_pick, the copies
    it keeps) to the fleet report: root's tier-0 FAIL is the host's verdict in the play's line
    and in every output, and the account's report is named unusable with the reason."""
    write_fleet(tmp_path, reports=ready_reports("web1"))
    pick = collect(
        tmp_path, "web1", aged(reports["fail"], 3600), account(aged(reports["pass"], 60))
    )
    assert (pick["tier"], pick["verdict"]) == (0, "fail")
    assert "the tier-2 report is unusable" in pick["why"]
    code, fleet, out = fleet_report(tmp_path, "web1", capsys)
    host = hosts(fleet)["web1"]
    assert code == 1 and not host["ready"] and host["state"] == "unreadable"
    assert host["reason"].startswith("unreadable tier-2 health report: health/tier2/web1.json: ")
    assert why in host["reason"]
    assert "; also health: ras_errors: " in host["reason"] and "(tier 0, 1h ago)" in host["reason"]
    assert host["health"]["verdict"] == "fail" and host["health"]["tier"] == 0
    assert "FAIL 1h" in next(line for line in out.splitlines() if line.startswith("web1"))
    assert "PASS 0s" not in out


def test_a_report_within_the_clock_skew_is_taken_and_one_beyond_refused(
    reports: dict[str, dict[str, Any]],
) -> None:
    now = time.time()
    for ahead, taken in ((records.CLOCK_SKEW, True), (records.CLOCK_SKEW + 60, False)):
        doc = aged(reports["pass"], -ahead)
        try:
            records.read_health(tier2(doc), now=now, tiers=records.ACCOUNT_TIERS)
        except records.RecordError as exc:
            assert not taken and "later than now" in str(exc)
        else:
            assert taken
    assert health_timer.CLOCK_SKEW == records.CLOCK_SKEW


def test_the_play_and_the_fleet_report_stand_the_same_report(
    reports: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """health_report_pick (the line the play prints) and the fleet report (from the copies the
    controller keeps) choose the same report, for every pair of verdicts and ages."""
    kinds = {
        "pass": reports["pass"],
        "warn": {
            **reports["pass"],
            "verdict": "warn",
            "checks": [{**reports["pass"]["checks"][0], "status": "warn"}],
        },
        "fail": reports["fail"],
    }
    cases = [(None, None)]
    for root in (None, *kinds):
        for account in (None, *kinds):
            for root_age, account_age in ((60, 7200), (7200, 60)):
                cases.append(
                    (
                        root and aged(kinds[root], root_age),
                        account and tier2(aged(kinds[account], account_age)),
                    )
                )
    names = [f"h{index}" for index in range(len(cases))]
    write_fleet(tmp_path, reports=ready_reports(*names))
    said = {name: collect(tmp_path, name, *case) for name, case in zip(names, cases, strict=True)}
    _code, fleet, _out = fleet_report(tmp_path, ",".join(names), capsys)
    for name, host in hosts(fleet).items():
        health = host["health"] or {"tier": None, "verdict": None}
        assert (health["tier"], health["verdict"]) == (said[name]["tier"], said[name]["verdict"])
        assert host["ready"] == (said[name]["verdict"] in (None, "pass", "warn"))


def test_a_maximum_age_is_roots_the_accounts_daily_report_stands_in_for_none(
    reports: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fleet(tmp_path, reports=ready_reports("web1", "web2", "web3"))
    collect(tmp_path, "web1", None, tier2(aged(reports["pass"], 60)))
    collect(tmp_path, "web2", aged(reports["pass"], 3 * 3600), tier2(aged(reports["pass"], 60)))
    collect(tmp_path, "web3", aged(reports["pass"], 60), tier2(aged(reports["pass"], 20 * 3600)))
    code, fleet, _ = fleet_report(tmp_path, "web1,web2,web3", capsys, "--health-max-age", "2h")
    by_name = hosts(fleet)
    assert code == 1
    assert by_name["web1"]["state"] == "health_missing"
    assert by_name["web1"]["reason"] == (
        "health: no report (--health-max-age 2h); the smoke account's tier 2 does not stand in "
        "for it"
    )
    assert by_name["web2"]["state"] == "health_stale"
    assert by_name["web3"]["ready"]  # tier 2 runs daily: its age is no staleness


def test_a_report_the_host_no_longer_has_is_removed_from_the_controller(
    reports: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fleet(tmp_path, reports=ready_reports("web1"))
    collect(tmp_path, "web1", aged(reports["pass"], 60), tier2(aged(reports["fail"], 60)))
    assert fleet_report(tmp_path, "web1", capsys)[0] == 1
    collect(tmp_path, "web1", aged(reports["pass"], 60), None)
    code, fleet, _ = fleet_report(tmp_path, "web1", capsys)
    assert code == 0 and hosts(fleet)["web1"]["files"]["health_tier2"] is None
