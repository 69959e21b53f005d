"""Unit tests for plugins/modules/lab_cache_stats.py and lab_cache_fill.py (role lab_cache).

The log lines are in the servers' own formats, copied from a run of the lab_cache scenario:
apt-cacher-ng 3.7.4's transfer log (``time|I|bytes|client|path`` for bytes fetched upstream,
``time|O|...`` for bytes sent to a client) and the nginx access log in the role's
``rocmlab_lab_cache`` format (``$msec|$status|$body_bytes_sent|$remote_addr|$uri``). The
scenario itself reads the real logs with the same parser.
"""

from __future__ import annotations

import getpass
import gzip
import hashlib
import importlib.util
import json
import os
import pwd
import shutil
import stat
import time
import tracemalloc
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "plugins" / "modules" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stats_module = load("lab_cache_stats")
fill_module = load("lab_cache_fill")

LIBNUMA = "debrep/pool/main/n/numactl/libnuma1_2.0.16-1_amd64.deb"
ACNG = f"""\
1796297116|I|21228|172.18.0.6|{LIBNUMA}
1796297116|O|21204|172.18.0.6|{LIBNUMA}
1796297116|I|132|172.18.0.7|{LIBNUMA}
1796297116|O|21204|172.18.0.7|{LIBNUMA}
1796297116|O|21204|172.18.0.8|{LIBNUMA}
1796297120|I|2292|172.18.0.6|amd/rocm/apt/6.4.2/dists/jammy/InRelease
1796297120|O|2178|172.18.0.6|amd/rocm/apt/6.4.2/dists/jammy/InRelease
1796297200|O|21204|172.18.0.9|{LIBNUMA}
"""
TORCH = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
NGINX = f"""\
1796297130.512|200|1894|172.18.0.6|/lab-cache.json
1796297131.020|200|2210|172.18.0.6|/wheels/
1796297140.771|200|191794682|172.18.0.6|/wheels/{TORCH}
1796297141.002|200|191794682|172.18.0.7|/wheels/{TORCH}
1796297150.300|404|153|172.18.0.6|/datasets/mnist/t10k-labels-idx1-ubyte.gz
1796297150.310|200|10008|172.18.0.6|/datasets/mnist/t10k-labels-idx1-ubyte
"""


def fills(*records: tuple[float, str, str, int]) -> str:
    return "".join(
        json.dumps({"time": t, "kind": k, "file": f, "bytes": b, "sha256": "0" * 64}) + "\n"
        for t, k, f, b in records
    )


def write_logs(tmp_path: Path, acng: str = ACNG, nginx: str = NGINX, fill: str = "") -> dict:
    paths = {"apt_log": tmp_path / "apt-cacher.log", "http_log": tmp_path / "nginx.log"}
    paths["apt_log"].write_text(acng)
    paths["http_log"].write_text(nginx)
    paths["fill_log"] = tmp_path / "fills.jsonl"
    paths["fill_log"].write_text(
        fill
        or fills(
            (1796297100.0, "wheels", f"wheels/{TORCH}", 191794682),
            (1796297101.0, "datasets", "datasets/mnist/t10k-labels-idx1-ubyte", 10008),
        )
    )
    return {key: str(value) for key, value in paths.items()}


def test_apt_counts_upstream_and_served_bytes_per_file(tmp_path):
    result = stats_module.stats(**write_logs(tmp_path), details=True)
    libnuma = result["files"]["apt"][LIBNUMA]
    # Fetched once (a concurrent request cost a 132-byte header exchange), served four times.
    assert libnuma == {
        "upstream": 2,
        "upstream_bytes": 21228 + 132,
        "served": 4,
        "served_bytes": 4 * 21204,
    }
    assert result["kinds"]["apt"]["upstream_bytes"] == 21228 + 132 + 2292


def test_http_counts_only_files_answered_200(tmp_path):
    result = stats_module.stats(**write_logs(tmp_path), details=True)
    wheels = result["files"]["wheels"]
    assert set(wheels) == {f"wheels/{TORCH}"}, "the listing /wheels/ is not a download"
    assert wheels[f"wheels/{TORCH}"]["served"] == 2
    datasets = result["files"]["datasets"]
    assert set(datasets) == {"datasets/mnist/t10k-labels-idx1-ubyte"}, "404s are not served"
    assert "lab-cache.json" not in json.dumps(result["files"])


