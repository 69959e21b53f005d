"""pytorch_rocm_source: wheels - PyTorch from ROCm's multi-arch wheels (AMD's Core SDK): what the
plan asks pip for, that pip resolves exactly that from an index laid out as AMD's (the fixture
tests/fixtures/rocm_wheels), what makes pip run again, and the record's refusal of a venv that
lacks a GPU target's device code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rocmlab_testutil import load_module

REPO = Path(__file__).resolve().parents[2]
fw = load_module("frameworks_wheels", REPO / "plugins" / "filter" / "frameworks.py")
TORCH = yaml.safe_load((REPO / "roles/pytorch_rocm/vars/main.yml").read_text())[
    "__pytorch_rocm_releases"
]
WHEELS_INDEX = "https://mirror.lab/rocm/whl-multi-arch/"
WHEEL_BUILDS = [(release, rocm) for release, row in TORCH.items() for rocm in row.get("wheels", [])]


def settings(**changes) -> dict:
    base = {
        "source": "wheels",
        "version": "",
        "rocm_version": "7.14",
        "torchvision": True,
        "index_url": WHEELS_INDEX,
        "find_links": "",
        "index_base_url": "https://mirror.lab/whl",
        "python": "/usr/bin/python3",
        "venv": "/opt/rocmlab/venvs/pytorch",
        "releases": TORCH,
        "distro_packages": None,
        "distribution": "Debian 12.11",
        "gfx_targets": ["gfx90a"],
        "wheels_index_url": WHEELS_INDEX,
    }
    return {**base, **changes}


def ran(version: str = "3.11.2") -> dict:
    return {"rc": 0, "stdout": version, "stderr": ""}


def folded(text: str) -> str:
    return " ".join(text.split())


def test_the_table_pairs_the_core_sdk_releases_with_torch():
    catalog = json.loads((REPO / "src/rocmlab/data/catalog.json").read_text())
    core = {r["version"] for r in catalog["releases"] if r["line"] == "core"}
    assert {rocm for _, rocm in WHEEL_BUILDS} == core
    # TheRock's RELEASES.md: torch 2.11 to 2.14 on the multi-arch index.
    assert sorted({release for release, _ in WHEEL_BUILDS}) == ["2.11", "2.12", "2.13", "2.14"]


@pytest.mark.parametrize(("release", "rocm"), WHEEL_BUILDS)
def test_every_wheel_build_is_asked_for_with_its_targets_extras_and_rocm_release(release, rocm):
    tv = TORCH[release]["torchvision"]
    plan = fw.pytorch_rocm_plan(
        settings(version=f"{release}.1", rocm_version=rocm, gfx_targets=["gfx942", "gfx90a"]),
        ran(),
    )
    assert plan["refusal"] == ""
    assert plan["requirements"] == [
        f"torch[device-gfx90a,device-gfx942]=={release}.1",
        f"rocm=={rocm}.*",
        f"torchvision[device-gfx90a,device-gfx942]=={tv}.*",
    ]
    assert plan["probe_names"] == [
        "rocm",
        "rocm-sdk-core",
        "amd-torch-device-gfx90a",
        "amd-torch-device-gfx942",
    ]
    (download,) = plan["downloads"]
    # No lab cache fetches them ahead: one passes them through as its clients ask.
    assert download["upstream"] == {}
    assert download["mirrors"][0]["urls"] == [f"{WHEELS_INDEX}torch/"]


def test_left_empty_torch_follows_to_the_newest_release_with_wheels():
    plan = fw.pytorch_rocm_plan(settings(rocm_version="10.0.2", torchvision=False), ran())
    assert (plan["refusal"], plan["version"]) == ("", "2.14.*")
    assert plan["requirements"] == ["torch[device-gfx90a]==2.14.*", "rocm==10.0.*"]


def test_all_asks_for_every_targets_device_code():
    plan = fw.pytorch_rocm_plan(settings(gfx_targets=["gfx1100", "all"], torchvision=False), ran())
    assert plan["requirements"] == ["torch[device-all]==2.14.*", "rocm==7.14.*"]
    assert plan["device_packages"] == []


def test_a_host_without_a_gpu_and_no_targets_is_refused_naming_the_setting():
    plan = fw.pytorch_rocm_plan(settings(gfx_targets=[]), ran())
    assert folded(plan["refusal"]).startswith(
        "pytorch_rocm_gfx_targets is empty and no AMD GPU was found on this host"
    )
    assert "[gfx1100]" in plan["refusal"] and "[all]" in plan["refusal"]
    assert plan["downloads"] == []


def test_no_index_and_no_wheelhouse_is_refused_naming_the_multi_arch_index():
    plan = fw.pytorch_rocm_plan(settings(index_url=""), ran())
    assert folded(plan["refusal"]).startswith(
        "pytorch_rocm_index_url and pytorch_rocm_find_links are both empty: set"
        f" pytorch_rocm_index_url to ROCm's multi-arch index ({WHEELS_INDEX},"
    )


def test_a_legacy_release_with_wheels_is_refused_and_pip_is_named():
    plan = fw.pytorch_rocm_plan(settings(rocm_version="7.2"), ran())
    said = folded(plan["refusal"])
    assert said.startswith("pytorch_rocm_version: no torch in the table")
    assert "is built for ROCm 7.2" in said
    assert "use pytorch_rocm_source: pip for the ROCm releases before the Core SDK" in said


def test_pip_source_on_the_core_sdk_points_to_wheels():
    plan = fw.pytorch_rocm_plan(settings(source="pip", rocm_version="7.14"), ran())
    assert "pytorch_rocm_source: wheels installs them" in folded(plan["refusal"])


def test_a_python_without_wheels_is_refused_before_any_change():
    plan = fw.pytorch_rocm_plan(settings(version="2.13.0"), ran("3.9.2"))
    assert "has no wheels for Python 3.9.2" in plan["refusal"]


def _probe(**dists) -> dict:
    return {"python": "3.11.2", "dists": dists}


def test_pip_runs_for_a_missing_device_package_and_not_when_all_are_there():
    plan = fw.pytorch_rocm_plan(settings(version="2.13.0", torchvision=False), ran())
    torch = "2.13.0+rocm7.14.0"
    missing = fw.framework_pip(plan, "pytorch_rocm", _probe(torch=torch, rocm="7.14.0"), False)
    assert missing["reasons"] == ["amd-torch-device-gfx90a missing (extra device-gfx90a)"]
    there = _probe(torch=torch, rocm="7.14.0", **{"amd-torch-device-gfx90a": torch})
    assert fw.framework_pip(plan, "pytorch_rocm", there, False)["reasons"] == []
    # A torch of the other ROCm wheel release is replaced (pip takes it as torch==2.13.0).
    other = _probe(torch="2.13.0+rocm10.0.0", **{"amd-torch-device-gfx90a": "2.13.0+rocm10.0.0"})
    decided = fw.framework_pip(plan, "pytorch_rocm", other, False)
    assert decided["force_reinstall"] is True
    assert decided["reasons"] == ["torch 2.13.0+rocm10.0.0 is built for ROCm 10.0, not ROCm 7.14"]
    # Another source's build of the version (a venv made with pytorch_rocm_source: pip) is
    # replaced too, even where a ROCm build is not required: pip would keep it and add nothing.
    fresh = fw.framework_pip(plan, "pytorch_rocm", _probe(), False)
    assert (fresh["force_reinstall"], fresh["reasons"][0]) == (False, "no torch")
    cpu = fw.framework_pip(plan, "pytorch_rocm", _probe(torch="2.13.0+cpu"), False)
    assert cpu["force_reinstall"] is True
    assert (
        "torch 2.13.0+cpu is not one of ROCm's wheels (pytorch_rocm_source: wheels)"
        in cpu["reasons"]
    )


def test_the_record_refuses_a_venv_without_a_targets_device_code():
    plan = fw.pytorch_rocm_plan(
        settings(version="2.13.0", gfx_targets=["gfx90a", "gfx1100"]), ran()
    )
    probe = {
        **_probe(torch="2.13.0+rocm7.14.0", rocm="7.14.0"),
        "torch_version": "2.13.0+rocm7.14.0",
        "hip_version": "7.14.0",
    }
    probe["dists"]["amd-torch-device-gfx90a"] = "2.13.0+rocm7.14.0"
    venv = "/opt/rocmlab/venvs/pytorch"
    recorded = fw.framework_record(
        plan, "pytorch_rocm", probe, False, False, f"{venv}/bin/python", venv
    )
    assert folded(recorded["refusal"]) == (
        "pytorch_rocm: the venv has no amd-torch-device-gfx1100 after pip installed"
        f" torch[device-gfx1100,device-gfx90a]: the index ({WHEELS_INDEX}) has no device code of"
        " torch 2.13.0 for gfx1100. Check pytorch_rocm_gfx_targets against the targets of"
        " TheRock's SUPPORTED_GPUS.md, or use [all]."
    )
    probe["dists"]["amd-torch-device-gfx1100"] = "2.13.0+rocm7.14.0"
    recorded = fw.framework_record(
        plan, "pytorch_rocm", probe, False, True, f"{venv}/bin/python", venv
    )
    assert recorded["refusal"] == ""
    result = recorded["result"]
    assert (result["build"], result["source"], result["torch_requested"]) == (
        "rocm",
        "wheels",
        "2.13.0",
    )
    assert (result["gfx_targets"], result["rocm_wheels_version"]) == (
        ["gfx1100", "gfx90a"],
        "7.14.0",
    )
    assert result["index_url"] == WHEELS_INDEX


@pytest.mark.parametrize("rocm", ["7.14", "10.0"])
def test_pip_resolves_the_plan_to_the_rocm_release_and_device_code_asked_for(
    rocm, rocm_wheels_index, tmp_path
):
    """On an index that holds both releases (+rocm10.0.0 sorts below +rocm7.14.0: TheRock's
    issue 7183), the plan's requirements get exactly the ROCm release and targets asked for."""
    plan = fw.pytorch_rocm_plan(
        settings(
            version="2.13.0",
            rocm_version=rocm,
            torchvision=False,
            gfx_targets=["gfx1100", "gfx90a"],
            index_url=rocm_wheels_index.as_uri(),
        ),
        ran(),
    )
    assert plan["refusal"] == ""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_CACHE_DIR=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    cmd += ["--report", "-", "--index-url", plan["index_url"], *plan["requirements"]]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = {
        i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(done.stdout)["install"]
    }
    assert got["torch"] == f"2.13.0+rocm{rocm}.0"
    assert got["rocm"] == f"{rocm}.0"
    devices = {name for name in got if name.startswith(("amd-torch-device-", "rocm-sdk-device-"))}
    assert devices == {
        "amd-torch-device-gfx1100",
        "amd-torch-device-gfx90a",
        "rocm-sdk-device-gfx1100",
        "rocm-sdk-device-gfx90a",
    }
    assert set(plan["device_packages"]) <= set(got)
