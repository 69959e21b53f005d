"""The lab cache's apt fill: plugins/module_utils/lab_cache_apt.py (which packages a run
installs, the clients' print-uris lists read as hostile input, what the cache host fetches),
the modules lab_cache_apt_uris and lab_cache_apt_fill (its fetches at once: the same results as
one after another), the filter lab_cache_apt_fills (which cache fills what for whom), and
lab_cache_stats leaving the cache host's own fill out of the bytes served.

The print-uris lines are apt 2.6's own output on Debian 12 (``apt-get install --print-uris -qq
python3-venv``), which gives the MD5Sum of each file.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import stat
import threading
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils import basic
from ansible_collections.rocmlab.rocmlab.plugins.filter import lab_cache_apt as apt_filters
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import lab_cache_apt as apt
from ansible_modules import load_module, run_module
from rocmlab_testutil import loopback_server, send_body

REPO = Path(__file__).resolve().parents[2]
fill_module = load_module("lab_cache_apt_fill")
uris_module = load_module("lab_cache_apt_uris")
stats_module = load_module("lab_cache_stats")
LISTED = apt_filters.LISTED

DEBIAN = "http://deb.debian.org/debian/pool/main"
VENV_URIS = "".join(
    f"'{DEBIAN}/{path}' {name} {size} MD5Sum:{md5}\n"
    for path, name, size, md5 in (
        (
            "p/python-pip/python3-pip-whl_23.0.1%2bdfsg-1_all.deb",
            "python3-pip-whl_23.0.1+dfsg-1_all.deb",
            1717296,
            "9457cf89938ed109b2e963108517007f",
        ),
        (
            "p/python3.11/python3.11-venv_3.11.2-6%2bdeb12u8_amd64.deb",
            "python3.11-venv_3.11.2-6+deb12u8_amd64.deb",
            5888,
            "bf67f8e92525202f444137c005c227a4",
        ),
        (
            "p/python3-defaults/python3-venv_3.11.2-1%2bb1_amd64.deb",
            "python3-venv_3.11.2-1+b1_amd64.deb",
            1200,
            "cbe279c8d7845efc3695e5a693649e9a",
        ),
    )
)
CACHE = "head01:3142"
AMD_PATH = "/amd/rocm/apt/6.4.2/pool/main/r/rocminfo/rocminfo_1.0.0.60402-1_amd64.deb"
ROCMINFO = f"http://{CACHE}{AMD_PATH}"
# AMD's Core SDK line through the cache (rocm_repo_core_url = http://<head>:3142/amdcore).
CORE_PATH = "/amdcore/debian12/pool/main/a/amdrocm-core10.0/amdrocm-core10.0_10.0.0-1_amd64.deb"
CORE = f"http://{CACHE}{CORE_PATH}"
LIBNUMA = f"{DEBIAN}/n/numactl/libnuma1_2.0.16-1_amd64.deb"


def line(uri: str, size: int, digest: str, name: str = "MD5Sum") -> str:
    return f"'{uri}' {uri.rsplit('/', 1)[-1]} {size} {name}:{digest}\n"


# --- which packages a run installs -------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({}, []),
        ({"rocm": ["rocm-hip-sdk", "rocm-opencl-sdk"]}, ["rocm-hip-sdk", "rocm-opencl-sdk"]),
        # The release move names exact versions; the driver comes with dkms.
        (
            {
                "rocm": ["rocm-core=6.4.2.60402-120~22.04", "rocm-hip-sdk"],
                "driver": ["amdgpu-dkms"],
            },
            ["amdgpu-dkms", "rocm-core=6.4.2.60402-120~22.04", "rocm-hip-sdk"],
        ),
        # PyTorch from pip goes in a venv: the venv module; TensorFlow's too, once.
        (
            {
                "rocm": ["rocm-hip-sdk"],
                "pytorch_plan": {"packages": [], "python_found": {"version": "3.11.2"}},
                "tensorflow_plan": {"packages": [], "python_found": {"version": "3.11.2"}},
            },
            ["python3-venv", "rocm-hip-sdk"],
        ),
        # The distribution's PyTorch: its packages, no venv.
        (
            {
                "pytorch_plan": {
                    "packages": ["python3-torch", "python3-torchvision"],
                    "python_found": None,
                }
            },
            ["python3-torch", "python3-torchvision"],
        ),
        # A plan that refused or was not made (TensorFlow off): nothing from it.
        ({"rocm": ["rocminfo"], "tensorflow_plan": {}}, ["rocminfo"]),
        ({"rocm": ["rocminfo", "rocminfo"], "pytorch_plan": None}, ["rocminfo"]),
    ],
)
def test_apt_wants_from_the_roles_settings(args, expected):
    assert apt.apt_wants(**args) == expected


@pytest.mark.parametrize(
    "bad", ["Rocm", "-o", "rocm hip", "rocm;reboot", "", "a", "x=", "--allow-unauthenticated", 3]
)
def test_apt_wants_refuses_what_is_no_package_name(bad):
    with pytest.raises(ValueError, match="is not an apt package name"):
        apt.apt_wants(rocm=[bad])


# --- the clients' lists, read as hostile input ----------------------------------------------


def test_print_uris_output_of_apt_is_read():
    files, problems = apt.parse_print_uris(VENV_URIS)
    assert problems == []
    assert [f["size"] for f in files] == [1717296, 5888, 1200]
    assert files[0] == {
        "uri": f"{DEBIAN}/p/python-pip/python3-pip-whl_23.0.1%2bdfsg-1_all.deb",
        "size": 1717296,
        "hash_name": "MD5Sum",
        "hash": "9457cf89938ed109b2e963108517007f",
    }
    assert apt.parse_print_uris("") == ([], [])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("rm -rf / 1 MD5Sum:00\n", "line 4 is not apt's"),
        (f"'{ROCMINFO}' x 12 MD5Sum:{'0' * 31}\n", "MD5Sum is not a hash apt gives with 31 digits"),
        (f"'{ROCMINFO}' x 12 CRC32:{'0' * 8}\n", "CRC32 is not a hash"),
        (f"'{ROCMINFO}' x 12 SHA256:{'A' * 64}\n", "not apt's"),  # upper-case hex
        (f"'{ROCMINFO}' x {1 << 40} SHA256:{'0' * 64}\n", "more than a package file holds"),
        (f"'{ROCMINFO}' x 12 SHA256:{'0' * 64} extra\n", "not apt's"),
        (f"'{ROCMINFO}' x -1 SHA256:{'0' * 64}\n", "not apt's"),
        ("'" + "a" * 5000 + "' x 1 MD5Sum:" + "0" * 32 + "\n", "over 4096 characters"),
        ("'http://h/a b.deb' x 1 MD5Sum:" + "0" * 32 + "\n", "not apt's"),
    ],
)
def test_a_line_that_is_not_apts_is_left_out_and_named(text, problem):
    files, problems = apt.parse_print_uris(VENV_URIS + text)
    assert len(files) == 3
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_list_too_long_is_refused_whole():
    digest = "0" * 32
    many = "".join(line(f"http://h/p/{n}.deb", 1, digest) for n in range(apt.MAX_FILES + 1))
    assert apt.parse_print_uris(many) == ([], [f"more than {apt.MAX_FILES} files: refused whole"])
    huge = "x" * (apt.MAX_TEXT + 1)
    assert apt.parse_print_uris(huge)[0] == []
    assert "refused whole" in apt.parse_print_uris(huge)[1][0]
    assert apt.parse_print_uris(None) == ([], ["the list is not text"])


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (ROCMINFO, (AMD_PATH, False)),
        (CORE, (CORE_PATH, False)),
        (LIBNUMA, (LIBNUMA, True)),
        # The cache is named as the clients name it, case aside.
        (ROCMINFO.replace("head01", "HEAD01"), (ROCMINFO.split(":3142", 1)[1], False)),
    ],
)
def test_the_cache_host_asks_its_own_pages_by_path_and_the_rest_through_the_proxy(uri, expected):
    assert apt.cache_target(uri, CACHE) == expected


def test_only_the_named_remaps_are_asked_on_the_cache_itself():
    """AMD's repositories of both lines by default; a prefix of a remap's name is not it."""
    assert apt.cache_target(ROCMINFO, CACHE, "amd") == (AMD_PATH, False)
    with pytest.raises(ValueError, match=r"not under /amd/$"):
        apt.cache_target(CORE, CACHE, "amd")
    for uri in (f"http://{CACHE}/amdcorex/p.deb", f"http://{CACHE}/amdc/p.deb"):
        with pytest.raises(ValueError, match="not under /amd/ or /amdcore/"):
            apt.cache_target(uri, CACHE)


def test_the_remaps_are_the_ones_the_lab_cache_serves_and_its_clients_ask_for():
    """REMAPS, role lab_cache's Remap- directives and the URLs role rocmlab gives the clients
    (rocm_repo's defaults read them) name the same paths."""
    lab_cache = yaml.safe_load((REPO / "roles/lab_cache/vars/main.yml").read_text())
    remaps = (lab_cache["__lab_cache_acng_remap"], lab_cache["__lab_cache_acng_core_remap"])
    assert remaps == apt.REMAPS
    template = (REPO / "roles/lab_cache/templates/acng.conf.j2").read_text()
    for var, upstream in (
        ("__lab_cache_acng_remap", "lab_cache_amd_upstream"),
        ("__lab_cache_acng_core_remap", "lab_cache_amd_core_upstream"),
    ):
        assert f"Remap-{{{{ {var} }}}}: /{{{{ {var} }}}} ; {{{{ {upstream} }}}}" in template
    (task,) = [
        t
        for t in yaml.safe_load((REPO / "roles/rocmlab/tasks/lab-cache.yml").read_text())
        if "ansible.builtin.set_fact" in t
    ]
    urls = task["vars"]["__urls"]
    assert (urls["amd"], urls["amd_core"]) == tuple(f"{{{{ __apt }}}}/{r}" for r in apt.REMAPS)
    defaults = yaml.safe_load((REPO / "roles/rocm_repo/defaults/main.yml").read_text())
    assert "rocmlab_lab_cache_urls.amd " in defaults["rocm_repo_base_url"]
    assert "rocmlab_lab_cache_urls.amd_core " in defaults["rocm_repo_core_url"]


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("https://repo.radeon.com/rocm/apt/6.4.2/pool/x.deb", "plain http"),
        ("ftp://h/x.deb", "plain http"),
        ("http://head01:3142/acng-report.html?doExpire=1", "query"),
        ("http://head01:3142/acng-report.deb", "not under /amd/ or /amdcore/"),
        ("http://h/pool/x.deb?x=1", "query"),
        ("http://h/pool/x.deb#frag", "query or fragment"),
        ("http://h/pool/Release", "not the URL of a .deb"),
        ("http://h/pool/../../etc/x.deb", ". or .. segment"),
        ("http://user:pw@h/pool/x.deb", "credentials"),
        ("http://h/pool/x\\y.deb", "plain http"),
        ("http:///x.deb", "not the URL of a .deb"),
    ],
)
def test_what_the_cache_host_never_fetches(uri, why):
    with pytest.raises(ValueError, match=why.replace(".", r"\.")):
        apt.cache_target(uri, CACHE)


