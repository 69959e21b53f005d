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
    logs = write_logs(tmp_path, acng=ACNG.splitlines(keepends=True)[-1])
    with gzip.open(logs["apt_log"] + ".2.gz", "wt") as handle:
        handle.write(ACNG.splitlines(keepends=True)[0])
    Path(logs["apt_log"] + ".1").write_text(ACNG.splitlines(keepends=True)[1])
    Path(logs["apt_log"] + ".old").write_text("not a rotation\n")
    lines = list(stats_module.log_lines(logs["apt_log"]))
    assert lines == [ACNG.splitlines(keepends=True)[i] for i in (0, 1, -1)]
    empty = stats_module.stats(str(tmp_path / "none"), str(tmp_path / "none"), logs["fill_log"])
    assert empty["kinds"]["apt"]["served_requests"] == 0


def test_malformed_lines_are_skipped(tmp_path):
    acng = "garbage\n1796297116|X|10|ip|path\n1796297116|I|ten|ip|path\n" + ACNG
    nginx = "|200|5|ip|/wheels/x.whl\n" + NGINX
    fill = "{not json\n" + fills((1.0, "apt", "x", 5), (2.0, "wheels", "wheels/a.whl", 7))
    result = stats_module.stats(**write_logs(tmp_path, acng, nginx, fill))
    assert result["kinds"]["wheels"]["upstream_bytes"] == 7
    assert result["kinds"]["apt"]["upstream_fetches"] == 3


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


bundle_module = load("lab_cache_bundle")


def filled_cache(tmp_path: Path) -> tuple[Path, Path]:
    """A lab cache's files in their real places' layout: apt-cacher-ng's cache (a remapped
    repository's directory and its .head files, and its own _xstore bookkeeping), wheels/ and
    datasets/<name>/ under the lab cache's root."""
    apt = tmp_path / "acng"
    (apt / "amd/rocm/apt/6.4.2/dists/jammy").mkdir(parents=True)
    (apt / "amd/rocm/apt/6.4.2/dists/jammy/InRelease").write_text(
        "-----BEGIN PGP SIGNED MESSAGE-----\n"
    )
    (apt / "amd/rocm/apt/6.4.2/dists/jammy/InRelease.head").write_text("HTTP/1.1 200 OK\n")
    (apt / "_xstore/qstats").mkdir(parents=True)
    (apt / "_xstore/qstats/i").write_text("stats")
    root = tmp_path / "lab-cache"
    (root / "wheels").mkdir(parents=True)
    (root / "wheels" / TORCH).write_bytes(b"wheel bytes")
    (root / "datasets/mnist").mkdir(parents=True)
    (root / "datasets/mnist/t10k-labels-idx1-ubyte").write_bytes(b"labels")
    return apt, root


def test_bundle_holds_every_file_with_its_hash_and_skips_bookkeeping(tmp_path):
    apt, root = filled_cache(tmp_path)
    bundle = tmp_path / "bundle"
    changed, manifest = bundle_module.create(
        str(bundle), bundle_module.sources(str(root), str(apt)), 1.0
    )
    assert changed
    assert sorted(manifest["files"]) == [
        "apt/amd/rocm/apt/6.4.2/dists/jammy/InRelease",
        "apt/amd/rocm/apt/6.4.2/dists/jammy/InRelease.head",
        "datasets/mnist/t10k-labels-idx1-ubyte",
        f"wheels/{TORCH}",
    ]
    assert manifest["files"][f"wheels/{TORCH}"] == {
        "sha256": hashlib.sha256(b"wheel bytes").hexdigest(),
        "bytes": 11,
    }
    on_disk = json.loads((bundle / "MANIFEST.json").read_text())
    assert on_disk["files"] == manifest["files"]
    assert not (tmp_path / "bundle.part").exists()
    # Made again from an unchanged cache: left as it is; a changed file makes a new one.
    assert not bundle_module.create(str(bundle), bundle_module.sources(str(root), str(apt)), 2.0)[0]
    (root / "wheels" / TORCH).write_bytes(b"other wheel")
    assert bundle_module.create(str(bundle), bundle_module.sources(str(root), str(apt)), 3.0)[0]


def test_import_copies_a_sound_bundle_once(tmp_path):
    apt, root = filled_cache(tmp_path)
    bundle = tmp_path / "bundle"
    bundle_module.create(str(bundle), bundle_module.sources(str(root), str(apt)), 1.0)
    offline_root, offline_apt = tmp_path / "offline-root", tmp_path / "offline-acng"
    owner = getpass.getuser()
    changed, manifest = bundle_module.import_bundle(
        str(bundle), str(offline_root), str(offline_apt), owner
    )
    assert changed and len(manifest["files"]) == 4
    assert (offline_root / "wheels" / TORCH).read_bytes() == b"wheel bytes"
    assert (offline_apt / "amd/rocm/apt/6.4.2/dists/jammy/InRelease").exists()
    assert json.loads((offline_root / "bundle.json").read_text())["bundle"] == str(bundle)
    assert not bundle_module.import_bundle(str(bundle), str(offline_root), str(offline_apt), owner)[
        0
    ]


def test_import_refuses_an_altered_bundle_whole(tmp_path):
    apt, root = filled_cache(tmp_path)
    bundle = tmp_path / "bundle"
    bundle_module.create(str(bundle), bundle_module.sources(str(root), str(apt)), 1.0)
    (bundle / "wheels" / TORCH).write_bytes(b"wheel bytez")  # same size, other content
    (bundle / "wheels" / "extra.whl").write_bytes(b"x")
    (bundle / "datasets/mnist/t10k-labels-idx1-ubyte").unlink()
    offline_root, offline_apt = tmp_path / "offline-root", tmp_path / "offline-acng"
    with pytest.raises(bundle_module.BundleError) as refused:
        bundle_module.import_bundle(str(bundle), str(offline_root), str(offline_apt), "nobody")
    message = str(refused.value)
    assert "datasets/mnist/t10k-labels-idx1-ubyte is missing" in message
    assert "wheels/extra.whl is not in the manifest" in message
    assert f"wheels/{TORCH} has SHA-256 {hashlib.sha256(b'wheel bytez').hexdigest()}" in message
    assert "nothing was imported" in message
    assert not offline_root.exists() and not offline_apt.exists()


def test_import_refuses_a_directory_that_is_no_bundle(tmp_path):
    with pytest.raises(bundle_module.BundleError, match=r"has no MANIFEST\.json"):
        bundle_module.import_bundle(str(tmp_path), str(tmp_path / "r"), str(tmp_path / "a"), "x")
    (tmp_path / "MANIFEST.json").write_text('{"format": 2}')
    with pytest.raises(bundle_module.BundleError, match="not a manifest of format 1"):
        bundle_module.import_bundle(str(tmp_path), str(tmp_path / "r"), str(tmp_path / "a"), "x")
