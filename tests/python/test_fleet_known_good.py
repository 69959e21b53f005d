"""``rocmlab fleet-report`` and each host's known-good state: the ``known_good`` entry of its
rollout record (the release and time of /var/lib/rocmlab/known-good.json, as the rollout read it
from the host), checked as hostile input, and shown with its age in the text table, fleet.html,
fleet.json and the JUnit XML; hosts without one show an em dash, fleets without any are as before.
"""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from fleet_testutil import (
    fleet_report,
    hosts_by_name,
    ready_reports,
    rollout_record,
    write_fleet,
)

from rocmlab.fleet import records
from rocmlab.fleet.fields import RecordError

DAY = 86400


def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def known(release: Any, ago: float) -> dict[str, Any]:
    return {"release": release, "since": utc(time.time() - ago)}


def lab(tmp_path: Path, **known_good: Any) -> None:
    """Ready hosts web1..web3, each with a rollout record; ``known_good``: host -> its entry."""
    hosts = ("web1", "web2", "web3")
    rollout = {f"{h}.json": rollout_record(h, "ready", known_good=known_good.get(h)) for h in hosts}
    write_fleet(tmp_path, reports=ready_reports(*hosts), rollout=rollout)


def test_each_host_shows_its_known_good_release_and_its_age(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # web3's known-good state has no AMD ROCm (the distribution's); web2 has no known_good.
    lab(tmp_path, web1=known("6.4.2", 3 * DAY + 600), web3=known(None, 2 * 3600 + 30))
    code, fleet, out = fleet_report(tmp_path, "web1,web2,web3", capsys)
    assert code == 0
    hosts = hosts_by_name(fleet)
    web1 = hosts["web1"]["known_good"]
    assert web1["release"] == "6.4.2"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", web1["since"])
    assert 3 * DAY + 600 <= web1["age_seconds"] < 3 * DAY + 700
    assert hosts["web2"]["known_good"] is None
    assert hosts["web3"]["known_good"]["release"] is None
    lines = out.splitlines()
    assert lines[0].split() == ["HOST", "STATE", "KNOWN-GOOD", "DETAIL"]
    assert re.match(r"web1 +READY +6\.4\.2 3d +AMD EPYC", lines[1]), lines[1]
    assert re.match(r"web2 +READY +\u2014 +AMD EPYC", lines[2]), lines[2]
    assert re.match(r"web3 +READY +no AMD ROCm 2h +AMD EPYC", lines[3]), lines[3]
    # One column: the details begin at the same place on every line.
    assert len({line.index("AMD EPYC") for line in lines[1:4]}) == 1
    page = (tmp_path / "fleet.html").read_text()
    assert '<th scope="col">Known good</th>' in page
    assert (
        f'<td class="version">6.4.2<div class="sub" title="{web1["since"]}">since 3d ago</div></td>'
        in page
    )
    assert '<td class="version">no AMD ROCm<div class="sub"' in page
    row = page.split('data-host="web2"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="version">&mdash;</td>' in row
    root = ET.fromstring((tmp_path / "fleet.junit.xml").read_bytes())
    said = {
        suite.get("name"): next(c for c in suite.iter("testcase") if c.get("name") == "ready")
        for suite in root.iter("testsuite")
    }
    assert said["web1"].find("system-out").text == (
        f"known-good: ROCm 6.4.2 since {web1['since']} (3d ago)"
    )
    assert said["web2"].find("system-out") is None
    assert said["web3"].find("system-out").text.startswith("known-good: no AMD ROCm since ")
    assert root.get("failures") == "0"


def test_hosts_without_the_field_are_shown_as_before_but_for_the_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fleet whose records hold no known_good (written before it, or null) is reported as
    before: no column; beside a host that has one, the others' rows only gain the column."""
    before, after = tmp_path / "before", tmp_path / "after"
    lab(before)
    _, old, old_out = fleet_report(before, "web1,web2,web3", capsys)
    lab(after, web1=known("6.4.2", DAY))
    record = after / "fleet" / "rollout" / "web2.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "known_good": None}))
    _, new, new_out = fleet_report(after, "web1,web2,web3", capsys)
    assert old_out.splitlines()[0].split() == ["HOST", "STATE", "DETAIL"]
    assert all(host["known_good"] is None for host in old["hosts"])
    assert "Known good" not in (before / "fleet.html").read_text()
    assert "known-good" not in (before / "fleet.junit.xml").read_text()
    for name in ("web2", "web3"):
        old_host = hosts_by_name(old)[name]
        new_host = hosts_by_name(new)[name]
        assert {**old_host, "files": None} == {**new_host, "files": None}
        old_line = next(line for line in old_out.splitlines() if line.startswith(name))
        new_line = next(line for line in new_out.splitlines() if line.startswith(name))
        assert new_line.split() == [*old_line.split()[:2], "\u2014", *old_line.split()[2:]]


BAD_ENTRIES = [
    ("6.4.2", "'known_good' is string '6.4.2', expected object or null"),
    (["6.4.2"], "'known_good' is array ['6.4.2'], expected object or null"),
    ({"since": "2026-12-01T09:00:00Z"}, "missing key 'known_good.release'"),
    ({"release": "6.4.2"}, "missing key 'known_good.since'"),
    (
        {"release": 6.4, "since": "2026-12-01T09:00:00Z"},
        "'known_good.release' is number 6.4, expected string or null",
    ),
    (
        {"release": True, "since": "2026-12-01T09:00:00Z"},
        "'known_good.release' is boolean True, expected string or null",
    ),
    (
        {"release": "6.4.2", "since": 1796115600},
        "'known_good.since' is integer 1796115600, expected string",
    ),
    (
        {"release": "6.4.2", "since": None},
        "'known_good.since' is null None, expected string",
    ),
    (
        {"release": "6" * 65, "since": "2026-12-01T09:00:00Z"},
        "'known_good.release' is 65 characters: longer than any ROCm release (64 at most)",
    ),
    (
        {"release": "6.4.2", "since": "yesterday"},
        "'known_good.since' is 'yesterday', expected a UTC time such as 2026-01-30T08:00:00Z",
    ),
    (
        {"release": "6.4.2", "since": "2026-12-01T09:00:00Z\n"},
        "expected a UTC time such as 2026-01-30T08:00:00Z",
    ),
    (
        {"release": "6.4.2", "since": "2026-02-30T09:00:00Z"},
        "'known_good.since' is '2026-02-30T09:00:00Z', expected a UTC time",
    ),
    (
        {"release": "6.4.2", "since": "x" * 100_000},
        "'known_good.since' is 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', expected a UTC time",
    ),
]


@pytest.mark.parametrize(("entry", "message"), BAD_ENTRIES)
def test_a_malformed_known_good_entry_fails_that_host(
    entry: Any, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = rollout_record("web1", "ready", known_good=entry)
    good = rollout_record("web2", "ready", known_good=known("6.4.2", DAY))
    write_fleet(
        tmp_path,
        reports=ready_reports("web1", "web2"),
        rollout={"web1.json": bad, "web2.json": good},
    )
    code, fleet, out = fleet_report(tmp_path, "web1,web2", capsys)
    assert code == 1
    hosts = hosts_by_name(fleet)
    assert hosts["web1"]["state"] == "unreadable"
    assert hosts["web1"]["reason"].startswith("unreadable rollout record: fleet/rollout/web1.json:")
    assert message in hosts["web1"]["reason"], hosts["web1"]["reason"]
    assert hosts["web1"]["known_good"] is None
    assert hosts["web2"]["ready"] and hosts["web2"]["known_good"]["release"] == "6.4.2"
    assert re.search(r"web1 +UNREADABLE +\u2014 ", out), out


def test_a_known_good_state_from_the_future_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``since`` a day ahead of the report's clock cannot be right; one a minute ahead (the
    host's clock a little ahead of the controller's) is taken, its age 0."""
    lab(tmp_path, web1=known("6.4.2", -DAY), web2=known("6.4.2", -60))
    _, fleet, out = fleet_report(tmp_path, "web1,web2", capsys)
    hosts = hosts_by_name(fleet)
    assert hosts["web1"]["state"] == "unreadable"
    assert re.search(
        r"'known_good\.since' is '[0-9T:-]+Z', later than now \([0-9T:-]+Z\): no state is "
        r"known-good from the future",
        hosts["web1"]["reason"],
    ), hosts["web1"]["reason"]
    assert hosts["web2"]["ready"] and hosts["web2"]["known_good"]["age_seconds"] == 0
    assert re.search(r"web2 +READY +6\.4\.2 0s ", out), out


def test_read_rollout_bounds_since_by_the_clock_it_is_given() -> None:
    doc = rollout_record(
        "h", "ready", known_good={"release": "6.4.2", "since": "2026-12-01T09:00:00Z"}
    )
    since = 1_796_115_600  # 2026-12-01T09:00:00Z
    kept = records.read_rollout(doc, now=since + 10)
    assert kept["known_good"] == {
        "release": "6.4.2",
        "since": "2026-12-01T09:00:00Z",
        "since_seconds": since,
    }
    records.read_rollout(doc, now=since - records.KNOWN_GOOD_SKEW)  # at the bound: taken
    with pytest.raises(RecordError, match="later than now \\(2026-12-01T08:54:59Z\\)"):
        records.read_rollout(doc, now=since - records.KNOWN_GOOD_SKEW - 1)
    assert records.read_rollout(rollout_record("h", "ready"))["known_good"] is None
    assert records.read_rollout({**doc, "known_good": None})["known_good"] is None
    longest = {"release": "6" * records.MAX_RELEASE_CHARS, "since": "2026-12-01T09:00:00Z"}
    assert records.read_rollout({**doc, "known_good": longest}, now=since)["known_good"]


def test_a_hostile_release_is_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab(tmp_path, web1=known('6.4\x1b[31m<b a="1">&\u202e', DAY))
    _, fleet, out = fleet_report(tmp_path, "web1,web2", capsys)
    assert "\x1b" not in out and "\u202e" not in out
    assert "6.4\\x1b[31m<b" in out
    page = (tmp_path / "fleet.html").read_text()
    assert "\x1b" not in page and '<b a="1">' not in page
    assert "6.4\\x1b[31m&lt;b a=&quot;1&quot;&gt;&amp;" in page
    ET.fromstring((tmp_path / "fleet.junit.xml").read_bytes())  # still XML
    assert hosts_by_name(fleet)["web1"]["known_good"]["release"].startswith("6.4\x1b")
