"""``rocmlab fleet-report`` against hostile records (issue 17; docs/security.md, "rocmlab
fleet-report's inputs"): every payload family a lab machine could put in what the controller
fetches, each with its exact outcome: the host's state and reason, the exit code, the outputs
written or left as they were, and bounds on time and memory where a payload aims at them.

The records are variations of the real smoke report (fleet_testutil); the hostile part is
spliced into its JSON text where JSON itself cannot express it (a lone surrogate escape, a
400-digit number, 100,000 levels of nesting).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fleet_testutil import (
    cache_record,
    fleet_report,
    hosts_by_name,
    read_outputs,
    ready_reports,
    smoke_report,
    write_fleet,
)
from rocmlab_testutil import REPO

from rocmlab.cli import main
from rocmlab.common.hostread import read_at_most
from rocmlab.fleet import outputs
from rocmlab.fleet.bounded import MAX_BYTES

# What must never reach a terminal raw: C0/C1 controls (newline aside: it ends the table's own
# lines), DEL, the Unicode line separators and the bidirectional controls.
RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
UNREADABLE = "unreadable report: web1.json: "


def with_text(host: str, before: str, after: str, **changes: Any) -> str:
    """The real report of ``host`` as JSON text, ``before`` (a JSON fragment, once) replaced
    by ``after``: for what json.dumps cannot write."""
    text = json.dumps(smoke_report(host, **changes))
    assert text.count(before) >= 1, before
    return text.replace(before, after, 1)


def junk(value: str) -> str:
    """web1's passing report with a key the fleet report does not read holding ``value``
    (JSON text): what it does not use is still parsed under the bounds."""
    return with_text("web1", '"checks": [', f'"junk": {value}, "checks": [')


def judged(tmp_path: Path, capsys: pytest.CaptureFixture, web1: str | bytes) -> dict[str, Any]:
    """web1 with ``web1`` as its report beside a ready web2: web1's entry, after checking that
    the run was judged as a whole (exit 1, web2 ready, all three outputs readable)."""
    write_fleet(tmp_path, reports={"web1.json": web1, **ready_reports("web2")})
    code, fleet, out = fleet_report(tmp_path, "web1,web2", capsys)
    assert code == 1
    hosts = hosts_by_name(fleet)
    assert hosts["web2"]["ready"] is True
    _, page, junit = read_outputs(tmp_path)
    ET.fromstring(junit.encode())
    assert f'data-host="web1" data-state="{hosts["web1"]["state"]}"' in page
    assert not RAW.search(out)
    return hosts["web1"]


def unreadable(host: dict[str, Any]) -> str:
    assert (host["state"], host["ready"]) == ("unreadable", False)
    assert host["reason"].startswith(UNREADABLE)
    return host["reason"][len(UNREADABLE) :]


# --- Unicode ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [
        ('"error": null', '"error": "\\ud800"', "\\ud800"),
        ('"error": null', '"error": "ok \\udfff"', "\\udfff"),
        ('"error": null', '"error": "\\ude00\\ud83d"', "\\ude00"),  # a pair in the wrong order
        ('"checks": [', '"\\ud800": 1, "checks": [', "\\ud800"),  # in a key
    ],
)
def test_a_lone_surrogate_makes_the_host_unreadable(
    before: str, after: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    host = judged(tmp_path, capsys, with_text("web1", before, after))
    assert unreadable(host) == f"a string holds a lone surrogate {reason}: not valid Unicode"


def test_surrogate_pairs_and_escaped_backslashes_are_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A pair is one character (U+1F600), and ``\\\\ud800`` is a backslash and five letters."""
    report = with_text("web1", '"gfx_arch": null', '"gfx_arch": "GPU \\ud83d\\ude00 \\\\ud800"')
    write_fleet(tmp_path, reports={"web1.json": report})
    code, fleet, _ = fleet_report(tmp_path, "web1", capsys)
    assert code == 0
    assert fleet["hosts"][0]["gfx_arch"] == "GPU \U0001f600 \\ud800"


