"""plugins/modules/lab_cache_rocm_wheels.py: what the lab cache's pass-through of ROCm's index
served, kept as plain files for the offline bundle (role lab_cache, tasks/bundle.yml).

The log lines are in the role's nginx format (``$msec|$status|$body_bytes_sent|$remote_addr|
$uri``, as the lab_cache scenario writes them); the pass-through is played by Python's HTTP
server over a directory in the layout of AMD's multi-arch index (a project page per project
that links its files as ``../<file>``, TheRock's build_tools/third_party/s3_management/manage.py).
The lab_cache scenario keeps them through the real nginx and installs from them offline.
"""

from __future__ import annotations

import functools
import getpass
import gzip
import hashlib
import json
import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ansible_modules import load_module, run_module

keep_module = load_module("lab_cache_rocm_wheels")
bundle_module = load_module("lab_cache_bundle")

TORCH = "torch-2.13.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl"
DEVICE = "rocm_sdk_device_gfx90a-7.14.0-py3-none-linux_x86_64.whl"
OTHER_DEVICE = "rocm_sdk_device_gfx1100-7.14.0-py3-none-linux_x86_64.whl"
SDIST = "rocm-7.14.0.tar.gz"
# What two clients asked for, and what the log holds beside it: another site's paths, a miss,
# a client's made-up requests.
LOG = f"""\
1796297130.512|200|1894|172.18.0.6|/lab-cache.json
1796297131.020|200|2210|172.18.0.6|/rocm-wheels/torch/
1796297131.900|200|120|172.18.0.6|/rocm-wheels/{TORCH}
1796297132.100|200|900|172.18.0.6|/rocm-wheels/rocm-sdk-device-gfx90a/
1796297132.300|200|60|172.18.0.6|/rocm-wheels/{DEVICE}
1796297133.000|200|60|172.18.0.7|/rocm-wheels/{DEVICE}
1796297133.100|200|30|172.18.0.7|/rocm-wheels/rocm/
1796297133.200|200|30|172.18.0.7|/rocm-wheels/{SDIST}
1796297134.000|404|153|172.18.0.7|/rocm-wheels/{OTHER_DEVICE}
1796297135.000|200|10|172.18.0.7|/rocm-wheels/../../etc/shadow
1796297135.100|200|10|172.18.0.7|/rocm-wheels/torch/../../x.whl
1796297135.200|200|10|172.18.0.7|/rocm-wheels/a b.whl
1796297135.300|200|10|172.18.0.7|/rocm-wheels/
1796297135.400|200|10|172.18.0.7|/wheels/{TORCH}
1796297135.500|200|10|172.18.0.7|/rocm-wheels/{"x" * 9000}.whl
"""
KEPT = ["torch/", TORCH, "rocm-sdk-device-gfx90a/", DEVICE, "rocm/", SDIST]


def test_the_log_names_the_pages_and_files_served_and_nothing_a_client_made_up():
    assert keep_module.served(LOG.splitlines()) == KEPT
    # A project's own files, as a plain PEP 503 index lays them out.
    assert keep_module.served([f"1|200|1|a|/rocm-wheels/torch/{TORCH}"]) == [f"torch/{TORCH}"]
    assert keep_module.kept_name(f"torch/{TORCH}") == (["torch"], TORCH)
    assert keep_module.kept_name("torch/") == (["torch"], "index.html")
    assert keep_module.kept_name("Torch/") is None  # not a normalized project name
    assert keep_module.kept_name("torch/x/y.whl") is None


class Index:
    """AMD's layout under TOP/rocm-wheels/, served over HTTP from TOP as the pass-through
    answers."""

    def __init__(self, top: Path):
        root = top / "rocm-wheels"
        for project, files in {
            "torch": [TORCH],
            "rocm-sdk-device-gfx90a": [DEVICE],
            "rocm": [SDIST],
            "rocm-sdk-device-gfx1100": [OTHER_DEVICE],
        }.items():
            (root / project).mkdir(parents=True)
            links = "".join(f'<a href="../{f.replace("+", "%2B")}">{f}</a><br>' for f in files)
            (root / project / "index.html").write_text(f"<html><body>{links}</body></html>")
            for name in files:
                (root / name).write_bytes(name.encode() * 3)

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(top))
        )
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/rocm-wheels/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index(tmp_path):
    found = Index(tmp_path / "upstream")
    yield found
    found.close()


def keep(paths, index, dest, max_bytes=1 << 30):
    return keep_module.keep(paths, index.url, str(dest), max_bytes)


def test_each_page_and_file_is_kept_where_the_offline_head_serves_it(tmp_path, index):
    dest = tmp_path / "lab-cache" / "rocm-wheels"
    changed, kept, total, missing = keep(KEPT, index, dest)
    assert changed and kept == KEPT and missing == []
    assert (dest / TORCH).read_bytes() == TORCH.encode() * 3
    assert (dest / DEVICE).read_bytes() == DEVICE.encode() * 3
    # The page as pip read it: its relative links resolve to the files kept beside it.
    page = (dest / "torch" / "index.html").read_text()
    assert 'href="../torch-2.13.0%2Brocm7.14.0-' in page
    assert total == sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    assert not (dest / OTHER_DEVICE).exists()
    # Again: nothing changes (a file kept with the announced length is not read again).
    assert keep(KEPT, index, dest)[:2] == (False, KEPT)
    assert not list(dest.rglob(".rocmlab-tmp.*"))


