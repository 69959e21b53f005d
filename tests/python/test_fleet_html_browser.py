"""fleet.html as a person sees it: rendered by headless Chromium (Debian's ``chromium`` package).

The rendered DOM (``--dump-dom``) must hold every declared host with the failing ones flagged; a
screenshot is kept in .cache/artifacts/fleet.png for a person (or CI) to look at. Without
chromium the tests skip, unless ROCMLAB_REQUIRE_CHROMIUM=1 (CI) makes that a failure.
"""

from __future__ import annotations

import html.parser
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from fleet_testutil import lab_fleet
from rocmlab_testutil import REPO, run_cli

ARTIFACTS = REPO / ".cache" / "artifacts"
INSTALL = "apt-get install -y chromium"
FAILING = {
    "ws-05": ("quarantined", "quarantined: smoke job failed: accuracy 0.312 below 0.94"),
    "ws-06": ("unreachable", "unreachable: ssh: connect timed out"),
    "ws-07": ("skipped", "skipped: user logged in"),
    "ws-08": ("unreadable", "unreadable report: ws-08.json: not valid JSON"),
    "ws-09": ("no_report", "no report"),
}


def chromium() -> str:
    """Debian's chromium, or a skip (a failure under ROCMLAB_REQUIRE_CHROMIUM=1)."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.environ.get("ROCMLAB_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"chromium is not on PATH and ROCMLAB_REQUIRE_CHROMIUM=1 ({INSTALL})")
    pytest.skip(f"chromium is not on PATH ({INSTALL}; ROCMLAB_REQUIRE_CHROMIUM=1 makes this fail)")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """(fleet.html of the sample lab, its declared hosts)."""
    reports = tmp_path_factory.mktemp("lab-reports")
    hosts = lab_fleet(reports)
    result = run_cli("fleet-report", str(reports), "--hosts", ",".join(hosts))
    assert result.returncode == 1, result.stderr
    return reports / "fleet.html", hosts


def headless(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with its own throw-away profile."""
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}", *args,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


class Rows(html.parser.HTMLParser):
    """The host rows of a DOM: data attributes, and the text of each cell, per ``data-host``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.cells: dict[str, list[str]] = {}
        self.verdict = ""
        self._row: str | None = None
        self._in_verdict = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        if tag == "tr" and "data-host" in attributes:
            self._row = attributes["data-host"]
            self.rows[self._row] = {**attributes, "text": ""}
            self.cells[self._row] = []
        if self._row is not None:
            if tag in ("td", "th"):
                self.cells[self._row].append("")
            elif self.cells[self._row]:
                self.cells[self._row][-1] += " "  # a <div> or <br> inside a cell breaks a line
            self.rows[self._row]["text"] += " "
        self._in_verdict = self._in_verdict or attributes.get("id") == "verdict"

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None
        if tag == "p":
            self._in_verdict = False

    def handle_data(self, data: str) -> None:
        if self._row is not None:
            self.rows[self._row]["text"] += data
            self.cells[self._row][-1] += data
        if self._in_verdict:
            self.verdict += data


def test_every_declared_host_is_rendered_and_failures_are_flagged(
    page: tuple[Path, list[str]], tmp_path: Path
) -> None:
    html_file, hosts = page
    dom = headless("--dump-dom", html_file.as_uri(), tmp_path=tmp_path).stdout
    parsed = Rows()
    parsed.feed(dom)
    assert sorted(parsed.rows) == sorted(hosts)
    for host, row in parsed.rows.items():
        name, state_cell = (" ".join(cell.split()) for cell in parsed.cells[host][:2])
        assert name == host
        if host in FAILING:
            state, reason = FAILING[host]
            assert (row["data-ready"], row["data-state"]) == ("false", state)
            assert "bad" in row["class"].split()
            assert state_cell.startswith(f"FAIL {state.replace('_', ' ')} {reason}"), state_cell
        else:
            assert (row["data-ready"], state_cell) == ("true", "READY")
    assert "SLOW" in parsed.rows["ws-03"]["text"] and parsed.rows["ws-03"]["data-flags"] == "slow"
    assert "DRIFT" in parsed.rows["ws-04"]["text"]
    assert "AMP speed-up 2.24x" in parsed.rows["mi-01"]["text"]
    assert parsed.verdict.startswith("NOT READY: 6 of 11 hosts ready")
    # In the inline SVG: one bar per host with a samples/s figure, failed runs included.
    bars = re.findall(r'<g class="bar" data-host="([^"]+)"', dom)
    assert sorted(bars) == ["mi-01", "mi-02", "ws-01", "ws-02", "ws-03", "ws-04", "ws-05"]


def test_a_screenshot_a_person_can_read(page: tuple[Path, list[str]], tmp_path: Path) -> None:
    html_file, _ = page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "fleet.png"
    shot.unlink(missing_ok=True)
    size = "--window-size=1600,2000"
    headless(size, f"--screenshot={shot}", html_file.as_uri(), tmp_path=tmp_path)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1600, 2000)  # the IHDR chunk's width, height