def test_fill_log_gives_the_upstream_bytes_of_wheels_and_datasets(tmp_path):
    result = stats_module.stats(**write_logs(tmp_path))
    assert result["kinds"]["wheels"]["upstream_bytes"] == 191794682
    assert result["kinds"]["wheels"]["served_bytes"] == 2 * 191794682
    assert result["kinds"]["datasets"]["upstream_fetches"] == 1
    assert result["upstream_bytes"] == 21228 + 132 + 2292 + 191794682 + 10008
    assert "files" not in result


def test_since_leaves_out_earlier_lines(tmp_path):
    result = stats_module.stats(**write_logs(tmp_path), since=1796297199, details=True)
    assert result["kinds"]["apt"] == {
        "upstream_bytes": 0,
        "upstream_fetches": 0,
        "served_bytes": 21204,
        "served_requests": 1,
    }
    assert result["kinds"]["wheels"]["upstream_bytes"] == 0


def test_until_leaves_out_later_lines(tmp_path):
    result = stats_module.stats(**write_logs(tmp_path), since=1796297116, until=1796297141)
    # The last apt line (1796297200), the second torch download (1796297141.002) and the fill
    # records (before since) are out.
    assert result["kinds"]["apt"]["served_requests"] == 4
    assert result["kinds"]["wheels"] == {
        "upstream_bytes": 0,
        "upstream_fetches": 0,
        "served_bytes": 191794682,
        "served_requests": 1,
    }


def test_rotated_logs_are_read_oldest_first_and_missing_logs_are_empty(tmp_path):
    lines = ACNG.splitlines(keepends=True)
    logs = write_logs(tmp_path, acng=lines[-1])
    with gzip.open(logs["apt_log"] + ".2.gz", "wt") as handle:
        handle.write(lines[0])
    Path(logs["apt_log"] + ".1").write_text(lines[1])
    Path(logs["apt_log"] + ".old").write_text("not a rotation\n")
    reading = stats_module.Reading()
    files = stats_module.log_files(logs["apt_log"], reading)
    assert files == [logs["apt_log"] + ".2.gz", logs["apt_log"] + ".1", logs["apt_log"]]
    assert [line for name in files for line in stats_module.lines_of(name, reading)] == [
        lines[i] for i in (0, 1, -1)
    ]
    empty = stats_module.stats(str(tmp_path / "none"), str(tmp_path / "none"), logs["fill_log"])
    assert empty["kinds"]["apt"]["served_requests"] == 0
    assert empty["unreadable"] == [] and empty["skipped_lines"] == 0


def test_malformed_lines_are_skipped(tmp_path):
    acng = "garbage\n1796297116|X|10|ip|path\n1796297116|I|ten|ip|path\n" + ACNG
    nginx = "|200|5|ip|/wheels/x.whl\n" + NGINX
    fill = "{not json\n" + fills((1.0, "apt", "x", 5), (2.0, "wheels", "wheels/a.whl", 7))
    result = stats_module.stats(**write_logs(tmp_path, acng, nginx, fill))
    assert result["kinds"]["wheels"]["upstream_bytes"] == 7
    assert result["kinds"]["apt"]["upstream_fetches"] == 3
    # garbage, the count "ten"; nginx's empty time still has a count (a line out of any
    # window, not malformed); the fill log's broken JSON and its apt record.
    assert result["skipped_lines"] == 4


# --- The logs are written by service accounts: hostile input, bounded. ---
CLEAN = {
    "apt": {
        "upstream_bytes": 21228 + 132 + 2292,
        "upstream_fetches": 3,
        "served_bytes": 4 * 21204 + 2178,
        "served_requests": 5,
    },
}


@pytest.mark.parametrize(
    "count",
    [
        "\u00b2",  # a superscript two: str.isdigit() says yes, int() says no
        "\u0664\u0662",  # Arabic-Indic digits, which int() would read
        "1e5",
        "-5",
        "",
        "9" * 400,
        " 12",
    ],
)
def test_a_malformed_byte_count_is_skipped_and_the_rest_still_counts(tmp_path, count):
    acng = f"1796297116|I|{count}|172.18.0.6|{LIBNUMA}\n" + ACNG
    nginx = f"1796297140.1|200|{count}|172.18.0.6|/wheels/{TORCH}\n" + NGINX
    result = stats_module.stats(**write_logs(tmp_path, acng, nginx))
    assert result["kinds"]["apt"] == CLEAN["apt"]
    assert result["kinds"]["wheels"]["served_bytes"] == 2 * 191794682
    assert result["skipped_lines"] == 2
    assert result["unreadable"] == []


