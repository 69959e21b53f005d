"""Unit tests for plugins/modules/rocmlab_preflight.py (role rocmlab_fleet): what a lab rollout
reads on a host before it changes anything.

utmp files are written by util-linux's own `utmpdump -r` (what `who` then reads back), so the
record layout is checked against the system's tools, not against this module's idea of it.
"""

from __future__ import annotations

import http.server
import importlib.util
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from ansible_modules import run_module
from rocmlab_testutil import loopback_server, send_body

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "rocmlab_preflight", REPO / "plugins" / "modules" / "rocmlab_preflight.py"
)
assert _spec is not None and _spec.loader is not None
preflight = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(preflight)

UTMPDUMP = shutil.which("utmpdump")
WHO = shutil.which("who")


def utmp_file(tmp_path: Path, lines: list[str]) -> Path:
    """A binary utmp file made by `utmpdump -r` from its text form."""
    if UTMPDUMP is None:
        pytest.skip("needs utmpdump (util-linux)")
    target = tmp_path / "utmp"
    subprocess.run(
        [UTMPDUMP, "-r", "-o", str(target)],
        input="".join(line + "\n" for line in lines),
        text=True,
        check=True,
        capture_output=True,
    )
    return target


def record(kind: int, pid: int, user: str, line: str = "pts/3", host: str = "10.0.0.5") -> str:
    return (
        f"[{kind}] [{pid:05d}] [ts/0] [{user:<8}] [{line:<12}] [{host:<20}]"
        f" [{host or '0.0.0.0':<15}] [2025-01-06T09:12:00,000000+00:00]"
    )


def test_utmp_records_read_as_who_reads_them(tmp_path: Path) -> None:
    path = utmp_file(
        tmp_path,
        [record(7, 4242, "alice"), record(8, 4243, "bob"), record(7, 17, "carol", "tty1", "")],
    )
    sessions = preflight.utmp_sessions(path.read_bytes())
    since = "2025-01-06T09:12:00+00:00"
    assert sessions == [
        {"user": "alice", "line": "pts/3", "host": "10.0.0.5", "pid": 4242, "since": since},
        {"user": "carol", "line": "tty1", "host": "", "pid": 17, "since": since},
    ]
    if WHO:
        listed = subprocess.run([WHO, str(path)], capture_output=True, text=True, check=True)
        assert [line.split()[0] for line in listed.stdout.splitlines()] == ["alice", "carol"]


def test_only_live_sessions_of_others_count(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid in (100, 200, 300):
        (proc / str(pid)).mkdir(parents=True)
    path = utmp_file(
        tmp_path,
        [
            record(7, 100, "alice"),  # alive
            record(7, 999, "stale"),  # the process is gone: a record a crash left behind
            record(7, 200, "ansible"),  # this very session (a parent of the module)
            record(7, 300, "kiosk"),  # ignored on purpose
        ],
    )
    found = preflight.logged_in(str(path), {"kiosk"}, {200}, proc_root=str(proc))
    assert [s["user"] for s in found] == ["alice"]


def test_no_utmp_file_means_nobody_logged_in(tmp_path: Path) -> None:
    assert preflight.logged_in(str(tmp_path / "missing"), set(), set()) == []


def test_the_modules_own_session_is_among_its_ancestors() -> None:
    own = preflight.ancestors()
    assert os.getpid() in own
    assert os.getppid() in own


def test_kfd_processes_from_a_fixture_tree(tmp_path: Path) -> None:
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    kfd = sysfs / "class" / "kfd" / "kfd" / "proc"
    for name in ("4242", "17", "not-a-pid"):
        (kfd / name).mkdir(parents=True)
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "comm").write_text("python3\n")
    assert preflight.kfd_processes(str(sysfs), proc_root=str(proc)) == [
        {"pid": 17, "command": None},
        {"pid": 4242, "command": "python3"},
    ]


def test_no_kfd_driver_means_no_compute_process(tmp_path: Path) -> None:
    assert preflight.kfd_processes(str(tmp_path)) == []