def test_a_file_the_pass_through_no_longer_has_is_named_and_the_rest_kept(tmp_path, index):
    dest = tmp_path / "rocm-wheels"
    changed, kept, _total, missing = keep(["torch/", OTHER_DEVICE + "x.whl"], index, dest)
    assert kept == ["torch/"] and changed
    assert len(missing) == 1 and missing[0].startswith(f"{OTHER_DEVICE}x.whl: HTTP Error 404")


def test_max_bytes_stops_a_file_that_would_pass_it_and_keeps_nothing_of_it(tmp_path, index):
    dest = tmp_path / "rocm-wheels"
    limit = len(TORCH.encode() * 3) - 1
    _changed, kept, total, missing = keep([TORCH], index, dest, max_bytes=limit)
    assert kept == [] and total == 0
    assert missing == [f"{TORCH}: larger than the {limit} bytes left of max_bytes"]
    assert list(dest.iterdir()) == []


def test_a_link_planted_where_a_file_or_page_goes_is_replaced_not_written_through(tmp_path, index):
    dest = tmp_path / "rocm-wheels"
    dest.mkdir()
    secret, secret_dir = tmp_path / "root-only", tmp_path / "root-only-dir"
    secret.write_text("canary")
    secret_dir.mkdir()
    (dest / TORCH).symlink_to(secret)
    (dest / "torch").symlink_to(secret_dir)
    keep(["torch/", TORCH], index, dest)
    assert secret.read_text() == "canary" and list(secret_dir.iterdir()) == []
    assert not (dest / TORCH).is_symlink() and not (dest / "torch").is_symlink()
    assert (dest / TORCH).read_bytes() == TORCH.encode() * 3


def test_the_rotated_logs_are_read_too(tmp_path):
    log = tmp_path / "rocmlab-lab-cache.log"
    log.write_text(f"1|200|1|a|/rocm-wheels/{DEVICE}\n")
    (tmp_path / "rocmlab-lab-cache.log.1").write_text("1|200|1|a|/rocm-wheels/torch/\n")
    with gzip.open(tmp_path / "rocmlab-lab-cache.log.2.gz", "wt") as old:
        old.write(f"1|200|1|a|/rocm-wheels/{TORCH}\n")
    lines = [line for name in keep_module.logs(str(log)) for line in keep_module.read_log(name)]
    assert keep_module.served(lines) == [TORCH, "torch/", DEVICE]


def test_a_log_that_is_a_link_or_a_fifo_is_refused_not_read(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text(f"1|200|1|a|/rocm-wheels/{DEVICE}\n")
    (tmp_path / "linked.log").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo.log")
    for name in ("linked.log", "fifo.log"):
        with pytest.raises(ValueError, match=f"{name} is a (symbolic link|FIFO)"):
            list(keep_module.read_log(str(tmp_path / name)))
    assert list(keep_module.read_log(str(tmp_path / "none.log"))) == []


def test_the_bundle_carries_what_was_kept_and_the_import_puts_it_where_nginx_serves_it(
    tmp_path, index
):
    root = tmp_path / "lab-cache"
    keep(KEPT, index, root / "rocm-wheels")
    apt = tmp_path / "acng"
    apt.mkdir()
    bundle = tmp_path / "bundle"
    changed, manifest, digest, _skipped = bundle_module.create(
        str(bundle), bundle_module.sources(str(root), str(apt)), str(root), 1.0
    )
    assert changed
    assert sorted(n for n in manifest["files"] if n.startswith("rocm-wheels/")) == sorted(
        [f"rocm-wheels/{TORCH}", f"rocm-wheels/{DEVICE}", f"rocm-wheels/{SDIST}"]
        + [f"rocm-wheels/{p}index.html" for p in ("torch/", "rocm-sdk-device-gfx90a/", "rocm/")]
    )
    offline = tmp_path / "offline"
    bundle_module.import_bundle(
        str(bundle), digest, str(offline), str(tmp_path / "offline-acng"), getpass.getuser()
    )
    assert (offline / "rocm-wheels" / DEVICE).read_bytes() == DEVICE.encode() * 3
    page = (offline / "rocm-wheels" / "torch" / "index.html").read_bytes()
    assert page == (root / "rocm-wheels" / "torch" / "index.html").read_bytes()
    entry = manifest["files"][f"rocm-wheels/{DEVICE}"]
    assert entry["sha256"] == hashlib.sha256(DEVICE.encode() * 3).hexdigest()
    assert json.loads((offline / "bundle.json").read_text())["manifest_sha256"] == digest
    assert os.stat(offline / "rocm-wheels" / TORCH).st_mode & 0o777 == 0o644


def test_the_task_refuses_an_address_that_is_not_the_pass_through_and_checks_without_fetching(
    tmp_path, index, capsys, monkeypatch
):
    log = tmp_path / "nginx.log"
    log.write_text(LOG)
    dest = tmp_path / "rocm-wheels"
    args = {"log": str(log), "url": index.url, "dest": str(dest), "max_bytes": 1 << 30}
    bad = run_module(keep_module, {**args, "url": "https://elsewhere/simple/"}, capsys, monkeypatch)
    assert (
        bad["failed"] and "url: 'https://elsewhere/simple/' is not an http:// address" in bad["msg"]
    )
    checked = run_module(keep_module, {**args, "_ansible_check_mode": True}, capsys, monkeypatch)
    assert checked["changed"] and checked["kept"] == KEPT and not dest.exists()
    done = run_module(keep_module, args, capsys, monkeypatch)
    assert done["changed"] and done["kept"] == KEPT and done["missing"] == []
    again = run_module(keep_module, {**args, "_ansible_check_mode": True}, capsys, monkeypatch)
    assert not again["changed"]