def test_bytes_that_are_not_utf8_make_the_host_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """UTF-8 never encodes a surrogate: its three bytes (ED A0 80) are refused as they are."""
    raw = with_text("web1", '"error": null', '"error": "X"').encode().replace(b"X", b"\xed\xa0\x80")
    host = judged(tmp_path, capsys, raw)
    assert unreadable(host).startswith("not UTF-8 text (byte ")


# --- numbers ---------------------------------------------------------------------------------

DIGITS_400 = "9" * 400


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [
        ('"world_size": 1', f'"world_size": {DIGITS_400}',
         "integer 999999999999999999999... has 400 digits: out of range "
         "(a 64-bit integer, 19 digits at most)"),
        ('"world_size": 1', f'"world_size": -{DIGITS_400}',
         "integer -99999999999999999999... has 400 digits: out of range "
         "(a 64-bit integer, 19 digits at most)"),
        ('"world_size": 1', '"world_size": 9223372036854775808',
         "integer 9223372036854775808 is out of range (a 64-bit integer at most)"),
        ('"checks": [', f'"unused": [1, {DIGITS_400}], "checks": [',
         "integer 999999999999999999999... has 400 digits"),
        ('"samples_per_second": ', '"samples_per_second": 1e400, "was": ',
         "number 1e400 is not finite: beyond a 64-bit float's range"),
        ('"samples_per_second": ', '"samples_per_second": -1E+400, "was": ',
         "number -1E+400 is not finite: beyond a 64-bit float's range"),
        ('"samples_per_second": ', '"samples_per_second": Infinity, "was": ',
         "Infinity is not a JSON number"),
        ('"samples_per_second": ', '"samples_per_second": -Infinity, "was": ',
         "-Infinity is not a JSON number"),
        ('"samples_per_second": ', '"samples_per_second": NaN, "was": ',
         "NaN is not a JSON number"),
        ('"samples_per_second": ', f'"samples_per_second": 1.{"5" * 100}, "was": ',
         "number 1.5555555555555555555... has 102 characters: longer than any number a "
         "record holds (64 at most)"),
    ],
)  # fmt: skip
def test_numbers_out_of_range_make_the_host_unreadable(
    before: str, after: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    host = judged(tmp_path, capsys, with_text("web1", before, after, speed=100.0))
    assert unreadable(host).startswith(f"not valid JSON: {reason}")


def test_the_largest_numbers_in_range_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    report = with_text("web1", '"world_size": 1', f'"world_size": 1, "big": [{2**63 - 1}, '
                       f"{-(2**63)}, 1.7976931348623157e308, 5e-324, 1e-400]")  # fmt: skip
    write_fleet(tmp_path, reports={"web1.json": report})
    assert fleet_report(tmp_path, "web1", capsys)[0] == 0


def test_no_value_poisons_the_speed_median(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two hosts near the float maximum: their mean taken as a sum would be infinite. The
    refused 1e400 host is not in any group; every figure in fleet.json is finite."""
    reports = {
        "a.json": smoke_report("a", gpu="mi210", speed=1.7e308),
        "b.json": smoke_report("b", gpu="mi210", speed=1.6e308),
        "c.json": with_text("c", '"samples_per_second": ', '"samples_per_second": 1e400, "x": ',
                            gpu="mi210", speed=5.0),
    }  # fmt: skip
    write_fleet(tmp_path, reports=reports)
    code, fleet, _ = fleet_report(tmp_path, "a,b,c", capsys)
    assert code == 1 and hosts_by_name(fleet)["c"]["state"] == "unreadable"
    (group,) = fleet["speed_groups"]
    assert group["hosts"] == ["a", "b"] and math.isclose(group["median"], 1.65e308)
    # fleet.json holds no Infinity or NaN (json.loads would accept them; this refuses them).
    json.loads((tmp_path / "fleet.json").read_text(), parse_constant=pytest.fail)


# --- nesting ---------------------------------------------------------------------------------


def test_100000_levels_of_nesting_make_the_host_unreadable_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    host = judged(tmp_path, capsys, junk("[" * 100_000 + "]" * 100_000))
    # The report object is one level: 100,001.
    assert unreadable(host) == (
        "arrays and objects nested 100001 deep: deeper than any record (64 at most)"
    )
    assert "Traceback" not in capsys.readouterr().err


def test_nesting_to_the_bound_is_read_and_brackets_in_strings_do_not_count(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    nested = "[" * 62 + "]" * 62  # in junk's array, in the report object: 64
    report = junk(f"[{json.dumps('[{' * 500)}, {nested}]")
    write_fleet(tmp_path, reports={"web1.json": report})
    assert fleet_report(tmp_path, "web1", capsys)[0] == 0
    deeper = junk("[" * 64 + "]" * 64)
    write_fleet(tmp_path, reports={"web1.json": deeper})
    code, fleet, _ = fleet_report(tmp_path, "web1", capsys)
    assert code == 1
    assert unreadable(fleet["hosts"][0]) == (
        "arrays and objects nested 65 deep: deeper than any record (64 at most)"
    )


def test_a_truncated_record_is_still_called_truncated(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    text = json.dumps(smoke_report("web1"))
    for cut in (text[:-1], text[: text.index('"host"') + 4]):  # an object, a string left open
        host = judged(tmp_path, capsys, cut)
        assert unreadable(host).endswith("; the file is truncated")


# --- the fleet-wide records ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ('"\\ud800"', "a string holds a lone surrogate \\ud800: not valid Unicode"),
        (DIGITS_400, "not valid JSON: integer 999999999999999999999... has 400 digits"),
        ("1e400", "not valid JSON: number 1e400 is not finite"),
        ("[" * 100_000 + "]" * 100_000, "arrays and objects nested 100001 deep"),
    ],
)
def test_bad_cluster_and_cache_records_are_unreadable_not_fatal(
    payload: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """They are about the fleet, not a declared host: reported, the exit code unchanged."""
    cache = json.dumps(cache_record(apt=(1, 2))).replace('"cache.lab"', payload)
    cluster = json.dumps({"verdict": "pass", "backend": "gloo"}).replace('"gloo"', payload)
    write_fleet(
        tmp_path,
        reports=ready_reports("web1"),
        extra={"fleet/cache.json": cache, "fleet/cluster.json": cluster},
    )
    code, fleet, out = fleet_report(tmp_path, "web1", capsys)
    assert code == 0
    for name in ("cache", "cluster"):
        assert fleet[name]["file"] == f"fleet/{name}.json"
        assert fleet[name]["problem"].startswith(problem)
        assert f"{name}: unreadable fleet/{name}.json: {problem}" in out


# --- terminal and markup ---------------------------------------------------------------------

FORGED = "\x1b[2K\rfleet: 3 of 3 hosts ready\n\x1b[32mfleet: 3 of 3 hosts ready\x1b[0m"
SHOWN = "\\x1b[2K\\rfleet: 3 of 3 hosts ready\\n\\x1b[32mfleet: 3 of 3 hosts ready\\x1b[0m"


def test_escapes_and_newlines_in_a_record_cannot_forge_a_line_of_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Every string a record puts on the terminal is one visible line: ESC, CR and LF show as
    ``\\x1b``, ``\\r``, ``\\n``; the only ``fleet:`` line is the report's own."""
    failed = smoke_report("web1", passed=False, exit_code=1, error=FORGED)
    cluster = {"verdict": f"pass{FORGED}"}
    write_fleet(
        tmp_path,
        reports={"web1.json": failed, **ready_reports("web2")},
        extra={"fleet/cluster.json": cluster, f"x\x1b[31m{FORGED}.json": smoke_report("x")},
    )
    code, fleet, out = fleet_report(tmp_path, "web1,web2", capsys)
    assert code == 1
    assert not RAW.search(out)
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("fleet:")] == ["fleet: 1 of 2 hosts ready"
                                                                     "; 1 undeclared file(s) "
                                                                     "not counted"]  # fmt: skip
    assert f"web1  SMOKE_FAILED  smoke job failed: {SHOWN}"[:80] in out
    assert f"cluster check: pass{SHOWN}" in lines
    assert any(line.startswith("undeclared: x\\x1b[31m\\x1b[2K\\rfleet") for line in lines)
    assert hosts_by_name(fleet)["web1"]["error"] == FORGED  # fleet.json keeps the value itself


BIDI = "\u202e\u2066\u2067\u2068\u2069\u202a\u202b\u202c\u202d\u200e\u200f\u061c"
SEPARATORS = "\u2028\u2029\x85\x9b\x7f\x00\x0b\x0c"


def test_bidi_controls_and_separators_are_shown_as_escapes_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    report = smoke_report("web1", passed=False, exit_code=1, error=f"ok{BIDI}{SEPARATORS}end")
    write_fleet(tmp_path, reports={"web1.json": report})
    code, _, out = fleet_report(tmp_path, "web1", capsys)
    assert code == 1
    escaped = (
        "ok\\u202e\\u2066\\u2067\\u2068\\u2069\\u202a\\u202b\\u202c\\u202d\\u200e\\u200f\\u061c"
        "\\u2028\\u2029\\x85\\x9b\\x7f\\x00\\x0b\\x0cend"
    )
    assert f"smoke job failed: {escaped}"[:100] in out and not RAW.search(out)  # cut at 120
    _, page, junit = read_outputs(tmp_path)
    for text in (page, junit):
        assert not RAW.search(text.replace("\n", ""))
        assert escaped in text
    failure = ET.fromstring(junit.encode()).find("testsuite/testcase[@name='ready']/failure")
    assert failure is not None and escaped in (failure.get("message") or "")


def test_invisible_format_characters_are_shown_as_escapes_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A zero-width space, a word joiner, a byte order mark, a soft hyphen and a tag character
    (Unicode's Cf) in a record reach the table, fleet.html and the JUnit XML as escapes."""
    hidden = "\u200b\u2060\ufeff\u00ad\U000e0041\u180e"
    report = smoke_report("web1", passed=False, exit_code=1, error=f"ok{hidden}end")
    write_fleet(tmp_path, reports={"web1.json": report})
    code, _, out = fleet_report(tmp_path, "web1", capsys)
    assert code == 1
    escaped = "ok\\u200b\\u2060\\ufeff\\xad\\U000e0041\\u180eend"
    assert f"smoke job failed: {escaped}" in out
    _, page, junit = read_outputs(tmp_path)
    for text in (out, page, junit):
        assert escaped in text and not any(char in text for char in hidden)


def test_a_host_name_with_a_control_character_is_refused(tmp_path: Path, capsys) -> None:
    assert main(["fleet-report", str(tmp_path), "--hosts", "web1,we\x1bb2"]) == 2
    err = capsys.readouterr().err
    assert "host name 'we\\x1bb2' cannot name a report file" in err and not RAW.search(err)


# --- special files, links, sizes -------------------------------------------------------------


def run_report(
    reports: Path,
    hosts: str,
    timeout: float = 60,
    limit_memory: int | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``rocmlab fleet-report`` in a subprocess with a time bound, optionally a bound on its
    address space (RLIMIT_AS) and other limits set before it starts."""

    def before() -> None:
        if limit_memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_memory, limit_memory))
        if preexec is not None:
            preexec()

    return subprocess.run(
        [sys.executable, "-m", "rocmlab", "fleet-report", str(reports), "--hosts", hosts],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        preexec_fn=before,
    )


def states(reports: Path) -> dict[str, tuple[str, str | None]]:
    fleet = json.loads((reports / "fleet.json").read_text())
    return {h["host"]: (h["state"], h["reason"]) for h in fleet["hosts"]}


NOT_FOLLOWED = "a symbolic link, not followed: a record must be a regular file in REPORTS_DIR"


def test_fifos_are_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO with no writer blocks whoever opens it for reading: the run must not."""
    write_fleet(tmp_path, reports=ready_reports("web2"))
    for fifo in ("web1.json", "fleet/preflight/web2.json", "fleet/cluster.json",
                 "fleet/cache.json"):  # fmt: skip
        (tmp_path / fifo).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(tmp_path / fifo)
    started = time.monotonic()
    result = run_report(tmp_path, "web1,web2", timeout=60)
    assert time.monotonic() - started < 30
    assert result.returncode == 1, result.stderr
    fifo = "a FIFO (named pipe), not a regular file: not read"
    assert states(tmp_path) == {
        "web1": ("unreadable", f"unreadable report: web1.json: {fifo}"),
        "web2": ("unreadable", f"unreadable preflight record: fleet/preflight/web2.json: {fifo}"),
    }
    fleet = json.loads((tmp_path / "fleet.json").read_text())
    assert fleet["cluster"] == {"file": "fleet/cluster.json", "problem": fifo}
    assert fleet["cache"] == {"file": "fleet/cache.json", "problem": fifo}
    assert f"cluster: unreadable fleet/cluster.json: {fifo}" in result.stdout


def test_dev_zero_and_huge_sparse_files_are_read_within_bounded_memory(tmp_path: Path) -> None:
    """/dev/zero (linked) never ends and claims 0 bytes; a sparse file claims 64 GiB. Under a
    256 MiB address-space limit the run judges every host and exits 1."""
    write_fleet(tmp_path, reports=ready_reports("web3"))
    (tmp_path / "fleet").mkdir()
    for link in ("web1.json", "fleet/cluster.json"):
        (tmp_path / link).symlink_to("/dev/zero")
    for sparse in ("web2.json", "fleet/cache.json"):
        with open(tmp_path / sparse, "wb") as out:
            out.truncate(64 * 1024**3)
    result = run_report(tmp_path, "web1,web2,web3", limit_memory=256 * 1024**2)
    assert result.returncode == 1, result.stderr
    too_big = f"{64 * 1024**3} bytes: larger than any record ({MAX_BYTES} bytes at most)"
    assert states(tmp_path) == {
        "web1": ("unreadable", f"unreadable report: web1.json: {NOT_FOLLOWED}"),
        "web2": ("unreadable", f"unreadable report: web2.json: {too_big}"),
        "web3": ("ready", None),
    }
    fleet = json.loads((tmp_path / "fleet.json").read_text())
    assert fleet["cluster"]["problem"] == NOT_FOLLOWED
    assert fleet["cache"]["problem"] == too_big


def test_the_inputs_together_are_read_within_a_total_and_what_is_skipped_is_named(
    tmp_path: Path,
) -> None:
    """40 hosts whose smoke reports are each just under 4 MiB of distinct passing checks (what
    costs the report the most memory to keep): without a total they took over 2 GB and ended in
    MemoryError. Under a 1.25 GiB address-space limit the report reads records up to its total
    (32 MiB for 40 hosts), names each record it did not read and why, and judges every host."""
    report = smoke_report("HOST")
    report["checks"] = [
        {"name": f"check{i}", "passed": True, "detail": f"detail {i}", "rank": None}
        for i in range(52_000)
    ]
    text = json.dumps(report)
    assert 3.5 * 1024**2 < len(text) < MAX_BYTES
    hosts = [f"web{index:02d}" for index in range(40)]
    for host in hosts:
        (tmp_path / f"{host}.json").write_text(text.replace('"HOST"', f'"{host}"'))
    result = run_report(tmp_path, ",".join(hosts), timeout=300, limit_memory=1280 * 1024**2)
    assert result.returncode == 1, result.stderr
    found = states(tmp_path)
    read = [host for host in hosts if found[host][0] == "ready"]
    assert read == hosts[: len(read)] and 7 <= len(read) <= 9
    reason = found[hosts[-1]][1]
    assert reason.startswith(
        f"unreadable report: {hosts[-1]}.json: not read: the records read before it took the "
        "report's total of 32.0 MiB (64 KiB per declared host, at least 32.0 MiB; 40 declared); "
        "the largest: web"
    ), reason
    assert all(found[host][1] is not None for host in hosts[len(read) :])


def test_the_read_never_trusts_the_size_a_file_claims() -> None:
    """/dev/zero says it holds 0 bytes and never ends: the read stops one byte past the bound."""
    fd = os.open("/dev/zero", os.O_RDONLY)
    try:
        assert os.fstat(fd).st_size == 0
        assert len(read_at_most(fd, 1000)) == 1001
    finally:
        os.close(fd)


def test_the_costliest_record_within_the_size_bound_fits_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """MAX_BYTES of empty objects (the most Python objects per byte of JSON) in a key the report
    does not use: the host is ready, within 384 MiB and a minute."""
    count = (MAX_BYTES - len(junk("[{}]"))) // 3
    write_fleet(tmp_path, reports={"web1.json": junk(f"[{'{},' * count}{{}}]")})
    assert MAX_BYTES - 3 < (tmp_path / "web1.json").stat().st_size <= MAX_BYTES
    result = run_report(tmp_path, "web1", limit_memory=384 * 1024**2)
    assert result.returncode == 0, result.stderr
    assert states(tmp_path) == {"web1": ("ready", None)}
    assert (tmp_path / "fleet.json").stat().st_size < 64 * 1024  # the junk is not kept


def test_links_in_reports_dir_are_never_followed_in_or_out(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A report linking to another host's (in), to a file outside REPORTS_DIR that is a valid
    passing report (out), a dangling link, and a directory named like a report."""
    outside = tmp_path / "outside"
    write_fleet(outside, reports={"secret.json": smoke_report("outside-secret")})
    reports = tmp_path / "reports"
    write_fleet(reports, reports=ready_reports("web2"))
    (reports / "web1.json").symlink_to("web2.json")
    (reports / "web3.json").symlink_to(outside / "secret.json")
    (reports / "web4.json").symlink_to(tmp_path / "nowhere.json")
    (reports / "web5.json").mkdir()
    (reports / "fleet" / "rollout").mkdir(parents=True)
    (reports / "fleet" / "rollout" / "web2.json").symlink_to(outside / "secret.json")
    code, fleet, _ = fleet_report(reports, "web1,web2,web3,web4,web5", capsys)
    assert code == 1
    assert {h["host"]: h["reason"] for h in fleet["hosts"]} == {
        "web1": f"unreadable report: web1.json: {NOT_FOLLOWED}",
        "web2": f"unreadable rollout record: fleet/rollout/web2.json: {NOT_FOLLOWED}",
        "web3": f"unreadable report: web3.json: {NOT_FOLLOWED}",
        "web4": f"unreadable report: web4.json: {NOT_FOLLOWED}",
        "web5": "unreadable report: web5.json: a directory, not a regular file: not read",
    }
    assert "outside-secret" not in (reports / "fleet.json").read_text()


HARD_LINKED = (
    "a hard link (2 names for one file): not read, a record must be a file of its own in "
    "REPORTS_DIR (copy it, do not link it)"
)


def test_a_hard_link_in_reports_dir_is_refused_and_publishes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A hard link planted where a record goes names a file only the controller's account may
    read (mode 0600, outside REPORTS_DIR, a valid record): refused for every kind of record, and
    nothing of it reaches the outputs; the same content copied is read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    reports = write_fleet(tmp_path / "reports", reports=ready_reports("web3"))
    places = ("web1.json", "health/web2.json", "health/tier2/web3.json",
              "fleet/rollout/web4.json", "fleet/cluster.json")  # fmt: skip
    for index, where in enumerate(places):
        marker = f"outside-secret-{index}"
        doc = {"verdict": marker} if "cluster" in where else smoke_report(marker)
        (outside / f"{index}.json").write_text(json.dumps(doc))
        (outside / f"{index}.json").chmod(0o600)
        (reports / where).parent.mkdir(parents=True, exist_ok=True)
        os.link(outside / f"{index}.json", reports / where)
    copied = (outside / "0.json").read_text().replace("outside-secret-0", "copied")
    (reports / "web5.json").write_text(copied)  # a copy: the controller's own file
    code, fleet, out = fleet_report(reports, "web1,web2,web3,web4,web5", capsys)
    assert code == 1
    reasons = {h["host"]: h["reason"] for h in fleet["hosts"]}
    assert reasons["web1"] == f"unreadable report: web1.json: {HARD_LINKED}"
    assert reasons["web2"].startswith(f"unreadable health report: health/web2.json: {HARD_LINKED}")
    assert f"health/tier2/web3.json: {HARD_LINKED}" in reasons["web3"]
    assert reasons["web4"].startswith(
        f"unreadable rollout record: fleet/rollout/web4.json: {HARD_LINKED}"
    )
    assert fleet["cluster"] == {"file": "fleet/cluster.json", "problem": HARD_LINKED}
    assert reasons["web5"] is None and hosts_by_name(fleet)["web5"]["machine"] == "copied"
    outputs = "".join(read_outputs(reports)[1:]) + (reports / "fleet.json").read_text() + out
    assert "outside-secret" not in outputs


@pytest.mark.parametrize("linked", ["fleet", "fleet/preflight", "fleet/rollout"])
def test_a_linked_records_directory_stops_the_report_with_exit_2(
    linked: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    outside = tmp_path / "outside"
    (outside / "preflight").mkdir(parents=True)
    reports = write_fleet(tmp_path / "reports", reports=ready_reports("web1"))
    (reports / "fleet").mkdir()
    if linked != "fleet":
        (reports / "fleet").rmdir()
        (reports / "fleet").mkdir()
    target = reports / linked
    if target.exists():
        target.rmdir()
    target.symlink_to(outside / "preflight")
    assert main(["fleet-report", str(reports), "--hosts", "web1"]) == 2
    assert capsys.readouterr().err == (
        f"rocmlab: error: {reports / linked} is a symbolic link: fleet-report follows no link "
        "in REPORTS_DIR (make it a directory); no output was written\n"
    )
    assert not (reports / "fleet.json").exists()


def test_reports_dir_itself_may_be_a_link(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """REPORTS_DIR is the admin's own path (the command line): a link to it is followed."""
    write_fleet(tmp_path / "real", reports=ready_reports("web1"))
    (tmp_path / "reports").symlink_to(tmp_path / "real")
    assert fleet_report(tmp_path / "reports", "web1", capsys)[0] == 0


# --- the outputs: temporaries, all or nothing ------------------------------------------------

OUTPUTS = ("fleet.json", "fleet.html", "fleet.junit.xml")


def previous_set(reports: Path, capsys: pytest.CaptureFixture) -> dict[str, bytes]:
    """A first run (web1 ready) whose outputs a second run must not spoil; then web1's report
    fails, so that a second run would say otherwise. Returns the first outputs."""
    write_fleet(reports, reports=ready_reports("web1"))
    assert main(["fleet-report", str(reports), "--hosts", "web1"]) == 0
    capsys.readouterr()
    write_fleet(reports, reports={"web1.json": smoke_report("web1", passed=False, exit_code=1)})
    return {name: (reports / name).read_bytes() for name in OUTPUTS}


def listing(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_pre_planted_temporary_links_are_not_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    reports = write_fleet(tmp_path / "reports", reports=ready_reports("web1"))
    planted = {}
    for name in (*OUTPUTS, "fleet.html.tmp"):
        target = outside / name
        target.write_text("the admin's file\n")
        (reports / f".{name}.tmp").symlink_to(target)
        planted[target] = target.stat()
    (reports / "fleet.html").symlink_to(outside / "fleet.html")  # the output itself, too
    assert fleet_report(reports, "web1", capsys)[0] == 0
    for target, before in planted.items():
        assert target.read_text() == "the admin's file\n"
        assert target.stat().st_mtime_ns == before.st_mtime_ns
    for name in OUTPUTS:
        assert stat.S_ISREG((reports / name).lstat().st_mode)
        assert (reports / f".{name}.tmp").is_symlink()  # left alone
    assert oct((reports / "fleet.html").stat().st_mode & 0o777) == oct(0o666 & ~umask())


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def drop_write_permission() -> None:
    """For a run as root: drop every capability (the bounding set, so the exec'd process has
    none), so that the directory's mode bits bind root too."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop = 24
    for capability in range(64):
        libc.prctl(pr_capbset_drop, capability, 0, 0, 0)


def test_a_read_only_reports_dir_keeps_the_previous_outputs_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    reports = tmp_path / "reports"
    before = previous_set(reports, capsys)
    names = listing(reports)
    reports.chmod(0o555)
    try:
        result = run_report(reports, "web1", preexec=drop_write_permission)
    finally:
        reports.chmod(0o755)
    assert result.returncode == 2  # refused before the report is made
    assert result.stderr == (
        f"rocmlab: error: REPORTS_DIR {str(reports)!r}: cannot create files in it (Permission "
        "denied); nothing was written\n"
    )
    assert result.stdout == ""
    assert {name: (reports / name).read_bytes() for name in OUTPUTS} == before
    assert listing(reports) == names


def test_an_output_that_cannot_be_written_whole_keeps_the_previous_set(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A file size limit between the sizes of this run's fleet.json and fleet.html makes the
    kernel refuse the HTML half-way (EFBIG): fleet.json was already written to its temporary
    file, and none of the three is replaced."""
    reports = tmp_path / "reports"
    before = previous_set(reports, capsys)
    names = listing(reports)
    trial = tmp_path / "trial"  # the same run where it can write, for the sizes
    shutil.copytree(reports, trial, symlinks=True)
    assert run_report(trial, "web1").returncode == 1
    sizes = {name: (trial / name).stat().st_size for name in OUTPUTS}
    limit = (sizes["fleet.json"] + sizes["fleet.html"]) // 2
    assert sizes["fleet.json"] + 100 < limit < sizes["fleet.html"] - 100

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = run_report(reports, "web1", preexec=small_files)
    assert result.returncode == 5
    assert result.stderr == (
        f"rocmlab: error: cannot write the fleet report into {reports}: fleet.html: File too "
        "large; no output was replaced: the previous ones are as they were\n"
    )
    assert {name: (reports / name).read_bytes() for name in OUTPUTS} == before
    assert listing(reports) == names  # no temporary file left


def test_a_rename_that_fails_half_way_puts_back_what_it_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one failure no check beforehand can exclude: the second of three renames fails
    (injected: the kernel gives no way to make one rename of a directory fail and not the
    previous one). fleet.json, already replaced, is put back."""
    reports = tmp_path / "reports"
    before = previous_set(reports, capsys)
    names = listing(reports)
    real_replace = os.replace
    calls: list[str] = []

    def second_fails(source: Any, target: Any) -> None:
        calls.append(Path(target).name)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        real_replace(source, target)

    monkeypatch.setattr(outputs.os, "replace", second_fails)
    assert main(["fleet-report", str(reports), "--hosts", "web1"]) == 5
    monkeypatch.undo()
    assert calls == ["fleet.json", "fleet.html", "fleet.json"]  # the last: putting it back
    assert capsys.readouterr().err == (
        f"rocmlab: error: cannot write the fleet report into {reports}: fleet.html: Input/output "
        "error; no output was replaced: the previous ones are as they were\n"
    )
    assert {name: (reports / name).read_bytes() for name in OUTPUTS} == before
    assert listing(reports) == names


def test_a_first_run_that_cannot_write_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fleet(tmp_path, reports=ready_reports("web1"))
    real_replace = os.replace

    def third_fails(source: Any, target: Any) -> None:
        if Path(target).name == "fleet.junit.xml":
            raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr(outputs.os, "replace", third_fails)
    assert main(["fleet-report", str(tmp_path), "--hosts", "web1"]) == 5
    assert "fleet.junit.xml: No space left on device" in capsys.readouterr().err
    assert listing(tmp_path) == ["web1.json"]


def test_the_exit_codes_of_a_process(tmp_path: Path) -> None:
    """0 ready, 1 not ready (an UNREADABLE host too), 2 an output that cannot be written, refused
    before the report is made."""
    write_fleet(tmp_path, reports={**ready_reports("a"), "b.json": junk("[" * 100 + "]" * 100)})
    assert run_report(tmp_path, "a").returncode == 0
    assert run_report(tmp_path, "a,b").returncode == 1
    (tmp_path / "fleet.html").unlink()
    (tmp_path / "fleet.html").mkdir()
    result = run_report(tmp_path, "a")
    assert result.returncode == 2
    assert "fleet.html: a directory, which the report cannot replace; nothing was written" in (
        result.stderr
    )
    assert result.stdout == ""  # refused before the report was made


def test_a_fault_in_rocmlab_exits_70_not_1(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug (injected: the HTML rendering raises) must not read as "a host is not ready"."""
    import rocmlab.fleet.html

    write_fleet(tmp_path, reports=ready_reports("web1"))

    def broken(fleet: dict[str, Any]) -> str:
        raise RuntimeError("rendering broke\x1b[2J")

    monkeypatch.setattr(rocmlab.fleet.html, "fleet_html", broken)
    assert main(["fleet-report", str(tmp_path), "--hosts", "web1"]) == 70
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith(
        "rocmlab: error: the report could not be made: RuntimeError: rendering broke\\x1b[2J "
        "(a fault)\n"
    )
    assert listing(tmp_path) == ["web1.json"]