def test_space_adds_up_what_shares_a_file_system(tmp_path: Path) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    half = free / 2 / preflight.GIB
    report = preflight.space_report(
        [
            {"name": "venvs", "path": str(tmp_path / "not" / "there" / "yet"), "need_gib": half},
            {"name": "datasets", "path": str(tmp_path), "need_gib": half * 1.5},
        ]
    )
    assert len(report) == 1
    (fs,) = report
    assert fs["names"] == ["venvs", "datasets"]
    assert fs["need_bytes"] == int(half * preflight.GIB) + int(half * 1.5 * preflight.GIB)
    assert fs["enough"] is False  # each alone would fit, together they do not
    assert os.path.ismount(fs["mount"]) or fs["mount"] == "/"
    assert str(tmp_path).startswith(fs["mount"])


def test_space_that_fits() -> None:
    (fs,) = preflight.space_report([{"name": "ROCm", "path": "/", "need_gib": 0}])
    assert fs["enough"] is True and fs["mount"] == "/" and fs["free_bytes"] > 0


def test_in_use_says_what_and_who() -> None:
    assert preflight.in_use([], []) == []
    said = preflight.in_use(
        [{"pid": 4242, "command": "python3"}, {"pid": 17, "command": None}],
        [{"user": "alice", "line": "pts/3", "host": "10.0.0.5", "pid": 1, "since": "T"}],
    )
    assert said == [
        "GPU compute process running: PID 4242 (python3), PID 17 (command unknown)",
        "user logged in: alice on pts/3 from 10.0.0.5 since T",
    ]


def fake_loginctl(sessions: dict[str, dict[str, str]], rc: int = 0):
    """A stand-in for loginctl: list-sessions and show-session over SESSIONS."""

    def run(argv: list[str]) -> tuple[int, str]:
        if rc:
            return rc, ""
        if argv[1] == "list-sessions":
            return 0, "".join(f"{sid} 1000 {p['Name']} seat0\n" for sid, p in sessions.items())
        wanted = [a.split("=", 1)[1] for a in argv if a.startswith("--property=")]
        props = sessions[argv[2]]
        return 0, "".join(f"{k}={props[k]}\n" for k in wanted if k in props)

    return run


def test_logind_sessions_of_users_count_others_do_not() -> None:
    sessions = {
        "3": {"Name": "alice", "TTY": "pts/0", "RemoteHost": "10.0.0.5", "Leader": "812",
              "Class": "user", "State": "active", "Timestamp": "Mon 2025-01-06 09:12:00 UTC"},
        "4": {"Name": "ansible", "TTY": "", "RemoteHost": "10.0.0.1", "Leader": "900",
              "Class": "user", "State": "active", "Timestamp": "T"},  # this very session
        "5": {"Name": "gdm", "Class": "greeter", "State": "online", "Leader": "700"},
        "6": {"Name": "kiosk", "Class": "user", "State": "active", "Leader": "701"},
        "7": {"Name": "bob", "Class": "user", "State": "closing", "Leader": "702"},
    }  # fmt: skip
    found = preflight.logind_sessions(fake_loginctl(sessions), {"kiosk"}, {900})
    assert found == [
        {"user": "alice", "line": "pts/0", "host": "10.0.0.5", "pid": 812,
         "since": "Mon 2025-01-06 09:12:00 UTC"}
    ]  # fmt: skip


def test_no_logind_means_no_logind_sessions() -> None:
    assert preflight.logind_sessions(fake_loginctl({}, rc=1), set(), set()) == []


# --- the mirrors fetched from the host: one module run, not one uri task per URL ----------------
# A real HTTP server on the loopback, fetched through Ansible's own URL client (open_url), as the
# module does on a host.
class Mirror(http.server.BaseHTTPRequestHandler):
    """Answers /ok (a small file), /big (1 MiB), /slow (after 3 s), a redirect to /ok, and 404."""

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/ok")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/slow":
            threading.Event().wait(3)
        send_body(self, {"/ok": b"Release\n", "/big": b"x" * (1 << 20), "/slow": b"late"}.get(path))

    def log_message(self, *args):
        pass


