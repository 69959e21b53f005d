"""The one framework engine of plugins/filter/frameworks.py over every row of every table the
support catalog points to: each build (release x ROCm release x Python) the table lists gives a
plan that installs that release from its index, and every pair the table lacks is refused naming
what fits. A framework is a table (the catalog's "frameworks") and an entry of FRAMEWORKS: a third
one is a case below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from rocmlab_testutil import load_module

REPO = Path(__file__).resolve().parents[2]
fw = load_module("frameworks_engine", REPO / "plugins" / "filter" / "frameworks.py")

CATALOG = json.loads((REPO / "src" / "rocmlab" / "data" / "catalog.json").read_text())
TABLES = {
    name: yaml.safe_load((REPO / pointer["file"]).read_text())[pointer["table"]]
    for name, pointer in CATALOG["frameworks"].items()
}
INDEX = "https://mirror.lab/whl"
AMD = "https://mirror.lab/rocm/manylinux"
VENV = "/opt/rocmlab/venvs/framework"
UPSTREAM_TF = yaml.safe_load((REPO / "roles/tensorflow_rocm/vars/main.yml").read_text())[
    "__tensorflow_rocm_upstream_python"
]


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def torch_settings(version: str, rocm: str) -> dict:
    row = TABLES["pytorch"].get(fw._major_minor(version)) or {}
    return {
        "source": "pip",
        "version": version,
        "rocm_version": rocm,
        "torchvision": True,
        "index_url": f"{INDEX}/{row.get('rocm', {}).get(rocm, 'rocm0.0')}",
        "find_links": "",
        "index_base_url": INDEX,
        "python": "/usr/bin/python3",
        "venv": VENV,
        "releases": TABLES["pytorch"],
        "distro_packages": None,
        "distribution": "Debian 12.11",
    }


def tf_settings(version: str, rocm: str) -> dict:
    return {
        "rocm_version": rocm,
        "version": version,
        "package": "tensorflow-rocm",
        "python": "/usr/bin/python3",
        "index_url": "",
        "find_links": f"{AMD}/rocm-rel-{rocm}/",
        "no_index": False,
        "amd_base_url": AMD,
        "venv": VENV,
        "releases": TABLES["tensorflow"],
        "upstream_python": UPSTREAM_TF,
    }


WHEELS = "https://mirror.lab/rocm/whl-multi-arch/"


def jax_settings(version: str, rocm: str) -> dict:
    return {
        "version": version,
        "rocm_version": rocm,
        "index_url": WHEELS,
        # jax and jaxlib are PyPI's: a lab's wheelhouse beside ROCm's index.
        "find_links": "http://mirror.lab/wheels/",
        "python": "/usr/bin/python3",
        "venv": VENV,
        "releases": TABLES["jax"],
        "gfx_targets": ["gfx90a"],
        "wheels_index_url": WHEELS,
    }


def _jax_installed(release: str, rocm: str) -> dict:
    major = rocm.split(".")[0]
    return {
        "jax": release,
        f"jax-rocm{major}-plugin": release,
        f"jax-rocm{major}-pjrt": release,
        "rocm-sdk-device-gfx90a": f"{rocm}.0",
    }


# Each framework, read from its table here (not by the engine): its builds as (release, ROCm
# release, Pythons), the pin that asks for a release, its settings, what pip is asked for and
# where the wheels come from upstream.
CASES = {
    "pytorch": {
        "builds": lambda table: [
            (release, rocm, row["python"]) for release, row in table.items() for rocm in row["rocm"]
        ],
        "pin": lambda release: f"{release}.1",
        "settings": torch_settings,
        "requirement": lambda release, rocm: f"torch=={release}.1",
        "followed": lambda release, rocm: f"torch=={release}.*",
        # What probe.py finds in a venv where pip installed the build.
        "installed": lambda release, rocm: {
            "torch": f"{release}.1+rocm{rocm}",
            "torchvision": f"{TABLES['pytorch'][release]['torchvision']}.0+rocm{rocm}",
        },
        "upstream": lambda release, rocm: {
            "index_url": f"{INDEX}/{TABLES['pytorch'][release]['rocm'][rocm]}",
            "find_links": "",
        },
    },
    "tensorflow": {
        "builds": lambda table: [
            (version, rocm, row["python"])
            for rocm, row in table.items()
            for version in row["tensorflow"]
        ],
        "pin": lambda release: release,
        "settings": tf_settings,
        # PyPI's tensorflow-rocm X.Y.Z.<ROCm digits>0; AMD's any X.Y.Z[.N].
        "requirement": lambda version, rocm: (
            f"tensorflow-rocm=={version}.{rocm.replace('.', '')}0"
            if TABLES["tensorflow"][rocm]["source"] == "pypi"
            else f"tensorflow-rocm=={version}.*"
        ),
        "followed": lambda version, rocm: CASES["tensorflow"]["requirement"](version, rocm),
        "installed": lambda version, rocm: {
            "tensorflow-rocm": CASES["tensorflow"]["requirement"](version, rocm)
            .split("==")[1]
            .replace(".*", "")
        },
        "upstream": lambda version, rocm: {
            "index_url": "",
            "find_links": (
                f"{AMD}/rocm-rel-{rocm}/" if TABLES["tensorflow"][rocm]["source"] == "amd" else ""
            ),
        },
    },
    "jax": {
        "builds": lambda table: [
            (release, rocm, row["python"])
            for release, row in table.items()
            for rocm in row["wheels"]
        ],
        "pin": lambda release: release,
        "settings": jax_settings,
        "requirement": lambda release, rocm: f"jax=={release}",
        "followed": lambda release, rocm: f"jax=={release}",
        "installed": _jax_installed,
        # ROCm's wheels pass through a lab cache as clients ask: none fetches them ahead.
        "upstream": lambda release, rocm: {},
        # jax and jaxlib (PyPI's) a lab cache fetches into its wheelhouse.
        "more": lambda release: [[f"jax=={release}", f"jaxlib=={release}"]],
        # A ROCm release past the table's newest (10.0 has JAX).
        "beyond": "11.0",
    },
}


def builds(name: str) -> list[tuple[str, str, list]]:
    return CASES[name]["builds"](TABLES[name])


def plan(name: str, version: str, rocm: str, python: str | None) -> dict:
    ran = {"rc": 0, "stdout": python, "stderr": ""} if python else None
    return fw._engine_plan(fw.FRAMEWORKS[name], CASES[name]["settings"](version, rocm), ran)


BUILDS = [(name, *build) for name in CASES for build in builds(name)]
WITH_PYTHON = [(name, r, rocm, py) for name, r, rocm, pythons in BUILDS for py in pythons]


def test_every_framework_the_catalog_points_to_has_an_engine_entry_and_a_case():
    assert set(fw.FRAMEWORKS) == set(CATALOG["frameworks"]) == set(CASES)
    for name, framework in fw.FRAMEWORKS.items():
        assert CATALOG["frameworks"][name]["file"] == f"roles/{framework['role']}/vars/main.yml"
    # The thin entries are the engine's plan for their framework.
    torch, tf = torch_settings("2.9.1", "6.4"), tf_settings("2.18.1", "6.4")
    python = {"rc": 0, "stdout": "3.12.3"}
    assert fw.pytorch_rocm_plan(torch, python) == fw._engine_plan(fw.PYTORCH, torch, python)
    assert fw.tensorflow_rocm_plan(tf, python) == fw._engine_plan(fw.TENSORFLOW, tf, python)


@pytest.mark.parametrize(("name", "release", "rocm", "python"), WITH_PYTHON)
def test_every_build_installs_its_release_from_its_index(name, release, rocm, python):
    case = CASES[name]
    got = plan(name, case["pin"](release), f"{rocm}.2", f"{python}.4")
    assert got["refusal"] == ""
    assert got["requirements"][0] == case["requirement"](release, rocm)
    download, *more = got["downloads"]
    assert download["kind"] == "wheels" and download["python"] == python
    assert download["requirements"] == got["requirements"] and download["path"] == VENV
    assert download["upstream"] == case["upstream"](release, rocm)
    assert [m["requirements"] for m in more] == case.get("more", lambda release: [])(release)
    assert all(m["python"] == python and m["upstream"] for m in more)
    assert got["python_found"]["version"] == f"{python}.4"


@pytest.mark.parametrize(("name", "release", "rocm", "pythons"), BUILDS)
def test_pip_leaves_every_installed_build_alone_and_replaces_another(name, release, rocm, pythons):
    case, framework = CASES[name], fw.FRAMEWORKS[name]
    planned = plan(name, case["pin"](release), rocm, f"{pythons[0]}.1")
    installed = case["installed"](release, rocm)
    assert fw._engine_pip(framework, planned, {"dists": installed}, True) == {
        "reasons": [],
        "force_reinstall": False,
        "others": [],
    }
    # The same release built for another ROCm release, or nothing yet: pip runs.
    other = {dist: version.replace(f"rocm{rocm}", "rocm0.9") for dist, version in installed.items()}
    if other != installed:
        assert fw._engine_pip(framework, planned, {"dists": other}, True)["force_reinstall"]
    assert fw._engine_pip(framework, planned, {}, True)["reasons"]


@pytest.mark.parametrize(("name", "release", "rocm", "pythons"), BUILDS)
def test_every_build_refuses_a_python_it_has_no_wheels_for(name, release, rocm, pythons):
    got = plan(name, CASES[name]["pin"](release), rocm, "3.7.9")
    assert got["downloads"] == [] and got["python_found"] is None
    assert "has no wheels for Python 3.7.9 (/usr/bin/python3)" in got["refusal"]
    assert f"for Python {', '.join(pythons)}" in " ".join(got["refusal"].split())


MISFITS = [
    (name, release, rocm)
    for name in CASES
    for release in dict.fromkeys(r for r, _, _ in builds(name))
    # Every ROCm release of the table, and one it lacks.
    for rocm in [*dict.fromkeys(rocm for _, rocm, _ in builds(name)), "5.7"]
    if (release, rocm) not in {(r, rocm_) for r, rocm_, _ in builds(name)}
]


@pytest.mark.parametrize(("name", "release", "rocm"), MISFITS)
def test_every_pair_not_in_the_table_is_refused_naming_what_fits(name, release, rocm):
    got = plan(name, CASES[name]["pin"](release), rocm, "3.12.3")
    said = " ".join(got["refusal"].split())
    assert said and got["downloads"] == [] and got["python_found"] is None
    # The ROCm releases this release is built for, and the releases built for that ROCm release.
    assert ", ".join(r for b, r, _ in builds(name) if b == release) in said
    fits = [b for b, r, _ in builds(name) if r == rocm]
    assert ", ".join(fits) in said if fits else "5.7" in said


@pytest.mark.parametrize(
    ("name", "rocm"),
    [(name, rocm) for name in CASES for rocm in dict.fromkeys(r for _, r, _ in builds(name))],
)
def test_every_rocm_release_left_to_follow_gets_its_newest_build(name, rocm):
    newest, pythons = max(
        ((b, p) for b, r, p in builds(name) if r == rocm), key=lambda b: _key(b[0])
    )
    got = plan(name, "", f"{rocm}.1", f"{pythons[-1]}.0")
    assert got["refusal"] == "" and got["pinned"] is False
    assert got["requirements"][0] == CASES[name]["followed"](newest, rocm)
    assert got["downloads"][0]["upstream"] == CASES[name]["upstream"](newest, rocm)


@pytest.mark.parametrize("name", list(CASES))
def test_a_rocm_release_no_build_follows_is_refused_naming_the_newest(name):
    newest = max((r for _, r, _ in builds(name)), key=_key)
    release = max((b for b, r, _ in builds(name) if r == newest), key=_key)
    beyond = CASES[name].get("beyond", "10.0")
    said = " ".join(plan(name, "", beyond, "3.12.3")["refusal"].split())
    role = fw.FRAMEWORKS[name]["role"]
    assert said.startswith(f"{role}_version: no ")
    assert f"is built for ROCm {beyond} ({role}_rocm_version" in said
    assert "The newest ROCm release the table has" in said and f"is {newest} (" in said
    assert f" {release})." in said and f'Set {role}_rocm_version: "{newest}"' in said