def test_the_fill_plan_fetches_each_file_once_for_every_client():
    rocminfo = line(ROCMINFO, 52000, "1" * 64, "SHA256")
    wants = {
        "ws-02": VENV_URIS + rocminfo,
        "ws-01": VENV_URIS + rocminfo,
        # A converged host lacks nothing.
        "ws-03": "",
        "ws-04": line("http://head01:3142/acng-report.deb", 1, "0" * 32)
        + line(ROCMINFO, 52001, "2" * 64, "SHA256"),
    }
    files, problems = apt.fill_plan(wants, CACHE)
    assert len(files) == 4
    assert [f["uri"] for f in files] == sorted(f["uri"] for f in files)
    by_uri = {f["uri"]: f for f in files}
    assert by_uri[ROCMINFO]["clients"] == ["ws-01", "ws-02"]
    assert by_uri[ROCMINFO]["size"] == 52000 and by_uri[ROCMINFO]["proxied"] is False
    assert all(f["proxied"] for uri, f in by_uri.items() if uri != ROCMINFO)
    assert problems == [
        "ws-04: http://head01:3142/acng-report.deb is on the cache itself but not under /amd/ or"
        " /amdcore/: not fetched",
        f"ws-04: {ROCMINFO} has size 52001 and SHA256 {'2' * 64}, ws-01 gave 52000 and SHA256"
        f" {'1' * 64}: fetched once, as the first gave it",
    ]