@pytest.fixture
def mirror():
    with loopback_server(Mirror) as port:
        yield f"http://127.0.0.1:{port}"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_each_mirror_is_fetched_and_answers_in_the_order_of_the_urls(mirror: str) -> None:
    urls = [
        f"{mirror}/ok",
        f"{mirror}/missing",
        f"http://127.0.0.1:{closed_port()}/x",
        f"{mirror}/moved",
    ]
    found = preflight.fetch_all(urls, 5, 60, 180)
    assert [f["item"] for f in found] == urls
    assert found[0] == {"item": urls[0], "status": 200, "msg": "OK (8 bytes)"}
    assert found[1]["status"] == 404 and found[1]["msg"] == "HTTP Error 404: Not Found"
    assert found[2]["status"] == -1 and found[2]["msg"].startswith("Request failed: ")
    assert "refused" in found[2]["msg"].lower()
    assert found[3]["status"] == 200  # a redirect is followed, as uri's "safe" does for GET


def test_a_big_answer_is_read_no_further_than_64_kib(mirror: str) -> None:
    (found,) = preflight.fetch_all([f"{mirror}/big"], 5, 60, 180)
    assert found == {"item": f"{mirror}/big", "status": 200, "msg": f"OK ({64 * 1024} bytes)"}


def test_a_mirror_that_does_not_answer_in_time_costs_its_timeout_once(mirror: str) -> None:
    # Three slow mirrors fetched at once: the run takes about one timeout, not three.
    urls = [f"{mirror}/slow?{n}" for n in range(3)]
    started = time.monotonic()
    found = preflight.fetch_all(urls, 1, 60, 180)
    took = time.monotonic() - started
    assert [f["status"] for f in found] == [-1, -1, -1]
    assert all("timed out" in f["msg"] for f in found), found
    assert took < 2.5, took


def test_no_urls_fetch_nothing() -> None:
    assert preflight.fetch_all([], 5, 60, 180) == []


# A mirror that trickles: a byte a second, each well within url_timeout, so only the deadlines
# end the fetch (before them, a 64 KiB answer held the module for about 18 hours).
class Trickle(http.server.BaseHTTPRequestHandler):
    """/body: the headers at once, then a 64 KiB body a byte a second; /headers: the status line
    and headers themselves a byte a second. Stops when the test ends (TRICKLING cleared)."""

    def do_GET(self):
        if self.path.startswith("/body"):
            self.send_response(200)
            self.send_header("Content-Length", str(64 * 1024))
            self.end_headers()
            self.wfile.flush()
            data = b"x" * (64 * 1024)
        else:
            data = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        for byte in data:
            if not TRICKLING.is_set() or threading.Event().wait(1):
                return
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:  # the client gave up
                return

    def log_message(self, *args):
        pass


TRICKLING = threading.Event()


@pytest.fixture
def trickle():
    TRICKLING.set()
    with loopback_server(Trickle) as port:
        yield f"http://127.0.0.1:{port}"
        TRICKLING.clear()