@pytest.mark.parametrize(
    "bytes_field",
    ['"abc"', "1e400", "true", "-1", str(2**70), "12.5", "null", "[1]", '"12"'],
)
def test_a_fill_record_with_a_malformed_byte_count_is_skipped(tmp_path, bytes_field):
    bad = f'{{"time": 1.0, "kind": "wheels", "file": "wheels/x.whl", "bytes": {bytes_field}}}\n'
    fill = bad + fills((2.0, "wheels", "wheels/a.whl", 7))
    result = stats_module.stats(**write_logs(tmp_path, fill=fill))
    assert result["kinds"]["wheels"]["upstream_bytes"] == 7
    assert result["kinds"]["wheels"]["upstream_fetches"] == 1
    assert result["skipped_lines"] == 1


def test_a_rotated_log_cut_short_is_left_out_and_named(tmp_path):
    """A .gz copy cut in the middle (a crash while logrotate compressed it) gives no
    traceback: it is left out whole and named, and the other copies count as before."""
    logs = write_logs(tmp_path)
    older = "".join(f"1796290000|I|1000|172.18.0.6|debrep/pool/p{i}.deb\n" for i in range(5000))
    compressed = gzip.compress(older.encode())
    cut = logs["apt_log"] + ".2.gz"
    Path(cut).write_bytes(compressed[: len(compressed) // 2])
    result = stats_module.stats(**logs)
    assert result["kinds"]["apt"] == CLEAN["apt"]
    assert [entry["file"] for entry in result["unreadable"]] == [cut]
    assert "cannot be read to its end" in result["unreadable"][0]["reason"]
    # Not gzip at all, under a .gz name: the same.
    Path(cut).write_bytes(b"not gzip")
    assert stats_module.stats(**logs)["kinds"]["apt"] == CLEAN["apt"]


def test_a_log_that_is_a_link_a_fifo_or_too_large_is_left_out(tmp_path, monkeypatch):
    logs = write_logs(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text(f"1796297116|I|999999|172.18.0.6|{LIBNUMA}\n")
    os.symlink(secret, logs["apt_log"] + ".1")
    os.mkfifo(logs["apt_log"] + ".3")  # a writer-less FIFO would block an open() for reading
    Path(logs["http_log"] + ".1").write_text("x" * 2000 + "\n")
    monkeypatch.setattr(stats_module, "MAX_LOG_BYTES", 1000)
    started = time.monotonic()
    result = stats_module.stats(**logs)
    assert time.monotonic() - started < 5
    reasons = {Path(entry["file"]).name: entry["reason"] for entry in result["unreadable"]}
    assert reasons["apt-cacher.log.1"] == "is a symbolic link, not a regular file"
    assert reasons["apt-cacher.log.3"] == "is a FIFO, not a regular file"
    assert "more than the 1000" in reasons["nginx.log.1"]
    assert result["kinds"]["apt"] == CLEAN["apt"]


def test_a_gzip_bomb_is_read_only_up_to_the_bound(tmp_path, monkeypatch):
    logs = write_logs(tmp_path)
    Path(logs["apt_log"] + ".1.gz").write_bytes(gzip.compress(b"\n" * 5_000_000))
    monkeypatch.setattr(stats_module, "MAX_LOG_BYTES", 100_000)
    result = stats_module.stats(**logs)
    assert [Path(entry["file"]).name for entry in result["unreadable"]] == ["apt-cacher.log.1.gz"]
    assert "holds more than the 100000 bytes" in result["unreadable"][0]["reason"]


def test_an_overlong_line_is_skipped_in_bounded_memory(tmp_path):
    """20 MB without a newline, then the real lines: one line skipped, the rest counted, and
    the reader never holds more than a few of its 8 KiB reads."""
    logs = write_logs(tmp_path)
    with open(logs["apt_log"], "w") as handle:
        handle.write("1796297116|I|5|ip|" + "a" * 20_000_000 + "\n")
        handle.write(ACNG)
    tracemalloc.start()
    try:
        result = stats_module.stats(**logs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["kinds"]["apt"] == CLEAN["apt"]
    assert result["skipped_lines"] == 1
    assert peak < 2_000_000, peak


def test_rotated_copies_and_details_are_bounded(tmp_path, monkeypatch):
    logs = write_logs(tmp_path, acng="")
    for n in range(1, 6):
        Path(f"{logs['apt_log']}.{n}").write_text(f"1796297116|O|{n}|ip|debrep/p{n}.deb\n")
    monkeypatch.setattr(stats_module, "MAX_ROTATED", 3)
    monkeypatch.setattr(stats_module, "MAX_DETAILS", 2)
    result = stats_module.stats(**logs, details=True)
    # The newest three copies (.1 to .3) are read; .4 and .5 are named as not read.
    assert result["kinds"]["apt"]["served_bytes"] == 1 + 2 + 3
    assert sorted(Path(e["file"]).name for e in result["unreadable"]) == [
        "apt-cacher.log.4",
        "apt-cacher.log.5",
    ]
    assert len(result["files"]["apt"]) == 2 and result["details_left_out"] == 1


def test_fill_records_only_new_or_replaced_files(tmp_path):
    root = tmp_path / "wheels"
    (root / "sub").mkdir(parents=True)
    (root / "kept.whl").write_bytes(b"kept")
    (root / "replaced.whl").write_bytes(b"old")
    before = fill_module.snapshot(str(root))
    (root / "new.whl").write_bytes(b"new!")
    (root / "sub" / "nested.whl").write_bytes(b"n")
    (root / ".new.whl.part").write_bytes(b"partial")
    (root / "replaced.whl").write_bytes(b"newer")
    changed = fill_module.new_files(before, fill_module.snapshot(str(root)))
    assert changed == ["new.whl", "replaced.whl", "sub/nested.whl"]
    lines = fill_module.records(str(root), "wheels", changed, 5.0)
    assert lines[0] == {
        "time": 5.0,
        "kind": "wheels",
        "file": "wheels/new.whl",
        "bytes": 4,
        "sha256": hashlib.sha256(b"new!").hexdigest(),
    }
    log = tmp_path / "fills.jsonl"
    fill_module.append_records(str(log), lines)
    fill_module.append_records(str(log), [])
    counted = stats_module.stats(str(tmp_path / "none"), str(tmp_path / "none"), str(log))
    assert counted["kinds"]["wheels"]["upstream_bytes"] == 4 + 5 + 1


def test_fill_follows_no_link_in_its_directory_or_at_its_log(tmp_path):
    """A link in the filled directory (to a file root alone may read) is not recorded or hashed,
    and a fill log that is a link is refused, its target unchanged."""
    root = tmp_path / "wheels"
    root.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    before = fill_module.snapshot(str(root))
    (root / "real.whl").write_bytes(b"real")
    os.symlink(secret, root / "link.whl")
    os.mkfifo(root / "fifo.whl")
    changed = fill_module.new_files(before, fill_module.snapshot(str(root)))
    assert changed == ["real.whl"]
    log = tmp_path / "fills.jsonl"
    os.symlink(secret, log)
    with pytest.raises(OSError):
        fill_module.append_records(str(log), fill_module.records(str(root), "wheels", changed, 1))
    assert secret.read_text() == "root's own\n"
    # A file replaced by a link between the snapshot and the record is not recorded.
    (root / "real.whl").unlink()
    os.symlink(secret, root / "real.whl")
    assert fill_module.records(str(root), "wheels", ["real.whl"], 1.0) == []


bundle_module = load("lab_cache_bundle")
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="changes owners: run as root")
LIBNUMA_DEB = "debrep/pool/main/n/numactl/libnuma1_2.0.16-1_amd64.deb"
CORE_FILES = {
    "amdcore/debian12/dists/stable/InRelease": "-----BEGIN PGP SIGNED MESSAGE-----\n",
    "amdcore/debian12/dists/stable/main/binary-amd64/Packages.gz": "\x1f\x8b",
    "amdcore/debian12/pool/main/a/amdrocm-core10.0/amdrocm-core10.0_10.0.0-1_amd64.deb": "!<arch>",
    "amdcore/gpg/rocm.gpg": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n",
}


def filled_cache(tmp_path: Path) -> tuple[Path, Path]:
    """A lab cache's files in their real places' layout: apt-cacher-ng's cache (a remapped
    repository's directory and its .head files, Debian's archive under debrep/, and its own
    _xstore bookkeeping), wheels/ and datasets/<name>/ under the lab cache's root."""
    apt = tmp_path / "acng"
    (apt / "amd/rocm/apt/6.4.2/dists/jammy").mkdir(parents=True)
    (apt / "amd/rocm/apt/6.4.2/dists/jammy/InRelease").write_text(
        "-----BEGIN PGP SIGNED MESSAGE-----\n"
    )
    (apt / "amd/rocm/apt/6.4.2/dists/jammy/InRelease.head").write_text("HTTP/1.1 200 OK\n")
    # AMD's Core SDK line, remapped under amdcore/: its signed index and its key as fetched.
    for name, text in CORE_FILES.items():
        (apt / name).parent.mkdir(parents=True, exist_ok=True)
        (apt / name).write_text(text)
    (apt / LIBNUMA_DEB).parent.mkdir(parents=True)
    (apt / LIBNUMA_DEB).write_bytes(b"!<arch>\ndebian-binary")
    (apt / "_xstore/qstats").mkdir(parents=True)
    (apt / "_xstore/qstats/i").write_text("stats")
    root = tmp_path / "lab-cache"
    (root / "wheels").mkdir(parents=True)
    (root / "wheels" / TORCH).write_bytes(b"wheel bytes")
    (root / "datasets/mnist").mkdir(parents=True)
    (root / "datasets/mnist/t10k-labels-idx1-ubyte").write_bytes(b"labels")
    return apt, root


def make(tmp_path: Path, bundle: Path | None = None, now: float = 1.0):
    """(bundle, changed, manifest, digest, skipped) of a bundle made from filled_cache's cache."""
    apt, root = tmp_path / "acng", tmp_path / "lab-cache"
    if not apt.exists():
        filled_cache(tmp_path)
    bundle = bundle or tmp_path / "bundle"
    made = bundle_module.create(
        str(bundle), bundle_module.sources(str(root), str(apt)), str(root), now
    )
    return (bundle, *made)


def offline(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "offline-root", tmp_path / "offline-acng"


def import_into(tmp_path: Path, bundle: Path, digest: str, owner: str | None = None):
    offline_root, offline_apt = offline(tmp_path)
    return bundle_module.import_bundle(
        str(bundle), digest, str(offline_root), str(offline_apt), owner or getpass.getuser()
    )


def tree_state(path: Path) -> dict:
    """Every entry under PATH with its kind, owner, mode and content (or link target)."""
    state = {}
    for entry in sorted(path.rglob("*")):
        info = entry.lstat()
        if entry.is_symlink():
            content = os.readlink(entry)
        elif entry.is_file():
            content = entry.read_bytes()
        else:
            content = None
        state[str(entry.relative_to(path))] = (info.st_mode, info.st_uid, content)
    return state


def test_bundle_holds_every_file_with_its_hash_and_skips_bookkeeping(tmp_path):
    bundle, changed, manifest, digest, skipped = make(tmp_path)
    assert changed and skipped == []
    # AMD's repositories of both lines as fetched (the legacy one and the Core SDK's), Debian's.
    assert sorted(manifest["files"]) == sorted(
        [
            "apt/amd/rocm/apt/6.4.2/dists/jammy/InRelease",
            "apt/amd/rocm/apt/6.4.2/dists/jammy/InRelease.head",
            *(f"apt/{name}" for name in CORE_FILES),
            f"apt/{LIBNUMA_DEB}",
            "datasets/mnist/t10k-labels-idx1-ubyte",
            f"wheels/{TORCH}",
        ]
    )
    assert manifest["files"][f"wheels/{TORCH}"] == {
        "sha256": hashlib.sha256(b"wheel bytes").hexdigest(),
        "bytes": 11,
    }
    on_disk = (bundle / "MANIFEST.json").read_bytes()
    assert json.loads(on_disk)["files"] == manifest["files"]
    # The digest the play prints is the SHA-256 of MANIFEST.json as written.
    assert digest == hashlib.sha256(on_disk).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir() if ".part" in p.name) == []
    # Made again from an unchanged cache: left as it is, same digest; a changed file makes a
    # new one in the same place.
    assert make(tmp_path, now=2.0)[1:4] == (False, manifest, digest)
    (tmp_path / "lab-cache" / "wheels" / TORCH).write_bytes(b"other wheel")
    again = make(tmp_path, now=3.0)
    assert again[1] and again[3] != digest
    assert (bundle / "wheels" / TORCH).read_bytes() == b"other wheel"


def test_import_copies_a_sound_bundle_once(tmp_path):
    bundle, _, _, digest, _ = make(tmp_path)
    offline_root, offline_apt = offline(tmp_path)
    changed, manifest, recorded = import_into(tmp_path, bundle, digest)
    assert changed and len(manifest["files"]) == 5 + len(CORE_FILES) and recorded == digest
    assert (offline_root / "wheels" / TORCH).read_bytes() == b"wheel bytes"
    assert (offline_apt / "amd/rocm/apt/6.4.2/dists/jammy/InRelease").exists()
    for name, text in CORE_FILES.items():
        assert (offline_apt / name).read_text() == text, name
    record = json.loads((offline_root / "bundle.json").read_text())
    assert record == {"manifest_sha256": digest, "bundle": str(bundle)}
    assert not import_into(tmp_path, bundle, digest)[0]
    assert not list(offline_apt.rglob(".rocmlab-tmp.*")), "no temporary file is left"


def test_import_refuses_an_altered_bundle_whole(tmp_path):
    bundle, _, _, digest, _ = make(tmp_path)
    (bundle / "wheels" / TORCH).write_bytes(b"wheel bytez")  # same size, other content
    (bundle / "wheels" / "extra.whl").write_bytes(b"x")
    (bundle / "datasets/mnist/t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(bundle_module.BundleError) as refused:
        import_into(tmp_path, bundle, digest, "nobody")
    message = str(refused.value)
    assert "datasets/mnist/t10k-labels-idx1-ubyte is missing" in message
    assert "wheels/extra.whl is not in the manifest" in message
    assert f"wheels/{TORCH} has SHA-256 {hashlib.sha256(b'wheel bytez').hexdigest()}" in message
    assert "nothing was imported" in message
    assert not any(path.exists() for path in offline(tmp_path))


def test_a_re_hashed_manifest_is_refused_by_its_digest(tmp_path):
    """The attack a checksum list alone cannot stop: a wheel altered and the manifest
    re-hashed to match. The digest recorded where the bundle was made no longer matches."""
    bundle, _, _, digest, _ = make(tmp_path)
    (bundle / "wheels" / TORCH).write_bytes(b"evil wheel!")
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    manifest["files"][f"wheels/{TORCH}"] = {
        "sha256": hashlib.sha256(b"evil wheel!").hexdigest(),
        "bytes": 11,
    }
    (bundle / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    forged = hashlib.sha256((bundle / "MANIFEST.json").read_bytes()).hexdigest()
    with pytest.raises(bundle_module.BundleError) as refused:
        import_into(tmp_path, bundle, digest)
    message = str(refused.value)
    assert message.startswith("lab_cache_bundle_digest: the manifest of")
    assert f"has SHA-256 {forged}, not {digest}" in message
    assert "re-hashed" in message and "Nothing was imported" in message
    assert not any(path.exists() for path in offline(tmp_path))
    # The manifest the attacker's digest would accept is refused for the wheel all the same
    # once the digest of the real bundle is given: the digest is the only thing trusted.
    assert forged != digest


def test_import_refuses_a_directory_that_is_no_bundle(tmp_path):
    with pytest.raises(bundle_module.BundleError, match=r"has no MANIFEST\.json"):
        import_into(tmp_path, tmp_path, "0" * 64)
    (tmp_path / "MANIFEST.json").write_text('{"format": 2}')
    digest = hashlib.sha256(b'{"format": 2}').hexdigest()
    with pytest.raises(bundle_module.BundleError, match="not a manifest of format 1"):
        import_into(tmp_path, tmp_path, digest)
    escape = b'{"format": 1, "files": {"wheels/../../etc/x": {"bytes": 1, "sha256": "' + b"0" * 64
    escape += b'"}}}'
    (tmp_path / "MANIFEST.json").write_bytes(escape)
    with pytest.raises(bundle_module.BundleError, match="is not a file of apt/, wheels/"):
        import_into(tmp_path, tmp_path, hashlib.sha256(escape).hexdigest())


def relink(path: Path, target: Path) -> None:
    """Move PATH to TARGET and leave a symbolic link to it in its place."""
    shutil.move(path, target)
    os.symlink(target, path)


@pytest.mark.parametrize(
    ("linked", "named"),
    [
        ("wheels", "wheels is a symbolic link"),
        ("datasets/mnist/t10k-labels-idx1-ubyte", "t10k-labels-idx1-ubyte is a symbolic link"),
        ("apt/debrep", "apt/debrep is a symbolic link"),
    ],
)
def test_a_linked_part_of_a_bundle_is_refused_though_its_content_matches(tmp_path, linked, named):
    """A link anywhere in the bundle (a part, a directory, a file) refuses the bundle, though
    what it points at has exactly the listed content and the manifest is untouched."""
    bundle, _, _, digest, _ = make(tmp_path)
    relink(bundle / linked, tmp_path / "elsewhere")
    with pytest.raises(bundle_module.BundleError) as refused:
        import_into(tmp_path, bundle, digest)
    message = str(refused.value)
    assert named in message and "a bundle holds only directories and regular files" in message
    assert "nothing was imported" in message
    assert not any(path.exists() for path in offline(tmp_path))


def test_a_bundle_or_manifest_that_is_a_link_or_a_fifo_is_refused(tmp_path):
    bundle, _, _, digest, _ = make(tmp_path)
    os.symlink(bundle, tmp_path / "link")
    with pytest.raises(bundle_module.BundleError, match="is a symbolic link, not a directory"):
        import_into(tmp_path, tmp_path / "link", digest)
    relink(bundle / "MANIFEST.json", tmp_path / "manifest-elsewhere")
    with pytest.raises(bundle_module.BundleError, match=r"MANIFEST\.json is a symbolic link"):
        import_into(tmp_path, bundle, digest)
    (bundle / "MANIFEST.json").unlink()
    shutil.copy(tmp_path / "manifest-elsewhere", bundle / "MANIFEST.json")
    os.mkfifo(bundle / "wheels" / "pipe.whl")
    started = time.monotonic()
    with pytest.raises(bundle_module.BundleError, match=r"pipe\.whl is a special file"):
        import_into(tmp_path, bundle, digest)
    assert time.monotonic() - started < 5


def owned_by(path: Path, account: str) -> None:
    entry = pwd.getpwnam(account)
    os.chown(path, entry.pw_uid, entry.pw_gid)


@AS_ROOT
def test_links_planted_in_apt_cacher_ngs_cache_are_replaced_not_written_through(tmp_path):
    """apt-cacher-ng's account owns its cache and plants links there before the import: a
    file's name linked to a root-owned file outside, a directory's name linked to a root-owned
    directory outside. The import writes no byte through them and chowns nothing outside; the
    links are replaced by what the bundle holds, the account's."""
    bundle, _, _, digest, _ = make(tmp_path)
    _, offline_apt = offline(tmp_path)
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    (victim / "shadow").write_text("root:secret\n")
    (victim / "shadow").chmod(0o600)
    victim_dir = tmp_path / "root-dir"
    victim_dir.mkdir(mode=0o755)
    before = {"file": tree_state(victim), "dir": tree_state(victim_dir), "top": victim.stat()}
    jammy = offline_apt / "amd/rocm/apt/6.4.2/dists/jammy"
    jammy.mkdir(parents=True)
    for directory in [offline_apt, *jammy.relative_to(offline_apt).parents, jammy]:
        owned_by(offline_apt / directory, "nobody")
    os.symlink(victim / "shadow", jammy / "InRelease")
    os.symlink(victim_dir, offline_apt / "debrep")
    changed, _, _ = import_into(tmp_path, bundle, digest, owner="nobody")
    assert changed
    assert tree_state(victim) == before["file"], "a file outside the cache was written or chowned"
    assert tree_state(victim_dir) == before["dir"], "a directory outside the cache was written"
    assert victim.stat().st_uid == 0 and victim_dir.stat().st_uid == 0
    nobody = pwd.getpwnam("nobody").pw_uid
    for path, content in (
        (jammy / "InRelease", b"-----BEGIN PGP SIGNED MESSAGE-----\n"),
        (offline_apt / LIBNUMA_DEB, b"!<arch>\ndebian-binary"),
    ):
        info = path.lstat()
        assert stat.S_ISREG(info.st_mode) and info.st_uid == nobody, path
        assert path.read_bytes() == content
    debrep = (offline_apt / "debrep").lstat()
    assert stat.S_ISDIR(debrep.st_mode) and debrep.st_uid == nobody
    # The lab cache's own parts are root's.
    assert (offline(tmp_path)[0] / "wheels" / TORCH).stat().st_uid == 0


@AS_ROOT
def test_a_file_where_the_bundle_has_a_directory_stops_the_import_there(tmp_path):
    bundle, _, _, digest, _ = make(tmp_path)
    _, offline_apt = offline(tmp_path)
    offline_apt.mkdir()
    (offline_apt / "debrep").write_text("the account's own file")
    with pytest.raises(bundle_module.BundleError, match="is a regular file where a directory"):
        import_into(tmp_path, bundle, digest, owner="nobody")
    assert (offline_apt / "debrep").read_text() == "the account's own file"


def test_links_in_the_cache_are_left_out_of_a_bundle(tmp_path):
    """Making a bundle reads apt-cacher-ng's cache as root: a link the account planted to a
    file only root may read does not carry that file into the bundle."""
    apt, _ = filled_cache(tmp_path)
    secret = tmp_path / "shadow"
    secret.write_text("root:secret\n")
    secret.chmod(0o600)
    os.symlink(secret, apt / "amd" / "stolen")
    os.symlink(tmp_path, apt / "debrep" / "up")
    os.mkfifo(apt / "amd" / "pipe")
    bundle, changed, manifest, _, skipped = make(tmp_path)
    assert changed
    assert skipped == ["apt/amd/pipe", "apt/amd/stolen", "apt/debrep/up"]
    assert not any("stolen" in name or "/up" in name for name in manifest["files"])
    assert not any(b"root:secret" in p.read_bytes() for p in bundle.rglob("*") if p.is_file())


def test_an_existing_directory_the_module_did_not_make_is_refused_untouched(tmp_path):
    """A USB stick's root, the cache's root, or a bundle directory copied from elsewhere (its
    marker is not this cache's record) is refused and left exactly as it was."""
    filled_cache(tmp_path)
    stick = tmp_path / "usb"
    (stick / "photos").mkdir(parents=True)
    (stick / "photos" / "a.jpg").write_bytes(b"jpeg")
    (stick / "notes.txt").write_text("mine")
    before = tree_state(stick)
    with pytest.raises(bundle_module.BundleError) as refused:
        make(tmp_path, bundle=stick)
    message = str(refused.value)
    assert message.startswith(f"lab_cache_bundle_dest: {stick} exists and is a directory")
    assert "nothing in it removed or changed" in message
    assert f"for example {stick}/rocmlab-bundle" in message
    assert tree_state(stick) == before
    # An empty directory, and a link to a directory, are refused the same.
    (tmp_path / "empty").mkdir()
    with pytest.raises(bundle_module.BundleError, match="did not make"):
        make(tmp_path, bundle=tmp_path / "empty")
    os.symlink(stick, tmp_path / "to-stick")
    with pytest.raises(bundle_module.BundleError, match="is a symbolic link that"):
        make(tmp_path, bundle=tmp_path / "to-stick")
    assert tree_state(stick) == before
    # Inside it, a bundle is made and then replaced on a later run.
    inside = stick / "rocmlab-bundle"
    assert make(tmp_path, bundle=inside)[1]
    (tmp_path / "lab-cache" / "wheels" / TORCH).write_bytes(b"newer wheel")
    assert make(tmp_path, bundle=inside)[1]
    assert (inside / "wheels" / TORCH).read_bytes() == b"newer wheel"
    assert {p.name for p in stick.iterdir()} == {"photos", "notes.txt", "rocmlab-bundle"}
    # A bundle directory whose marker this cache did not record (copied from another cache).
    other = tmp_path / "copied"
    shutil.copytree(inside, other)
    with pytest.raises(bundle_module.BundleError, match="did not make"):
        make(tmp_path, bundle=other)


def test_a_bundle_inside_the_cache_or_holding_it_is_refused(tmp_path):
    apt, root = filled_cache(tmp_path)
    for dest in (root, root / "wheels" / "bundle", apt / "bundle", tmp_path):
        with pytest.raises(bundle_module.BundleError, match="lies in or holds"):
            make(tmp_path, bundle=dest)
    assert sorted(p.name for p in (root / "wheels").iterdir()) == [TORCH]