# --- the fill module, against a stand-in for apt-cacher-ng -----------------------------------


class Cache(http.server.BaseHTTPRequestHandler):
    """apt-cacher-ng's part: answers by the request target (a path, or a whole URL when asked
    as a proxy) from BODIES; records every request."""

    bodies: ClassVar[dict[str, bytes]] = {}
    asked: ClassVar[list[str]] = []

    def do_GET(self):
        type(self).asked.append(self.path)
        send_body(self, self.bodies.get(self.path))

    def log_message(self, *args):
        pass


@pytest.fixture
def cache():
    Cache.bodies, Cache.asked = {}, []
    with loopback_server(Cache) as port:
        yield port


@pytest.fixture
def warned(monkeypatch) -> list[str]:
    """The warnings the modules give (AnsibleModule.warn), in order."""
    said: list[str] = []
    original = basic.AnsibleModule.warn

    def warn(self, text, *args, **kwargs):
        said.append(text)
        return original(self, text, *args, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "warn", warn)
    return said


def test_the_fill_fetches_the_union_once_and_checks_each_file(cache, capsys, monkeypatch, warned):
    deb = b"!<arch>\n" + os.urandom(5000)
    venv = f"{DEBIAN}/p/python3-defaults/python3-venv_3.11.2-1%2bb1_amd64.deb"
    amd_path = ROCMINFO.split(":3142", 1)[1]
    wrong = f"{DEBIAN}/w/wrong/wrong_1_all.deb"
    short = f"{DEBIAN}/s/short/short_1_all.deb"
    Cache.bodies = {
        venv: deb,
        amd_path: deb[:3000],
        CORE_PATH: deb[:2000],
        wrong: b"x" * 10,
        short: deb[:10],
    }
    listed = (
        line(venv, len(deb), hashlib.md5(deb).hexdigest())
        + line(ROCMINFO, 3000, hashlib.sha256(deb[:3000]).hexdigest(), "SHA256")
        + line(CORE, 2000, hashlib.sha256(deb[:2000]).hexdigest(), "SHA256")
        + line(wrong, 10, "0" * 32)
        + line(short, 20, hashlib.md5(deb[:20]).hexdigest())
        + line(f"{DEBIAN}/m/missing/missing_1_all.deb", 5, "0" * 32)
    )
    args = {"wants": {"ws-01": listed, "ws-02": listed}, "cache": CACHE, "port": cache}
    result = run_module(fill_module, args, capsys, monkeypatch)
    assert result["changed"] is True
    assert result["files"] == 6
    missing = f"{DEBIAN}/m/missing/missing_1_all.deb"
    # AMD's files of both lines are asked on the cache by their paths (its remaps).
    assert sorted(Cache.asked) == sorted([venv, amd_path, CORE_PATH, wrong, short, missing])
    fetched = {f["uri"]: f["clients"] for f in result["fetched"]}
    assert fetched == {venv: 2, ROCMINFO: 2, CORE: 2}
    assert result["bytes"] == len(deb) + 3000 + 2000 + 10 + 10
    problems = " ".join(result["problems"])
    assert f"{wrong} has another MD5Sum" in problems
    assert f"{short} gave 10 bytes, not the 20 bytes" in problems
    assert "missing_1_all.deb answered 404" in problems
    assert len(warned) == 3 and any("missing_1_all.deb answered 404" in w for w in warned)

    # Check mode fetches nothing and says it would.
    Cache.asked = []
    result = run_module(fill_module, {**args, "_ansible_check_mode": True}, capsys, monkeypatch)
    assert result["changed"] is True and result["fetched"] == [] and Cache.asked == []
    # Converged clients lack nothing: nothing to fetch, no change.
    result = run_module(fill_module, {**args, "wants": {"ws-01": ""}}, capsys, monkeypatch)
    assert result["changed"] is False and result["files"] == 0 and Cache.asked == []


