"""Unit tests for plugins/filter/frameworks.py: what pytorch_rocm and tensorflow_rocm install from
where, over every row of the roles' tables (their vars/main.yml), and every refusal."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "frameworks_filters", REPO / "plugins" / "filter" / "frameworks.py"
)
assert _spec is not None and _spec.loader is not None
fw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fw)


def _vars(role: str) -> dict:
    return yaml.safe_load((REPO / "roles" / role / "vars" / "main.yml").read_text())


TORCH = _vars("pytorch_rocm")["__pytorch_rocm_releases"]
TF_VARS = _vars("tensorflow_rocm")
TF = TF_VARS["__tensorflow_rocm_releases"]
TF_UPSTREAM = TF_VARS["__tensorflow_rocm_upstream_python"]
DEBIAN13 = yaml.safe_load((REPO / "roles/pytorch_rocm/vars/Debian-13.yml").read_text())[
    "__pytorch_rocm_distro_packages"
]
INDEX_BASE = "https://mirror.lab/whl"
AMD_BASE = "https://mirror.lab/rocm/manylinux"
WHEELHOUSE = "http://mirror.lab/wheels/"


def ran(version: str) -> dict:
    """What the command module registers for the interpreter printing VERSION."""
    return {"rc": 0, "stdout": version, "stderr": "", "changed": False}


def torch_settings(**changes) -> dict:
    base = {
        "source": "pip",
        "version": "2.9.1",
        "rocm_version": "6.4",
        "torchvision": True,
        "index_url": f"{INDEX_BASE}/rocm6.4",
        "find_links": "",
        "index_base_url": INDEX_BASE,
        "python": "/usr/bin/python3",
        "venv": "/opt/rocmlab/venvs/pytorch",
        "releases": TORCH,
        "distro_packages": None,
        "distribution": "Debian 12.11",
    }
    return {**base, **changes}


def tf_settings(**changes) -> dict:
    base = {
        "rocm_version": "6.4",
        "version": "2.18.1",
        "package": "tensorflow-rocm",
        "python": "/usr/bin/python3",
        "index_url": "",
        "find_links": f"{AMD_BASE}/rocm-rel-6.4/",
        "no_index": False,
        "amd_base_url": AMD_BASE,
        "venv": "/opt/rocmlab/venvs/tensorflow",
        "releases": TF,
        "upstream_python": TF_UPSTREAM,
    }
    return {**base, **changes}


def folded(text: str) -> str:
    return " ".join(text.split())


# --- the tables themselves ----------------------------------------------------------------


def test_the_torch_table_is_well_formed():
    assert list(TORCH) == sorted(TORCH, key=lambda r: tuple(map(int, r.split("."))))
    for release, row in TORCH.items():
        assert re.fullmatch(r"2\.[0-9]+", release)
        assert row["rocm"], release
        for rocm, index in row["rocm"].items():
            assert re.fullmatch(r"[0-9]+\.[0-9]+", rocm)
            assert re.fullmatch(r"rocm[0-9]+(\.[0-9]+)+", index)
            assert index.startswith(f"rocm{rocm}"), (release, rocm, index)
        assert re.fullmatch(r"0\.[0-9]+", row["torchvision"])
        assert row["python"] and all(re.fullmatch(r"3\.[0-9]+", p) for p in row["python"])


def test_the_tensorflow_tables_are_well_formed():
    for rocm, row in TF.items():
        assert re.fullmatch(r"[0-9]+\.[0-9]+", rocm)
        assert row["source"] in ("pypi", "amd")
        assert row["tensorflow"] and all(
            re.fullmatch(r"2\.[0-9]+\.[0-9]+", v) for v in row["tensorflow"]
        )
        assert row["python"]
        for version in row["tensorflow"]:
            assert fw._major_minor(version) in TF_UPSTREAM, (rocm, version)
    # AMD hosts the wheels from ROCm 6.1 on; PyPI's tensorflow-rocm stops at ROCm 6.0.
    assert [r for r, row in TF.items() if row["source"] == "pypi"] == ["6.0"]


# --- PyTorch ------------------------------------------------------------------------------

TORCH_ROWS = [
    (release, rocm, python)
    for release, row in TORCH.items()
    for rocm in row["rocm"]
    for python in row["python"]
]


@pytest.mark.parametrize(("release", "rocm", "python"), TORCH_ROWS)
def test_every_torch_row_plans_its_index_torchvision_and_python(release, rocm, python):
    row = TORCH[release]
    version = f"{release}.1"
    settings = torch_settings(
        version=version, rocm_version=f"{rocm}.2", index_url=f"{INDEX_BASE}/{row['rocm'][rocm]}"
    )
    plan = fw.pytorch_rocm_plan(settings, ran(f"{python}.7"))
    assert plan["refusal"] == ""
    assert plan["index"] == row["rocm"][rocm]
    assert fw.pytorch_rocm_index(TORCH, version, f"{rocm}.2") == row["rocm"][rocm]
    assert plan["requirements"] == [f"torch=={version}", f"torchvision=={row['torchvision']}.*"]
    assert plan["python_found"] == {
        "path": "/usr/bin/python3",
        "version": f"{python}.7",
        "torch": release,
        "wheels_for": row["python"],
    }
    # One download: the wheels, from the configured index; upstream (what a lab cache fetches)
    # is where the host would fetch them without one.
    assert plan["downloads"] == [
        {
            "kind": "wheels",
            "what": "PyTorch wheels",
            "mirrors": [
                {"what": "PyTorch index", "urls": [f"{INDEX_BASE}/{row['rocm'][rocm]}/torch/"]}
            ],
            "upstream": {"index_url": f"{INDEX_BASE}/{row['rocm'][rocm]}", "find_links": ""},
            "requirements": plan["requirements"],
            "python": python,
            "path": "/opt/rocmlab/venvs/pytorch",
            "space": "venvs",
            "size": None,
        }
    ]


@pytest.mark.parametrize("release", list(TORCH))
def test_every_torch_row_refuses_a_python_without_wheels(release):
    row = TORCH[release]
    plan = fw.pytorch_rocm_plan(
        torch_settings(version=f"{release}.0", rocm_version=next(iter(row["rocm"]))),
        ran("3.7.9"),
    )
    assert plan["python_found"] is None and plan["downloads"] == []
    assert folded(plan["refusal"]) == (
        f"pytorch_rocm_version: torch {release} has no wheels for Python 3.7.9 (/usr/bin/python3);"
        f" its wheels are for Python {', '.join(row['python'])}. torch releases with wheels for"
        " Python 3.7: none in the table. Or set pytorch_rocm_python to an interpreter of a"
        " supported version."
    )


@pytest.mark.parametrize("release", list(TORCH))
def test_every_torch_row_refuses_a_rocm_release_it_is_not_built_for(release):
    row = TORCH[release]
    plan = fw.pytorch_rocm_plan(torch_settings(version=f"{release}.0", rocm_version="5.9"))
    assert folded(plan["refusal"]) == (
        f'pytorch_rocm_version "{release}.0" does not fit pytorch_rocm_rocm_version "5.9" (which'
        f" follows rocm_repo_version by default): torch {release} is built for ROCm"
        f" {', '.join(row['rocm'])}. No torch in the table is built for ROCm 5.9; set"
        f" pytorch_rocm_rocm_version to a ROCm release torch {release} is built for."
    )
    assert fw.pytorch_rocm_index(TORCH, f"{release}.0", "5.9") == ""


def test_a_pair_not_in_the_table_names_the_releases_built_for_that_rocm():
    plan = fw.pytorch_rocm_plan(torch_settings(version="2.9.1", rocm_version="7.2"))
    assert folded(plan["refusal"]) == (
        'pytorch_rocm_version "2.9.1" does not fit pytorch_rocm_rocm_version "7.2" (which follows'
        " rocm_repo_version by default): torch 2.9 is built for ROCm 6.4, 6.3. Torch releases"
        ' built for ROCm 7.2: 2.11, 2.12, 2.13, 2.14; set pytorch_rocm_version: "" to follow the'
        " ROCm release (torch 2.14), or pytorch_rocm_rocm_version to a ROCm release torch 2.9 is"
        " built for."
    )
    assert plan["downloads"] == [] and plan["python_found"] is None


def test_the_readmes_upgrade_with_a_pin_that_does_not_fit_names_the_torch_that_does():
    # The pin of a 6.4 host, kept in the inventory while rocm_repo_version moves to 7.1.
    plan = fw.pytorch_rocm_plan(torch_settings(version="2.9.1", rocm_version="7.1"), ran("3.11.2"))
    said = folded(plan["refusal"])
    assert said.startswith('pytorch_rocm_version "2.9.1" does not fit pytorch_rocm_rocm_version')
    assert 'Torch releases built for ROCm 7.1: 2.10; set pytorch_rocm_version: ""' in said
    assert "(torch 2.10)" in said


def test_an_unknown_torch_release_is_refused_whatever_the_source():
    for source in ("pip", "distro"):
        plan = fw.pytorch_rocm_plan(
            torch_settings(version="3.0.0", source=source, distro_packages=DEBIAN13)
        )
        assert plan["refusal"] == (
            "pytorch_rocm_version: torch 3.0.0 is not in the table of ROCm builds"
            f" (roles/pytorch_rocm/vars/main.yml). Known releases: {', '.join(TORCH)}. Leave"
            " pytorch_rocm_version empty to get the newest torch built for the ROCm release."
        )
    assert fw.pytorch_rocm_index(TORCH, "3.0.0", "6.4") == ""


def test_pip_needs_an_index_or_a_wheelhouse():
    plan = fw.pytorch_rocm_plan(torch_settings(index_url="", find_links=""), ran("3.11.2"))
    assert plan["refusal"].startswith(
        "pytorch_rocm_index_url and pytorch_rocm_find_links are both empty: set at least one"
    )
    assert f"{INDEX_BASE}/rocm6.4" in plan["refusal"]
    wheelhouse_only = fw.pytorch_rocm_plan(
        torch_settings(index_url="", find_links=WHEELHOUSE), ran("3.11.2")
    )
    assert wheelhouse_only["refusal"] == ""
    # What the lab cache fetches comes from where the host would fetch it without one; the
    # preflight asks the wheelhouse alone.
    (download,) = wheelhouse_only["downloads"]
    assert download["upstream"] == {"index_url": f"{INDEX_BASE}/rocm6.4", "find_links": ""}
    assert download["mirrors"] == [{"what": "PyTorch wheelhouse", "urls": [WHEELHOUSE]}]
    both = fw.pytorch_rocm_plan(
        torch_settings(index_url=f"{INDEX_BASE}/rocm6.4///", find_links=WHEELHOUSE), ran("3.11.2")
    )
    assert both["downloads"][0]["mirrors"] == [
        {"what": "PyTorch index", "urls": [f"{INDEX_BASE}/rocm6.4/torch/"]},
        {"what": "PyTorch wheelhouse", "urls": [WHEELHOUSE]},
    ]
    # A wheelhouse on the host's disk is not fetched: nothing to ask, the space still checked.
    local = fw.pytorch_rocm_plan(
        torch_settings(index_url="", find_links="/srv/wheels"), ran("3.11.2")
    )
    assert local["downloads"][0]["mirrors"] == []
    assert local["downloads"][0]["path"] == "/opt/rocmlab/venvs/pytorch"


@pytest.mark.parametrize(
    ("python", "why"),
    [
        ({"rc": 2, "msg": "[Errno 2] No such file", "stderr": "x"}, "[Errno 2] No such file"),
        ({"rc": 1, "stdout": "", "stderr": "Segmentation fault"}, "Segmentation fault"),
        (None, ""),
    ],
)
def test_an_interpreter_that_does_not_run_is_refused(python, why):
    plan = fw.pytorch_rocm_plan(torch_settings(python="/opt/py/bin/python3"), python)
    assert plan["refusal"] == (
        f"pytorch_rocm_python: /opt/py/bin/python3 does not run ({why}). Install python3 or point"
        " pytorch_rocm_python at an interpreter."
    )
    tf = fw.tensorflow_rocm_plan(tf_settings(python="/opt/py/bin/python3"), python)
    assert tf["refusal"] == (
        f"tensorflow_rocm_python: /opt/py/bin/python3 does not run ({why}). Install python3 or"
        " point tensorflow_rocm_python at an interpreter."
    )


def test_a_python_without_wheels_names_the_releases_that_have_them():
    plan = fw.pytorch_rocm_plan(
        torch_settings(version="2.13.0", rocm_version="7.2", python="/tmp/python3.9"),
        ran("3.9.2"),
    )
    said = folded(plan["refusal"])
    assert "torch 2.13 has no wheels for Python 3.9.2 (/tmp/python3.9)" in said
    assert "its wheels are for Python 3.10, 3.11, 3.12, 3.13, 3.14" in said
    assert "torch releases with wheels for Python 3.9: 2.4, 2.5, 2.6, 2.7, 2.8." in said
    assert "pytorch_rocm_source: distro" not in said


def test_where_the_distribution_packages_torch_the_refusal_says_so():
    plan = fw.pytorch_rocm_plan(
        torch_settings(version="2.4.1", rocm_version="6.1", distro_packages=DEBIAN13),
        ran("3.13.5"),
    )
    assert (
        "This distribution packages PyTorch itself (python3-torch, a CPU build):"
        " pytorch_rocm_source: distro. Or set pytorch_rocm_python" in folded(plan["refusal"])
    )


@pytest.mark.parametrize("torchvision", [True, False])
def test_distro_source_installs_the_distributions_packages(torchvision):
    plan = fw.pytorch_rocm_plan(
        torch_settings(source="distro", distro_packages=DEBIAN13, torchvision=torchvision)
    )
    assert plan["refusal"] == ""
    assert plan["packages"] == ["python3-torch"] + (["python3-torchvision"] if torchvision else [])
    # Nothing for pip, and nothing for a lab cache to fetch: apt's packages, no mirror, no place.
    assert plan["python_found"] is None
    assert plan["downloads"] == [
        {
            "kind": "apt",
            "what": "PyTorch packages",
            "mirrors": [],
            "upstream": {},
            "requirements": plan["packages"],
            "python": None,
            "path": None,
            "space": None,
            "size": None,
        }
    ]


def test_distro_source_is_refused_where_the_distribution_has_no_pytorch():
    plan = fw.pytorch_rocm_plan(torch_settings(source="distro", distro_packages=None))
    assert plan["refusal"] == (
        'pytorch_rocm_source: "distro" is not available on Debian 12.11: no packaged PyTorch is'
        " known there (known: Debian 13, python3-torch). Use pytorch_rocm_source: pip."
    )


def test_torchvision_off_leaves_it_out_of_the_requirements():
    plan = fw.pytorch_rocm_plan(torch_settings(torchvision="no"), ran("3.11.2"))
    assert plan["requirements"] == ["torch==2.9.1"]


TORCH_PLAN = fw.pytorch_rocm_plan(torch_settings(), ran("3.11.2"))


@pytest.mark.parametrize(
    ("dists", "require", "reasons", "force"),
    [
        ({}, True, ["no torch", "torchvision missing instead of 0.24.*"], False),
        ({"torch": "2.9.1+rocm6.4", "torchvision": "0.24.1+rocm6.4"}, True, [], False),
        ({"torch": "2.9.1", "torchvision": "0.24.0"}, False, [], False),
        (
            {"torch": "2.8.0+rocm6.4", "torchvision": "0.24.1"},
            True,
            ["torch 2.8.0+rocm6.4 instead of 2.9.1"],
            False,
        ),
        (
            {"torch": "2.9.1+rocm6.4", "torchvision": "0.23.0"},
            True,
            ["torchvision 0.23.0 instead of 0.24.*"],
            False,
        ),
        (
            {"torch": "2.9.1+cpu", "torchvision": "0.24.1"},
            True,
            ["torch 2.9.1+cpu is not a ROCm build"],
            True,
        ),
        ({"torch": "2.9.1+cpu", "torchvision": "0.24.1"}, False, [], False),
        # The host moved to another ROCm release: its torch is rebuilt, whatever require says.
        (
            {"torch": "2.9.1+rocm6.3", "torchvision": "0.24.1+rocm6.3"},
            False,
            ["torch 2.9.1+rocm6.3 is built for ROCm 6.3, not ROCm 6.4"],
            True,
        ),
        (
            {"torch": "2.9.1+rocm6.2.4", "torchvision": "0.24.1+rocm6.2.4"},
            True,
            ["torch 2.9.1+rocm6.2.4 is built for ROCm 6.2, not ROCm 6.4"],
            True,
        ),
    ],
)
def test_pip_runs_only_for_a_missing_or_other_torch(dists, require, reasons, force):
    probe = {"dists": dists} if dists else {}
    assert fw.framework_pip(TORCH_PLAN, "pytorch_rocm", probe, require) == {
        "reasons": reasons,
        "force_reinstall": force,
        "others": [],
    }


def test_pip_leaves_torchvision_alone_when_it_is_off():
    plan = fw.pytorch_rocm_plan(torch_settings(torchvision=False), ran("3.11.2"))
    assert (
        fw.framework_pip(plan, "pytorch_rocm", {"dists": {"torch": "2.9.1+rocm6.4"}}, True)[
            "reasons"
        ]
        == []
    )


PROBE_ROCM = {
    "python": "3.11.2",
    "torch_version": "2.9.1+rocm6.4",
    "dists": {"torch": "2.9.1+rocm6.4", "torchvision": "0.24.1+rocm6.4"},
    "hip_version": "6.4.43482",
    "cuda_version": None,
    "cuda_available": True,
}
PROBE_CPU = {
    "python": "3.11.2",
    "torch_version": "2.9.1+cpu",
    "dists": {"torch": "2.9.1+cpu"},
    "hip_version": None,
    "cuda_version": None,
    "cuda_available": False,
}
VENV = "/opt/rocmlab/venvs/pytorch"


def test_a_rocm_build_is_recorded_and_accepted():
    plan = fw.pytorch_rocm_plan(
        torch_settings(index_url="https://user:secret@mirror.lab/whl/rocm6.4"), ran("3.11.2")
    )
    got = fw.framework_record(
        plan, "pytorch_rocm", PROBE_ROCM, True, True, f"{VENV}/bin/python", VENV
    )
    assert got == {
        "result": {
            "source": "pip",
            "venv": VENV,
            "python": f"{VENV}/bin/python",
            "python_version": "3.11.2",
            "torch_version": "2.9.1+rocm6.4",
            "torch_requested": "2.9.1",
            "torchvision_version": "0.24.1+rocm6.4",
            "hip_version": "6.4.43482",
            "cuda_version": None,
            "cuda_available": True,
            "gpu_present": True,
            "build": "rocm",
            "index_url": "https://***@mirror.lab/whl/rocm6.4",
            "find_links": "",
        },
        "refusal": "",
    }


def test_a_cpu_build_from_pip_is_refused_naming_where_it_came_from():
    plan = fw.pytorch_rocm_plan(
        torch_settings(index_url="", find_links="http://u:p@mirror.lab/wheels/"), ran("3.11.2")
    )
    got = fw.framework_record(
        plan, "pytorch_rocm", PROBE_CPU, False, True, f"{VENV}/bin/python", VENV
    )
    assert got["result"]["build"] == "cpu"
    assert got["result"]["find_links"] == "http://***@mirror.lab/wheels/"
    assert got["refusal"] == (
        f"pytorch_rocm: {VENV}/bin/python has torch 2.9.1+cpu, a CPU build (torch.version.hip:"
        " None, torch.version.cuda: None). It cannot use an AMD GPU: only a ROCm build"
        " (torch.version.hip set) can. It came from no index + http://***@mirror.lab/wheels/;"
        f" point pytorch_rocm_index_url at PyTorch's ROCm index ({INDEX_BASE}/rocm6.4) or the"
        " wheelhouse at ROCm wheels. On a host without an AMD GPU (CI), set"
        " pytorch_rocm_require_rocm_build: false."
    )
    # Recorded, not refused, where a CPU build is installed on purpose.
    assert (
        fw.framework_record(plan, "pytorch_rocm", PROBE_CPU, False, False, "p", VENV)["refusal"]
        == ""
    )


def test_a_cuda_build_is_refused_and_the_distributions_build_points_at_pip():
    plan = fw.pytorch_rocm_plan(torch_settings(source="distro", distro_packages=DEBIAN13))
    probe = {**PROBE_CPU, "torch_version": "2.6.0", "cuda_version": "12.4"}
    got = fw.framework_record(plan, "pytorch_rocm", probe, False, True, "/usr/bin/python3", VENV)
    assert got["result"]["build"] == "cuda"
    assert got["result"]["venv"] is None
    assert got["result"]["index_url"] == "" and got["result"]["find_links"] == ""
    assert "a CUDA build (torch.version.hip: None, torch.version.cuda: 12.4)" in got["refusal"]
    assert (
        "The distribution packages PyTorch without ROCm: use pytorch_rocm_source: pip."
        in (got["refusal"])
    )


def test_a_rocm_build_that_cannot_see_the_gpu_is_refused():
    plan = fw.pytorch_rocm_plan(torch_settings(rocm_version="6.4.2"), ran("3.11.2"))
    probe = {**PROBE_ROCM, "cuda_available": False}
    got = fw.framework_record(plan, "pytorch_rocm", probe, True, True, f"{VENV}/bin/python", VENV)
    assert got["refusal"] == (
        "pytorch_rocm: this host has /dev/kfd, but torch 2.9.1+rocm6.4 (HIP 6.4.43482) says"
        " torch.cuda.is_available() is False. Check that the kernel driver matches ROCm 6.4.2"
        " (within two releases), and run rocminfo: a GPU it lists as unsupported needs the"
        " gfx_override role (HSA_OVERRIDE_GFX_VERSION)."
    )
    # Without /dev/kfd there is no GPU to see.
    assert fw.framework_record(plan, "pytorch_rocm", probe, False, True, "p", VENV)["refusal"] == ""


# --- following the ROCm release -------------------------------------------------------------
# What each release of the support catalog gets where the frameworks' versions are left empty
# (the defaults): the newest torch and TensorFlow the tables build for it. A release added to the
# catalog fails the test below until it is written here.
CATALOG = json.loads((REPO / "src" / "rocmlab" / "data" / "catalog.json").read_text())
FOLLOWS = {
    "6.2": ("2.7", "rocm6.2.4", "0.22", "2.16.1"),
    "6.3": ("2.9", "rocm6.3", "0.24", "2.17.0"),
    "6.4": ("2.9", "rocm6.4", "0.24", "2.18.1"),
    "7.0": ("2.10", "rocm7.0", "0.25", "2.19.0"),
    "7.1": ("2.10", "rocm7.1", "0.25", "2.19.1"),
    "7.2": ("2.14", "rocm7.2", "0.29", "2.19.1"),
    # AMD's Core SDK line: its frameworks are TheRock's wheels, in neither table.
    "7.14": None,
    "10.0": None,
}


def test_every_catalog_release_is_written_down_with_what_its_frameworks_follow():
    assert {entry["version"] for entry in CATALOG["releases"]} == set(FOLLOWS)
    for entry in CATALOG["releases"]:
        assert (FOLLOWS[entry["version"]] is None) == (entry["line"] == "core"), entry["version"]


@pytest.mark.parametrize("rocm", [r for r, f in FOLLOWS.items() if f])
def test_torch_left_empty_follows_the_rocm_release_to_its_newest_build(rocm):
    release, index, torchvision, _ = FOLLOWS[rocm]
    plan = fw.pytorch_rocm_plan(
        torch_settings(version="", rocm_version=f"{rocm}.1", index_url=f"{INDEX_BASE}/{index}"),
        ran("3.12.3"),
    )
    assert plan["refusal"] == ""
    assert (plan["version"], plan["pinned"], plan["release"]) == (f"{release}.*", False, release)
    assert plan["index"] == index
    assert fw.pytorch_rocm_index(TORCH, "", f"{rocm}.1") == index
    assert plan["requirements"] == [f"torch=={release}.*", f"torchvision=={torchvision}.*"]
    assert plan["downloads"][0]["upstream"]["index_url"] == f"{INDEX_BASE}/{index}"
    # Nothing newer in the table is built for it.
    assert all(
        tuple(map(int, r.split("."))) <= tuple(map(int, release.split(".")))
        for r, row in TORCH.items()
        if rocm in row["rocm"]
    )


@pytest.mark.parametrize("rocm", [r for r, f in FOLLOWS.items() if f])
def test_tensorflow_left_empty_follows_the_rocm_release_to_its_newest_build(rocm):
    version = FOLLOWS[rocm][3]
    plan = fw.tensorflow_rocm_plan(tf_settings(version="", rocm_version=rocm), ran("3.12.3"))
    assert plan["refusal"] == ""
    assert (plan["version"], plan["pinned"]) == (version, False)
    assert plan["requirements"] == [f"tensorflow-rocm=={version}.*"]
    assert version == TF[rocm]["tensorflow"][0]


@pytest.mark.parametrize("rocm", [r for r, f in FOLLOWS.items() if not f])
def test_a_release_no_framework_is_built_for_is_refused_saying_what_to_do(rocm):
    torch = fw.pytorch_rocm_plan(torch_settings(version="", rocm_version=rocm), ran("3.12.3"))
    assert folded(torch["refusal"]) == (
        "pytorch_rocm_version: no torch in the table (roles/pytorch_rocm/vars/main.yml) is built"
        f" for ROCm {rocm} (pytorch_rocm_rocm_version, which follows rocm_repo_version by"
        " default), so there is none to follow. PyTorch for AMD's Core SDK releases (7.14 on)"
        " comes as TheRock's multi-arch wheels, which carry ROCm themselves:"
        " pytorch_rocm_source: wheels installs them. The newest ROCm"
        ' release the table has torch for is 7.2 (torch 2.14). Set pytorch_rocm_rocm_version: "7.2"'
        " (docs/core-sdk.md: the wheels bring their own ROCm libraries), or leave PyTorch out of"
        " the run (--skip-tags pytorch_rocm)."
    )
    assert torch["downloads"] == [] and torch["python_found"] is None
    tf = fw.tensorflow_rocm_plan(tf_settings(version="", rocm_version=rocm), ran("3.12.3"))
    said = folded(tf["refusal"])
    assert said.startswith(
        f"tensorflow_rocm_version: no TensorFlow in the table (roles/tensorflow_rocm/vars/main.yml)"
        f" is built for ROCm {rocm} (tensorflow_rocm_rocm_version"
    )
    assert "AMD's Core SDK releases (7.14 on) ship their frameworks as TheRock's" in said
    assert 'Set tensorflow_rocm_rocm_version: "7.2"' in said
    assert tf["downloads"] == []


def test_on_the_core_line_the_documented_setting_gets_the_newest_legacy_build():
    # docs/core-sdk.md: pytorch_rocm_rocm_version set to the legacy release whose wheels are used.
    plan = fw.pytorch_rocm_plan(
        torch_settings(version="", rocm_version="7.2", index_url=f"{INDEX_BASE}/rocm7.2"),
        ran("3.12.3"),
    )
    assert plan["refusal"] == "" and plan["requirements"][0] == "torch==2.14.*"


def test_distro_source_needs_no_torch_release_to_follow():
    plan = fw.pytorch_rocm_plan(
        torch_settings(version="", rocm_version="7.14", source="distro", distro_packages=DEBIAN13)
    )
    assert plan["refusal"] == "" and plan["packages"] == ["python3-torch", "python3-torchvision"]


def test_a_pin_is_kept_whatever_the_rocm_release_fits():
    # An inventory that pinned torch before keeps it: exactly that version, from its index.
    plan = fw.pytorch_rocm_plan(torch_settings(version="2.8.0", rocm_version="6.4"), ran("3.11.2"))
    assert plan["refusal"] == ""
    assert (plan["version"], plan["pinned"], plan["release"]) == ("2.8.0", True, "2.8")
    assert plan["requirements"] == ["torch==2.8.0", "torchvision==0.23.*"]
    tf = fw.tensorflow_rocm_plan(tf_settings(version="2.17.1", rocm_version="6.4"), ran("3.12.3"))
    assert (
        tf["refusal"] == "" and tf["pinned"] and tf["requirements"] == ["tensorflow-rocm==2.17.1.*"]
    )


FOLLOWED = fw.pytorch_rocm_plan(
    torch_settings(version="", rocm_version="7.1", index_url=f"{INDEX_BASE}/rocm7.1"),
    ran("3.11.2"),
)


@pytest.mark.parametrize(
    ("torch", "torchvision", "reasons", "force"),
    [
        ("2.10.0+rocm7.1", "0.25.0+rocm7.1", [], False),
        ("2.10.3+rocm7.1", "0.25.1+rocm7.1", [], False),
        # The host before the README's upgrade: 6.4's torch.
        (
            "2.9.1+rocm6.4",
            "0.24.1+rocm6.4",
            [
                "torch 2.9.1+rocm6.4 instead of 2.10.*",
                "torchvision 0.24.1+rocm6.4 instead of 0.25.*",
                "torch 2.9.1+rocm6.4 is built for ROCm 6.4, not ROCm 7.1",
            ],
            True,
        ),
        (
            "2.10.0+rocm7.0",
            "0.25.0+rocm7.0",
            ["torch 2.10.0+rocm7.0 is built for ROCm 7.0, not ROCm 7.1"],
            True,
        ),
        ("2.1.0+rocm7.1", "0.25.0", ["torch 2.1.0+rocm7.1 instead of 2.10.*"], False),
    ],
)
def test_a_followed_torch_is_any_patch_release_of_its_release(torch, torchvision, reasons, force):
    got = fw.framework_pip(
        FOLLOWED, "pytorch_rocm", {"dists": {"torch": torch, "torchvision": torchvision}}, True
    )
    assert got == {"reasons": reasons, "force_reinstall": force, "others": []}


def test_the_record_says_what_was_asked_and_what_was_installed():
    probe = {**PROBE_ROCM, "torch_version": "2.10.0+rocm7.1"}
    got = fw.framework_record(
        FOLLOWED, "pytorch_rocm", probe, True, True, f"{VENV}/bin/python", VENV
    )
    assert got["refusal"] == ""
    assert got["result"]["torch_requested"] == "2.10.*"
    assert got["result"]["torch_version"] == "2.10.0+rocm7.1"


# --- TensorFlow ---------------------------------------------------------------------------

TF_ROWS = [
    (rocm, version, python)
    for rocm, row in TF.items()
    for version in row["tensorflow"]
    for python in row["python"]
]


@pytest.mark.parametrize("rocm", list(TF))
def test_every_rocm_row_gives_its_newest_tensorflow_and_amds_listing(rocm):
    row = TF[rocm]
    assert fw.tensorflow_rocm_defaults(TF, f"{rocm}.1", AMD_BASE + "//") == {
        "newest": row["tensorflow"][0],
        "find_links": f"{AMD_BASE}/rocm-rel-{rocm}/" if row["source"] == "amd" else "",
    }


def test_a_rocm_release_not_in_the_table_has_no_defaults():
    assert fw.tensorflow_rocm_defaults(TF, "5.7", AMD_BASE) == {"newest": "", "find_links": ""}


@pytest.mark.parametrize(("rocm", "version", "python"), TF_ROWS)
def test_every_tensorflow_row_plans_its_pin_and_python(rocm, version, python):
    row = TF[rocm]
    plan = fw.tensorflow_rocm_plan(
        tf_settings(rocm_version=rocm, version=version), ran(f"{python}.4")
    )
    assert plan["refusal"] == ""
    digits = rocm.replace(".", "") + "0"
    if row["source"] == "pypi":
        pin = f"{version}.{digits}"
        assert plan["pin"] == pin
        assert re.match(plan["pin_regex"], pin)
        assert not re.match(plan["pin_regex"], version)
    else:
        assert plan["pin"] == f"{version}.*"
        assert re.match(plan["pin_regex"], version)
        assert re.match(plan["pin_regex"], f"{version}.{digits}")
        assert not re.match(plan["pin_regex"], f"{version}1")
        assert not re.match(plan["pin_regex"], f"{version}.{digits}.dev0")
    assert plan["requirements"] == [f"tensorflow-rocm=={plan['pin']}"]
    assert plan["python_found"] == {
        "path": "/usr/bin/python3",
        "version": f"{python}.4",
        "package": f"tensorflow-rocm {version}",
        "wheels_for": row["python"],
    }
    assert plan["downloads"] == [
        {
            "kind": "wheels",
            "what": "TensorFlow wheels",
            "mirrors": [{"what": "TensorFlow wheelhouse", "urls": [f"{AMD_BASE}/rocm-rel-6.4/"]}],
            "upstream": {
                "index_url": "",
                "find_links": f"{AMD_BASE}/rocm-rel-{rocm}/" if row["source"] == "amd" else "",
            },
            "requirements": plan["requirements"],
            "python": python,
            "path": "/opt/rocmlab/venvs/tensorflow",
            "space": "venvs",
            "size": None,
        }
    ]


@pytest.mark.parametrize("rocm", list(TF))
def test_every_rocm_row_refuses_a_python_without_tensorflow_rocm_wheels(rocm):
    row = TF[rocm]
    plan = fw.tensorflow_rocm_plan(
        tf_settings(rocm_version=rocm, version=row["tensorflow"][0]), ran("3.7.3")
    )
    where = "PyPI" if row["source"] == "pypi" else "AMD's listing"
    cp = " (cp310: Ubuntu 22.04, cp312: Ubuntu 24.04)" if row["source"] == "amd" else ""
    assert folded(plan["refusal"]) == (
        f"tensorflow_rocm_python: tensorflow-rocm {row['tensorflow'][0]} for ROCm {rocm} has no"
        f" wheels for Python 3.7.3 (/usr/bin/python3); {where} has them for Python"
        f" {', '.join(row['python'])}{cp}. ROCm releases with tensorflow-rocm wheels for Python"
        " 3.7: none in the table. Set tensorflow_rocm_python to an interpreter of a supported"
        " version."
    )


@pytest.mark.parametrize("release", list(TF_UPSTREAM))
def test_every_upstream_row_gives_the_pythons_of_other_packages(release):
    rocm, version = next(
        (r, v) for r, row in TF.items() for v in row["tensorflow"] if v.startswith(release + ".")
    )
    for python in TF_UPSTREAM[release]:
        plan = fw.tensorflow_rocm_plan(
            tf_settings(rocm_version=rocm, version=version, package="TensorFlow_CPU"),
            ran(f"{python}.0"),
        )
        assert plan["refusal"] == ""
        assert plan["dist"] == "tensorflow-cpu"
        assert plan["pin"] == version and plan["pin_regex"] == "^" + re.escape(version) + "$"
        assert plan["requirements"] == [f"TensorFlow_CPU=={version}"]
    refused = fw.tensorflow_rocm_plan(
        tf_settings(rocm_version=rocm, version=version, package="tensorflow-cpu"), ran("3.99.0")
    )
    assert (
        f"upstream TensorFlow {release} has them for Python {', '.join(TF_UPSTREAM[release])}."
        in folded(refused["refusal"])
    )


def test_a_release_the_upstream_table_lacks_says_so():
    releases = {**TF, "9.9": {"tensorflow": ["2.99.0"], "source": "amd", "python": ["3.12"]}}
    plan = fw.tensorflow_rocm_plan(
        tf_settings(releases=releases, rocm_version="9.9", version="2.99.0", package="tf-cpu"),
        ran("3.12.1"),
    )
    assert (
        "upstream TensorFlow 2.99 has them for Python none known to the table." in (plan["refusal"])
    )


def test_the_tensorflow_scenarios_refusals():
    said = fw.tensorflow_rocm_plan(tf_settings(), ran("3.11.2"))["refusal"]
    assert "tensorflow-rocm 2.18.1 for ROCm 6.4 has no wheels for Python 3.11" in said
    assert "AMD's listing has them for Python 3.10, 3.12 (cp310: Ubuntu 22.04" in said
    assert "ROCm releases with tensorflow-rocm wheels for Python 3.11: 6.0." in said
    said = fw.tensorflow_rocm_plan(
        tf_settings(package="tensorflow-cpu", python="/tmp/python3.13"), ran("3.13.5")
    )["refusal"]
    assert (
        "tensorflow-cpu 2.18.1 for ROCm 6.4 has no wheels for Python 3.13.5 (/tmp/python3.13)"
        in said
    )
    assert "upstream TensorFlow 2.18 has them for Python 3.9, 3.10, 3.11, 3.12." in said


def test_a_rocm_release_not_in_the_table_is_refused():
    plan = fw.tensorflow_rocm_plan(tf_settings(rocm_version="5.7.1"), ran("3.10.1"))
    assert plan["refusal"] == (
        "tensorflow_rocm_rocm_version: ROCm 5.7 is not in the table of TensorFlow builds"
        f" (roles/tensorflow_rocm/vars/main.yml). Known ROCm releases: {', '.join(TF)}; those"
        " with TensorFlow 2.18.1 (tensorflow_rocm_version): 6.4."
    )
    plan = fw.tensorflow_rocm_plan(tf_settings(rocm_version="5.7.1", version=""), ran("3.10.1"))
    assert plan["refusal"] == (
        "tensorflow_rocm_version: no TensorFlow in the table (roles/tensorflow_rocm/vars/main.yml)"
        " is built for ROCm 5.7 (tensorflow_rocm_rocm_version, which follows rocm_repo_version by"
        " default), so there is none to follow. The newest ROCm release the table has TensorFlow"
        f" for is 7.2 (TensorFlow 2.19.1). Known ROCm releases: {', '.join(TF)}. Set"
        ' tensorflow_rocm_rocm_version: "7.2" (docs/core-sdk.md), or leave TensorFlow off'
        " (tensorflow_rocm_enabled: false)."
    )


@pytest.mark.parametrize("rocm", list(TF))
def test_every_rocm_row_refuses_a_tensorflow_it_does_not_build(rocm):
    row = TF[rocm]
    plan = fw.tensorflow_rocm_plan(tf_settings(rocm_version=rocm, version="2.15.0"), ran("3.10.1"))
    if "2.15.0" in row["tensorflow"]:
        assert plan["refusal"] == ""
        return
    assert plan["refusal"] == (
        f'tensorflow_rocm_version "2.15.0" does not fit tensorflow_rocm_rocm_version "{rocm}"'
        f" (which follows rocm_repo_version by default): ROCm {rocm} has TensorFlow"
        f" {', '.join(row['tensorflow'])}; ROCm releases with TensorFlow 2.15.0: 6.1. Set"
        ' tensorflow_rocm_version: "" to follow the ROCm release (TensorFlow'
        f" {row['tensorflow'][0]}), or tensorflow_rocm_rocm_version to a ROCm release with"
        " TensorFlow 2.15.0."
    )


def test_a_tensorflow_no_rocm_release_builds_says_none():
    plan = fw.tensorflow_rocm_plan(tf_settings(version="2.99.0"))
    assert "ROCm releases with TensorFlow 2.99.0: none in the table." in plan["refusal"]


@pytest.mark.parametrize(
    ("no_index", "index_url", "find_links", "refused"),
    [
        (True, "", WHEELHOUSE, False),
        ("yes", "", WHEELHOUSE, False),
        (True, "", "", True),
        (True, "https://user:pw@mirror.lab/simple", WHEELHOUSE, True),
        (False, "", "", False),
        ("no", "https://mirror.lab/simple", "", False),
    ],
)
def test_no_index_needs_a_wheelhouse_and_no_index(no_index, index_url, find_links, refused):
    plan = fw.tensorflow_rocm_plan(
        tf_settings(
            package="tensorflow-cpu",
            no_index=no_index,
            index_url=index_url,
            find_links=find_links,
        ),
        ran("3.11.2"),
    )
    if not refused:
        assert plan["refusal"] == ""
        # The preflight asks the index's page of the package (not when pip reads the wheelhouse
        # alone) and a wheelhouse over HTTP.
        assert plan["downloads"][0]["mirrors"] == (
            [{"what": "TensorFlow index", "urls": [f"{index_url}/tensorflow-cpu/"]}]
            if index_url
            else []
        ) + ([{"what": "TensorFlow wheelhouse", "urls": [find_links]}] if find_links else [])
        return
    assert plan["downloads"] == []
    masked = index_url.replace("user:pw@", "***@")
    assert plan["refusal"] == (
        f'tensorflow_rocm_no_index {no_index}, tensorflow_rocm_index_url "{masked}",'
        f' tensorflow_rocm_find_links "{find_links}": tensorflow_rocm_no_index: true needs a'
        f" wheelhouse and no index (AMD's is {AMD_BASE}/rocm-rel-X.Y/)."
    )


TF_PLAN = fw.tensorflow_rocm_plan(tf_settings(python="/usr/bin/python3.12"), ran("3.12.3"))


@pytest.mark.parametrize(
    ("dists", "needed", "reason", "others"),
    [
        ({}, True, "tensorflow-rocm missing, wanted tensorflow-rocm==2.18.1.*", []),
        ({"tensorflow-rocm": "2.18.1"}, False, None, []),
        ({"tensorflow-rocm": "2.18.1.640"}, False, None, []),
        ({"tensorflow-rocm": "2.17.1"}, True, "tensorflow-rocm 2.17.1, wanted", []),
        (
            {"tensorflow-rocm": "2.18.1", "tensorflow-intel": "2.18.1"},
            False,
            None,
            ["tensorflow-intel"],
        ),
        ({"tensorflow-cpu": "2.18.1"}, True, "tensorflow-rocm missing", ["tensorflow-cpu"]),
    ],
)
def test_pip_runs_only_for_a_missing_or_other_tensorflow(dists, needed, reason, others):
    got = fw.framework_pip(TF_PLAN, "tensorflow_rocm", {"dists": dists} if dists else {})
    assert bool(got["reasons"]) is needed
    assert (got["others"], got["force_reinstall"]) == (others, False)
    if reason:
        (said,) = got["reasons"]
        assert said.startswith(reason)


TF_VENV = "/opt/rocmlab/venvs/tensorflow"
PROBE_TF_ROCM = {
    "python": "3.12.3",
    "dists": {"tensorflow-rocm": "2.18.1"},
    "tf_version": "2.18.1",
    "built_with_rocm": True,
    "gpus": ["/physical_device:GPU:0"],
}


def test_a_tensorflow_rocm_build_is_recorded_and_accepted():
    got = fw.framework_record(
        TF_PLAN, "tensorflow_rocm", PROBE_TF_ROCM, True, True, f"{TF_VENV}/bin/python", TF_VENV
    )
    assert got == {
        "result": {
            "venv": TF_VENV,
            "python": f"{TF_VENV}/bin/python",
            "python_version": "3.12.3",
            "package": "tensorflow-rocm",
            "package_version": "2.18.1",
            "tf_version": "2.18.1",
            "built_with_rocm": True,
            "gpus": ["/physical_device:GPU:0"],
            "gpu_present": True,
            "rocm_version": "6.4",
            "index_url": "",
            "find_links": f"{AMD_BASE}/rocm-rel-6.4/",
            "no_index": False,
        },
        "refusal": "",
    }


@pytest.mark.parametrize(
    ("rocm", "where"),
    [("6.0", "PyPI"), ("6.4", f"AMD's wheels ({AMD_BASE}/rocm-rel-6.4/)")],
)
def test_a_tensorflow_not_built_with_rocm_is_refused(rocm, where):
    plan = fw.tensorflow_rocm_plan(
        tf_settings(rocm_version=rocm, version=TF[rocm]["tensorflow"][0], package="tf-cpu"),
        ran("3.11.2"),
    )
    probe = {**PROBE_TF_ROCM, "dists": {"tf-cpu": "x"}, "built_with_rocm": False, "gpus": []}
    got = fw.framework_record(
        plan, "tensorflow_rocm", probe, False, True, f"{TF_VENV}/bin/python", TF_VENV
    )
    assert got["result"]["package_version"] == "x"
    assert got["refusal"] == (
        f"tensorflow_rocm: {TF_VENV}/bin/python has tf-cpu 2.18.1, which is not built with ROCm"
        " (tf.test.is_built_with_rocm() is False). It cannot use an AMD GPU. Install"
        f" tensorflow-rocm (tensorflow_rocm_package) from {where} or a wheelhouse holding them."
        " On a host without an AMD GPU (CI), set tensorflow_rocm_require_rocm_build: false."
    )
    assert (
        fw.framework_record(
            plan, "tensorflow_rocm", probe, False, False, f"{TF_VENV}/bin/python", TF_VENV
        )["refusal"]
        == ""
    )


def test_a_tensorflow_that_lists_no_gpu_on_a_gpu_host_is_refused():
    probe = {**PROBE_TF_ROCM, "gpus": []}
    got = fw.framework_record(
        TF_PLAN, "tensorflow_rocm", probe, True, True, f"{TF_VENV}/bin/python", TF_VENV
    )
    assert got["refusal"] == (
        "tensorflow_rocm: this host has /dev/kfd, but TensorFlow 2.18.1 lists no GPU"
        " (tf.config.list_physical_devices('GPU') is empty). Check that the kernel driver matches"
        " ROCm 6.4 and that the user space TensorFlow needs is installed (role rocm_packages), and"
        " run rocminfo: a GPU it lists as unsupported needs the gfx_override role"
        " (HSA_OVERRIDE_GFX_VERSION)."
    )
    assert (
        fw.framework_record(
            TF_PLAN, "tensorflow_rocm", probe, False, True, f"{TF_VENV}/bin/python", TF_VENV
        )["refusal"]
        == ""
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        ("yes", True),
        ("True", True),
        (1, True),
        (False, False),
        ("no", False),
        (0, False),
    ],
)
def test_booleans_are_read_as_ansibles_bool_filter_reads_them(value, expected):
    assert fw.truthy(value) is expected


def test_the_filters_are_exported():
    assert set(fw.FilterModule().filters()) == {
        "pytorch_rocm_index",
        "pytorch_rocm_plan",
        "tensorflow_rocm_defaults",
        "tensorflow_rocm_plan",
        "framework_plan",
        "framework_pip",
        "framework_record",
    }


def test_a_role_that_is_no_framework_is_named_in_the_error():
    with pytest.raises(ValueError, match="'rocm_repo' is no framework role"):
        fw.framework_pip(TORCH_PLAN, "rocm_repo", {})