def bounded(call, seconds: float = 60):
    """CALL's result, from a thread given SECONDS to return (a hung fetch fails the test, not
    the whole run)."""
    found = []
    thread = threading.Thread(target=lambda: found.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert found, f"did not return within {seconds} s"
    return found[0]


def test_a_trickling_body_or_header_ends_at_the_deadline_of_its_url(trickle: str) -> None:
    urls = [f"{trickle}/body", f"{trickle}/headers"]
    found = bounded(lambda: preflight.fetch_all(urls, 20, 3, 180))
    assert found == [
        {
            "item": url,
            "status": -1,
            "msg": f"Request failed: {url} did not answer in full within 3 s (url_deadline)",
        }
        for url in urls
    ]


def test_the_fetches_of_a_host_end_at_its_deadline_naming_each_url(
    trickle: str, mirror: str
) -> None:
    # Ten trickling URLs, 8 at once, each with an hour to go: the host's deadline ends them all;
    # the two never started say so. An answer that came in time keeps its place and its answer.
    urls = [f"{mirror}/ok"] + [f"{trickle}/body?{n}" for n in range(10)]
    found = bounded(lambda: preflight.fetch_all(urls, 20, 3600, 3))
    assert [f["item"] for f in found] == urls
    assert found[0] == {"item": urls[0], "status": 200, "msg": "OK (8 bytes)"}
    reached = "this host's fetches reached their deadline, 3 s (fetch_deadline)"
    assert [f["msg"] for f in found[1:9]] == [
        f"Request failed: {url} did not answer in full: {reached}" for url in urls[1:9]
    ]
    assert [f["msg"] for f in found[9:]] == [
        f"Request failed: {url} was not fetched: {reached}" for url in urls[9:]
    ]
    assert {f["status"] for f in found[1:]} == {-1}


@pytest.mark.parametrize("name", ["url_timeout", "url_deadline", "fetch_deadline"])
def test_a_deadline_below_a_second_is_refused_naming_it(name: str, capsys, monkeypatch) -> None:
    result = run_module(preflight, {name: 0}, capsys, monkeypatch)
    assert result["failed"] is True
    assert result["msg"] == f"{name}: 0: expected a number of seconds from 1"


DPKG_QUERY = shutil.which("dpkg-query")


@pytest.mark.skipif(DPKG_QUERY is None, reason="needs dpkg (Debian)")
def test_dpkg_audit_and_the_distributions_rocminfo_as_dpkg_reports_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The module run as Ansible runs it, on this Debian machine: what it returns is what dpkg
    itself says here."""
    result = run_module(
        preflight, {"dpkg_audit": True, "distro_rocminfo": True}, capsys, monkeypatch
    )
    audit = subprocess.run(["dpkg", "--audit"], capture_output=True, text=True, check=False)
    assert result["audit"] == {
        "rc": audit.returncode,
        "stdout_lines": audit.stdout.splitlines(),
        "stderr_lines": audit.stderr.splitlines(),
    }
    query = [DPKG_QUERY, "--show", "--showformat=${Version}", "rocminfo"]
    own = subprocess.run(query, capture_output=True, text=True, check=False)
    assert result["rocminfo_version"] == (own.stdout.strip() if own.returncode == 0 else "")
    # Without the options, neither is asked.
    result = run_module(preflight, {}, capsys, monkeypatch)
    assert result["audit"] is None and result["rocminfo_version"] is None


# ---------------------------------------------------------------- the installed ROCm release


@pytest.mark.skipif(os.geteuid() != 0, reason="the probe reads root's files alone here")
def test_the_installed_release_of_both_lines(tmp_path: Path) -> None:
    from rocm_trees import LEGACY, TWO, tree

    root = tree(tmp_path / "core", TWO, ("7.14", "10.0"), "auto")
    rocm, version = preflight.installed_rocm(str(root))
    assert version == "10.0.0"  # what the fleet's preflight record reads as the host's release
    assert (rocm["line"], rocm["release"], rocm["selected"], rocm["mode"]) == (
        "core",
        "10.0.0",
        "10.0",
        "auto",
    )
    assert [(c["series"], c["release"], c["state"], c["selected"]) for c in rocm["cores"]] == [
        ("7.14", "7.14.0", "installed", False),
        ("10.0", "10.0.0", "installed", True),
    ]
    assert rocm["legacy"] is None and rocm["problems"] == []
    rocm, version = preflight.installed_rocm(str(tree(tmp_path / "legacy", LEGACY, legacy=True)))
    assert version == "6.4.2-120" and (rocm["line"], rocm["release"]) == ("legacy", "6.4.2")


@pytest.mark.skipif(os.geteuid() != 0, reason="the probe reads root's files alone here")
def test_a_refused_file_leaves_the_release_unknown_and_says_why(tmp_path: Path) -> None:
    from rocm_trees import LEGACY, tree

    root = tree(tmp_path, LEGACY, legacy=True)
    info = root / "opt/rocm-6.4.2/.info/version"
    info.unlink()
    info.symlink_to("/etc/hostname")
    rocm, version = preflight.installed_rocm(str(root))
    assert version is None
    assert "/opt/rocm-6.4.2/.info/version: a symbolic link (not followed)" in rocm["problems"]


def test_the_module_reports_this_machines_rocm(capsys, monkeypatch) -> None:
    result = run_module(preflight, {}, capsys, monkeypatch)
    assert result["rocm"] == preflight.installed_rocm()[0]
    assert set(result["rocm"]) == {
        "line",
        "release",
        "selected",
        "mode",
        "legacy",
        "cores",
        "problems",
    }