def test_the_fill_reads_no_more_than_the_announced_size(cache, capsys, monkeypatch):
    path = f"{DEBIAN}/b/big/big_1_all.deb"
    Cache.bodies = {path: b"y" * (3 << 20)}
    args = {"wants": {"ws-01": line(path, 100, "0" * 32)}, "cache": CACHE, "port": cache}
    result = run_module(fill_module, args, capsys, monkeypatch)
    assert result["bytes"] == 101
    assert result["problems"] == [f"{path} gave more than the 100 bytes the clients' apt expects"]


def test_nothing_answering_is_a_problem_not_a_failure(capsys, monkeypatch):
    path = f"{DEBIAN}/n/none/none_1_all.deb"
    args = {"wants": {"ws-01": line(path, 1, "0" * 32)}, "cache": CACHE, "port": 1, "timeout": 5}
    result = run_module(fill_module, args, capsys, monkeypatch)
    assert result["changed"] is False and result.get("failed") is not True
    assert "could not be fetched" in result["problems"][0]


# --- the client's module: apt's list, nothing installed --------------------------------------


def fake_apt(tmp_path: Path, monkeypatch, script: str) -> Path:
    """An apt-get on PATH that records its arguments and runs SCRIPT."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    apt_get = bindir / "apt-get"
    apt_get.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/argv\n{script}\n')
    apt_get.chmod(apt_get.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return tmp_path / "argv"


def test_the_client_lists_apts_files_for_this_runs_packages(tmp_path, capsys, monkeypatch):
    argv = fake_apt(tmp_path, monkeypatch, f"cat <<'EOF'\n{VENV_URIS}EOF")
    args = {
        "rocm": ["rocm-hip-sdk"],
        "pytorch_plan": {"packages": [], "python_found": {"version": "3.11.2"}},
        "allow_downgrades": True,
    }
    result = run_module(uris_module, args, capsys, monkeypatch)
    assert result["changed"] is False
    assert result["packages"] == ["python3-venv", "rocm-hip-sdk"]
    assert result["uris"] == VENV_URIS
    assert argv.read_text().split() == [
        *("install", "--print-uris", "-qq", "--yes", "--allow-downgrades", "--"),
        *("python3-venv", "rocm-hip-sdk"),
    ]


def test_apt_that_cannot_resolve_leaves_the_list_empty_and_warns(
    tmp_path, capsys, monkeypatch, warned
):
    fake_apt(tmp_path, monkeypatch, "echo 'E: Unable to locate package rocm-hip-sdk' >&2; exit 100")
    result = run_module(uris_module, {"rocm": ["rocm-hip-sdk"]}, capsys, monkeypatch)
    assert result["uris"] == "" and result.get("failed") is not True
    assert len(warned) == 1 and "Unable to locate package rocm-hip-sdk" in warned[0]


def test_the_client_runs_no_apt_without_packages(tmp_path, capsys, monkeypatch):
    argv = fake_apt(tmp_path, monkeypatch, "exit 1")
    result = run_module(uris_module, {}, capsys, monkeypatch)
    assert result["uris"] == "" and not argv.exists()


def test_the_client_refuses_a_name_apt_would_read_as_an_option(tmp_path, capsys, monkeypatch):
    argv = fake_apt(tmp_path, monkeypatch, "exit 0")
    args = {"rocm": ["-oDebug::pkgProblemResolver=1"]}
    result = run_module(uris_module, args, capsys, monkeypatch)
    assert result["failed"] is True and "is not an apt package name" in result["msg"]
    assert not argv.exists()


# --- the stats leave the cache host's own fill out of the bytes served ----------------------


def test_the_cache_hosts_own_fill_is_not_counted_as_served(tmp_path):
    deb = "debrep/pool/main/n/numactl/libnuma1_2.0.16-1_amd64.deb"
    log = tmp_path / "apt-cacher.log"
    log.write_text(
        f"1796297116|I|21228|127.0.0.1|{deb}\n"
        f"1796297116|O|21204|127.0.0.1|{deb}\n"
        f"1796297117|O|21204|::ffff:127.0.0.1|{deb}\n"
        f"1796297117|O|21204|::1|{deb}\n"
        f"1796297118|O|21204|172.18.0.6|{deb}\n"
        f"1796297118|O|21204|not-an-address|{deb}\n"
    )
    empty = tmp_path / "none"
    counted = stats_module.stats(str(log), str(empty), str(empty), details=True)
    assert counted["files"]["apt"][deb] == {
        "upstream": 1,
        "upstream_bytes": 21228,
        "served": 2,
        "served_bytes": 42408,
    }


# --- the fill's concurrency: distinct files at once, results as one after another ------------


class SlowCache(Cache):
    """The stand-in, holding each answer DELAY seconds (the first file the longest, so the
    fetches end out of order) and counting the requests held at once. A request stops counting
    before its answer is sent: a worker can only ask again once it has its answer, so the count
    never includes a handler thread that is still finishing after its client moved on."""

    delay: ClassVar[dict[str, float]] = {}
    lock = threading.Lock()
    in_flight = 0
    peak = 0

    def do_GET(self):
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.peak = max(cls.peak, cls.in_flight)
        try:
            threading.Event().wait(cls.delay.get(self.path, 0))
        finally:
            with cls.lock:
                cls.in_flight -= 1
        if self.path.endswith("/reset_1_all.deb"):
            # Headers promised, then the connection dropped: a failed fetch mid-batch.
            cls.asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "400")
            self.end_headers()
            self.wfile.write(b"z" * 10)
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        super().do_GET()


@pytest.fixture
def slow_cache():
    Cache.bodies, Cache.asked = {}, []
    SlowCache.delay, SlowCache.in_flight, SlowCache.peak = {}, 0, 0
    with loopback_server(SlowCache) as port:
        yield port


def batch(count: int) -> tuple[str, str]:
    """COUNT package files (a good one, one with the wrong hash, one cut short by the server, one
    missing, the rest good), served by SlowCache with the earliest URLs slowest; two clients'
    lists naming them all (one of them twice over). Returns the two lists."""
    listed = ""
    for number in range(count):
        kind = ("good", "wrong", "reset", "missing")[number] if number < 4 else "good"
        uri = f"{DEBIAN}/f/f{number:02d}/{kind}_1_all.deb"
        body = f"deb {number} ".encode() * (50 + number)
        if kind != "missing":
            Cache.bodies[uri] = body
        SlowCache.delay[uri] = 0.05 * (count - number)
        digest = "0" * 32 if kind == "wrong" else hashlib.md5(body).hexdigest()
        listed += line(uri, len(body) if kind != "reset" else 400, digest)
    return listed, listed + listed


def fill(port: int, wants: dict, workers: int, capsys, monkeypatch) -> dict:
    result = run_module(
        fill_module,
        {"wants": wants, "cache": CACHE, "port": port, "workers": workers, "timeout": 10},
        capsys,
        monkeypatch,
    )
    assert "failed" not in result, result
    return result


def test_the_concurrent_fill_gives_what_one_file_at_a_time_gives(slow_cache, capsys, monkeypatch):
    one, two = batch(12)
    wants = {"ws-02": two, "ws-01": one}
    sequential = fill(slow_cache, wants, 1, capsys, monkeypatch)
    assert SlowCache.peak == 1 and sequential["workers"] == 1
    asked_sequential = list(Cache.asked)
    Cache.asked, SlowCache.peak = [], 0
    parallel = fill(slow_cache, wants, 4, capsys, monkeypatch)
    assert parallel["workers"] == 4
    # The same results, in the same order (the URLs'), though the fetches ended out of order.
    for key in ("changed", "files", "fetched", "bytes", "problems"):
        assert parallel[key] == sequential[key], key
    assert [f["uri"] for f in parallel["fetched"]] == sorted(f["uri"] for f in parallel["fetched"])
    assert parallel["files"] == 12 and len(parallel["fetched"]) == 9
    assert all(f["clients"] == 2 for f in parallel["fetched"])
    # The wrong hash, the dropped connection and the missing file are each a problem, in the
    # order of their URLs, and lose none of the other files.
    problems = parallel["problems"]
    assert len(problems) == 3
    assert "wrong_1_all.deb has another MD5Sum" in problems[0]
    assert "reset_1_all.deb" in problems[1] and "400 bytes" in problems[1]
    assert "missing_1_all.deb answered 404" in problems[2]
    # Each file asked once per run, though both clients (one of them twice) listed it.
    assert sorted(Cache.asked) == sorted(asked_sequential)
    assert len(Cache.asked) == len(set(Cache.asked)) == 12


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_no_more_fetches_at_once_than_the_workers(slow_cache, capsys, monkeypatch, workers):
    one, _ = batch(10)
    result = fill(slow_cache, {"ws-01": one}, workers, capsys, monkeypatch)
    # Every fetch is held 0.05 s or more: the workers all run at once, and never more.
    assert SlowCache.peak == workers == result["workers"]
    assert len(Cache.asked) == len(set(Cache.asked)) == 10


def test_fewer_files_than_workers_start_no_idle_workers(slow_cache, capsys, monkeypatch):
    one, _ = batch(2)
    result = fill(slow_cache, {"ws-01": one}, 16, capsys, monkeypatch)
    assert result["workers"] == 2 and SlowCache.peak <= 2


def test_an_unexpected_error_in_one_fetch_loses_no_other_file(cache, capsys, monkeypatch):
    bodies = {f"{DEBIAN}/e/e{n}/e{n}_1_all.deb": f"body {n}".encode() * 30 for n in range(6)}
    Cache.bodies = dict(bodies)
    listed = "".join(line(uri, len(b), hashlib.md5(b).hexdigest()) for uri, b in bodies.items())
    broken = f"{DEBIAN}/e/e3/e3_1_all.deb"
    fetch = fill_module.fetch

    def failing(port, entry, timeout):
        if entry["uri"] == broken:
            raise RuntimeError("the stand-in's own failure")
        return fetch(port, entry, timeout)

    monkeypatch.setattr(fill_module, "fetch", failing)
    result = fill(cache, {"ws-01": listed}, 4, capsys, monkeypatch)
    assert [f["uri"] for f in result["fetched"]] == sorted(set(bodies) - {broken})
    assert result["problems"] == [
        f"{broken} could not be fetched (RuntimeError: the stand-in's own failure)"
    ]
    assert result["bytes"] == sum(len(b) for uri, b in bodies.items() if uri != broken)


@pytest.mark.parametrize("workers", [0, -1, 17])
def test_a_number_of_workers_out_of_bounds_is_refused(cache, capsys, monkeypatch, workers):
    path = f"{DEBIAN}/b/b/b_1_all.deb"
    Cache.bodies = {path: b"b"}
    args = {"wants": {"ws-01": line(path, 1, hashlib.md5(b"b").hexdigest())}, "cache": CACHE}
    result = run_module(
        fill_module, {**args, "port": cache, "workers": workers}, capsys, monkeypatch
    )
    assert result["failed"] is True
    assert result["msg"].startswith(f"workers: {workers} is not a number of fetches at once")
    assert "1 (one after another) to 16" in result["msg"]
    assert Cache.asked == []


# --- the batches: which lab cache fills what for whom ----------------------------------------


def urls(cache: str, port: int = 3142) -> dict:
    """rocmlab_lab_cache_urls as role rocmlab sets it (roles/rocmlab/tasks/lab-cache.yml)."""
    return {"host": cache, "address": cache, "apt_proxy": f"http://{cache}:{port}/"}


def test_the_batches_gather_each_caches_clients_that_lack_a_file():
    hostvars = {
        "ws-03": {"rocmlab_lab_cache_urls": urls("head02", 3200), LISTED: {"uris": "c"}},
        "ws-01": {"rocmlab_lab_cache_urls": urls("head01"), LISTED: {"uris": "a"}},
        "ws-02": {"rocmlab_lab_cache_urls": urls("head01"), LISTED: {"uris": "b"}},
        # Converged: lacks nothing.
        "ws-04": {"rocmlab_lab_cache_urls": urls("head01"), LISTED: {"uris": ""}},
        # No lab cache ({} from role rocmlab), none set at all, and the uris task skipped.
        "ws-05": {"rocmlab_lab_cache_urls": {}, LISTED: {"uris": "e"}},
        "ws-06": {LISTED: {"uris": "f"}},
        "ws-07": {"rocmlab_lab_cache_urls": urls("head01"), LISTED: {"skipped": True}},
        "ws-08": {"rocmlab_lab_cache_urls": urls("head01")},
        "head01": {"rocmlab_lab_cache_urls": {}},
    }
    hosts = ["head01", "ws-01", "ws-02", "ws-03", "ws-04", "ws-05", "ws-06", "ws-07", "ws-08"]
    assert apt_filters.lab_cache_apt_fills(hosts, hostvars) == [
        {
            "host": "head01",
            "cache": "head01:3142",
            "port": 3142,
            "wants": {"ws-01": "a", "ws-02": "b"},
        },
        {"host": "head02", "cache": "head02:3200", "port": 3200, "wants": {"ws-03": "c"}},
    ]
    # Only the hosts of this batch count.
    assert apt_filters.lab_cache_apt_fills(["ws-02"], hostvars) == [
        {"host": "head01", "cache": "head01:3142", "port": 3142, "wants": {"ws-02": "b"}}
    ]
    assert apt_filters.lab_cache_apt_fills(["ws-04", "ws-05"], hostvars) == []
    assert apt_filters.lab_cache_apt_fills([], hostvars) == []


def test_an_ipv6_cache_address_keeps_its_brackets():
    hostvars = {
        "ws-01": {
            "rocmlab_lab_cache_urls": {"host": "head01", "apt_proxy": "http://[fd00::1]:3142/"},
            LISTED: {"uris": "a"},
        }
    }
    assert apt_filters.lab_cache_apt_fills(["ws-01"], hostvars) == [
        {"host": "head01", "cache": "[fd00::1]:3142", "port": 3142, "wants": {"ws-01": "a"}}
    ]


@pytest.mark.parametrize(
    "proxy", ["", "http://head01/", "https://head01:3142/", "http://head01:99999/", "head01:3142"]
)
def test_a_proxy_url_without_its_port_is_refused_naming_the_host(proxy):
    hostvars = {
        "ws-01": {
            "rocmlab_lab_cache_urls": {"host": "head01", "apt_proxy": proxy},
            LISTED: {"uris": "a"},
        }
    }
    with pytest.raises(AnsibleFilterError, match=r"ws-01's rocmlab_lab_cache_urls\.apt_proxy is"):
        apt_filters.lab_cache_apt_fills(["ws-01"], hostvars)
