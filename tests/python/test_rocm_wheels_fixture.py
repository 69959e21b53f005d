"""The ROCm wheels fixture (tests/fixtures/rocm_wheels) installs and answers as AMD's index does.

The index is built into a temporary directory with the small torch stand-in (the real torch's
repack is the same code on a 192 MB wheel: index.sh build), and pip installs from it through a
file:// index URL into fresh venvs on the host, with no network and no pip configuration.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "tests" / "fixtures" / "rocm_wheels" / "build_index.py"
FAIL_ENV = "ROCMLAB_FIXTURE_ROCM_SDK_TEST_FAIL"
FAIL_MARKER = "rocmlab-fixture-rocm-sdk-test-fail"


def _catalog_targets(release: str) -> list[str]:
    data = json.loads((REPO / "src" / "rocmlab" / "data" / "catalog.json").read_text())
    return next(r["targets"] for r in data["releases"] if r["version"] == release)


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "ROCM_SDK_"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_CACHE_DIR=str(tmp / "pip-cache"),
    )
    env.pop(FAIL_ENV, None)
    return env


class Venv:
    """A venv without pip of its own; the test's pip installs into it (pip --python)."""

    def __init__(self, path: Path, index: Path) -> None:
        self.path, self.index = path, index
        self.env = _env(path.parent)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "pip", "--python", str(self.path / "bin" / "python")]
        cmd += [*args, "--index-url", self.index.as_uri()]
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=300)

    def install(self, *reqs: str) -> None:
        done = self.pip("install", "--quiet", *reqs)
        assert done.returncode == 0, done.stdout + done.stderr

    def dists(self) -> dict[str, str]:
        code = "import json, importlib.metadata as m; print(json.dumps({d.metadata['Name']: "
        code += "[d.version, d.metadata['Summary']] for d in m.distributions()}))"
        out = self.run(str(self.path / "bin" / "python"), "-c", code).stdout
        return json.loads(out)

    def run(self, *cmd: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(cmd), env=env or self.env, capture_output=True, text=True, timeout=120
        )

    def rocm_sdk(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return self.run(str(self.path / "bin" / "rocm-sdk"), *args, env=env)


def _devices(dists: dict[str, list[str]]) -> set[str]:
    return {n.removeprefix("rocm-sdk-device-") for n in dists if n.startswith("rocm-sdk-device-")}


@pytest.fixture(scope="module")
def index(rocm_wheels_index) -> Path:
    """The index, built once per session (conftest.py)."""
    return rocm_wheels_index


@pytest.fixture(scope="module")
def rocm_venv(index, tmp_path_factory) -> Venv:
    venv = Venv(tmp_path_factory.mktemp("rocm-venv") / "venv", index)
    venv.install("rocm[libraries,device-gfx1100]==7.14.0")
    return venv


def test_rocm_extras_install_the_named_device_package_only(rocm_venv):
    dists = rocm_venv.dists()
    rocm = {n: v for n, v in dists.items() if n.startswith("rocm")}
    assert {n: v[0] for n, v in rocm.items()} == {
        "rocm": "7.14.0",
        "rocm-sdk-core": "7.14.0",
        "rocm-sdk-libraries": "7.14.0",
        "rocm-sdk-device-gfx1100": "7.14.0",
    }
    assert all("rocmlab test fixture" in summary for _, summary in rocm.values())


def test_rocm_sdk_version_and_targets_answer_as_amds(rocm_venv):
    version = rocm_venv.rocm_sdk("version")
    assert (version.returncode, version.stdout) == (0, "7.14.0\n")
    targets = rocm_venv.rocm_sdk("targets")
    # The real command prints the release's build targets (dist_info.json), not the installed
    # device packages.
    assert (targets.returncode, targets.stdout) == (0, ";".join(_catalog_targets("7.14")) + "\n")


def test_rocm_sdk_test_passes_and_fails_on_request(rocm_venv):
    ok = rocm_venv.rocm_sdk("test")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert re.search(r"^Ran 7 tests in [0-9.]+s$", ok.stdout, re.M)
    assert ok.stdout.rstrip().endswith("\nOK")
    assert "NOTE: Skipping profiler tests (not installed)" in ok.stdout

    failed = rocm_venv.rocm_sdk("test", env={**rocm_venv.env, FAIL_ENV: "1"})
    assert failed.returncode == 1
    assert failed.stdout.rstrip().endswith("FAILED (failures=1)")
    assert "FAIL: testFixtureFailureSwitch" in failed.stdout

    marker = rocm_venv.path / FAIL_MARKER
    marker.touch()
    try:
        assert rocm_venv.rocm_sdk("test").returncode == 1
    finally:
        marker.unlink()
    assert rocm_venv.rocm_sdk("test").returncode == 0


def test_a_device_added_later_is_installed_beside_the_first(rocm_venv):
    before = rocm_venv.rocm_sdk("targets").stdout
    rocm_venv.install("rocm[device-gfx90a]==7.14.0")
    assert _devices(rocm_venv.dists()) == {"gfx1100", "gfx90a"}
    assert rocm_venv.rocm_sdk("targets").stdout == before


def test_rocm_sdk_path_needs_devel(rocm_venv):
    done = rocm_venv.rocm_sdk("path", "--root")
    assert done.returncode == 1
    assert "Could not load the `rocm[devel]` package" in done.stderr


def test_torch_device_extra_pulls_its_rocm_release(index, tmp_path):
    venv = Venv(tmp_path / "venv", index)
    venv.install("torch[device-gfx1100]==2.13.0+rocm10.0.0")
    dists = {n: v[0] for n, v in venv.dists().items()}
    assert dists["torch"] == "2.13.0+rocm10.0.0"
    assert dists["amd-torch-device-gfx1100"] == "2.13.0+rocm10.0.0"
    assert {n: dists[n] for n in ("rocm", "rocm-sdk-core", "rocm-sdk-libraries")} == dict.fromkeys(
        ("rocm", "rocm-sdk-core", "rocm-sdk-libraries"), "10.0.0"
    )
    assert _devices(venv.dists()) == {"gfx1100"}
    assert "rocm-bootstrap" in dists
    probe = venv.run(
        str(venv.path / "bin" / "python"), "-c", "import torch; print(torch.__version__)"
    )
    assert probe.stdout == "2.13.0+rocm10.0.0\n"
    assert venv.rocm_sdk("version").stdout == "10.0.0\n"


def test_torch_local_versions_sort_rocm10_below_rocm7(index, tmp_path):
    """AMD's known issue (TheRock versioning.md, issue 7183) holds here: pin the full version."""
    venv = Venv(tmp_path / "venv", index)
    done = venv.pip("install", "--dry-run", "--quiet", "--report", "-", "torch==2.13.0")
    assert done.returncode == 0, done.stderr
    chosen = {
        i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(done.stdout)["install"]
    }
    assert chosen["torch"] == "2.13.0+rocm7.14.0"


def test_repacked_torch_has_amds_metadata_and_a_true_record(index):
    wheel = next((index / "torch").glob("torch-2.13.0+rocm7.14.0-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        info = "torch-2.13.0+rocm7.14.0.dist-info"
        meta = zf.read(f"{info}/METADATA").decode()
        record = {r[0]: r for r in csv.reader(io.StringIO(zf.read(f"{info}/RECORD").decode()))}
        assert set(record) == set(zf.namelist())
        for name in zf.namelist():
            if name.endswith("/RECORD"):
                continue
            data = zf.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert record[name][1:] == [f"sha256={digest}", str(len(data))], name
    head = meta.partition("\n\n")[0].splitlines()
    assert "Version: 2.13.0+rocm7.14.0" in head
    assert "Requires-Dist: rocm[libraries]==7.14.0" in head
    assert "Requires-Dist: rocm-bootstrap" in head
    assert "Provides-Extra: device-gfx90a" in head
    line = 'Requires-Dist: amd-torch-device-gfx90a == 2.13.0+rocm7.14.0; extra == "device-gfx90a"'
    assert line in head
    assert (
        'Requires-Dist: amd-torch-device-gfx1201 == 2.13.0+rocm7.14.0; extra == "device-all"'
        in head
    )


def test_simple_index_links_every_file_with_its_hash(index):
    projects = {p.name for p in index.iterdir() if p.is_dir()}
    root = (index / "index.html").read_text()
    assert {f"{p}/" for p in projects} == set(re.findall(r'href="([^"]+)"', root))
    for project in projects:
        page = (index / project / "index.html").read_text()
        files = {f.name for f in (index / project).iterdir() if f.name != "index.html"}
        links = dict(re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page))
        assert {h.replace("%2B", "+") for h in links} == files, project
        for href, digest in links.items():
            data = (index / project / href.replace("%2B", "+")).read_bytes()
            assert hashlib.sha256(data).hexdigest() == digest


def test_builder_refuses_an_unknown_release(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BUILDER), str(tmp_path), "--releases", "9.9"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "--releases: '9.9' is not a core-line release" in done.stderr
    assert "accepted: 10.0, 7.14" in done.stderr
    assert not (tmp_path / "stable").exists()


def test_jax_plugin_stand_ins_follow_jax_rocms_table_and_pull_their_pjrt(index, tmp_path):
    """jax_rocm<major>_* per ROCm major, for the JAX releases role jax_rocm pairs with each
    release (0.11.1 only on 10.0); the plugin pulls its PJRT of the same version, and nothing
    registers a jax plugin (a CPU jax beside them stays CPU)."""
    versions = {
        p.name: sorted(w.name.split("-")[1] for w in p.glob("*.whl"))
        for p in index.iterdir()
        if p.name.startswith("jax-rocm")
    }
    assert versions == {
        "jax-rocm7-plugin": ["0.10.1", "0.10.2", "0.11.0", "0.11.1"],
        "jax-rocm7-pjrt": ["0.10.1", "0.10.2", "0.11.0", "0.11.1"],
        "jax-rocm10-plugin": ["0.11.1"],
        "jax-rocm10-pjrt": ["0.11.1"],
    }
    venv = Venv(tmp_path / "venv", index)
    venv.install("jax_rocm7_plugin==0.10.2")
    dists = venv.dists()
    assert {n: v[0] for n, v in dists.items() if n.startswith("jax")} == {
        "jax_rocm7_plugin": "0.10.2",
        "jax_rocm7_pjrt": "0.10.2",
    }
    assert all(
        "rocmlab test fixture" in dists[n][1] for n in ("jax_rocm7_plugin", "jax_rocm7_pjrt")
    )
    site = next((venv.path / "lib").glob("python3*/site-packages"))
    assert not (site / "jax_plugins").exists()
    assert not [p for p in site.glob("jax_rocm7_*.dist-info/entry_points.txt")]
