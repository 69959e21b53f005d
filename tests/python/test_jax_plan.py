"""JAX's plan on the framework engine (plugins/filter/frameworks.py, JAX): what pip is asked for
on each ROCm wheel release, the Python rules jax's own wheels set, and the record's refusals.
Role jax_rocm acts on them through role framework_venv (entry points plan, install, result)."""

from __future__ import annotations

from pathlib import Path

import yaml
from rocmlab_testutil import load_module

REPO = Path(__file__).resolve().parents[2]
fw = load_module("frameworks_jax", REPO / "plugins" / "filter" / "frameworks.py")
dl = load_module("downloads_jax", REPO / "plugins" / "filter" / "downloads.py")
TABLE = yaml.safe_load((REPO / "roles/jax_rocm/vars/main.yml").read_text())["__jax_rocm_releases"]
WHEELS = "https://mirror.lab/rocm/whl-multi-arch/"


def settings(**changes) -> dict:
    base = {
        "version": "",
        "rocm_version": "7.14",
        "index_url": WHEELS,
        "find_links": "http://mirror.lab/wheels/",
        "python": "/usr/bin/python3",
        "venv": "/opt/rocmlab/venvs/jax",
        "releases": TABLE,
        "gfx_targets": ["gfx1100"],
        "wheels_index_url": WHEELS,
    }
    return {**base, **changes}


def jax_plan(settings: dict, python: dict | None = None) -> dict:
    """The plan framework_venv's plan entry point makes for jax_rocm."""
    return fw.framework_plan(settings, "jax_rocm", python)


def ran(version: str) -> dict:
    return {"rc": 0, "stdout": version, "stderr": ""}


def folded(text: str) -> str:
    return " ".join(text.split())


def test_rocm_7_asks_for_the_rocm7_plugin_and_rocm_with_the_targets_device_code():
    plan = jax_plan(settings(), ran("3.12.3"))
    assert plan["refusal"] == ""
    assert plan["requirements"] == [
        "jax==0.11.1",
        "jax_rocm7_plugin==0.11.1",
        "jax_rocm7_pjrt==0.11.1",
        "rocm[libraries,device-gfx1100]==7.14.*",
    ]
    assert plan["probe_names"] == [
        "jax",
        "jaxlib",
        "jax-rocm7-plugin",
        "jax-rocm7-pjrt",
        "rocm",
        "rocm-sdk-device-gfx1100",
    ]


def test_rocm_10_asks_for_the_rocm10_plugin():
    plan = jax_plan(settings(rocm_version="10.0"), ran("3.12.3"))
    assert plan["requirements"][:3] == [
        "jax==0.11.1",
        "jax_rocm10_plugin==0.11.1",
        "jax_rocm10_pjrt==0.11.1",
    ]


def test_debian_12s_python_gets_the_newest_jax_with_wheels_for_it_only_when_pinned():
    # jax 0.11 needs Python 3.12: following ROCm 7.14 on Python 3.11 is refused, naming the pin.
    said = folded(jax_plan(settings(), ran("3.11.2"))["refusal"])
    assert "jax_rocm_version: jax 0.11.1 has no wheels for Python 3.11.2" in said
    assert "JAX releases for ROCm 7.14 with wheels for Python 3.11: 0.10.1, 0.10.2." in said
    assert jax_plan(settings(version="0.10.2"), ran("3.11.2"))["refusal"] == ""


def test_rocm_10_with_a_jaxlib_that_does_not_know_its_plugin_is_refused():
    said = folded(
        jax_plan(settings(version="0.10.2", rocm_version="10.0"), ran("3.12.3"))["refusal"]
    )
    assert said.startswith('jax_rocm_version "0.10.2" does not fit jax_rocm_rocm_version "10.0"')
    assert "jax 0.10.2 is built for ROCm 7.14" in said


def test_the_record_refuses_jax_without_its_plugin_and_a_missing_device_package():
    plan = jax_plan(settings(), ran("3.12.3"))
    venv = "/opt/rocmlab/venvs/jax"
    probe = {
        "python": "3.12.3",
        "dists": {"jax": "0.11.1"},
        "jax_version": "0.11.1",
        "devices": ["cpu"],
    }
    got = fw.framework_record(plan, "jax_rocm", probe, True, True, f"{venv}/bin/python", venv)
    assert got["refusal"].startswith("jax_rocm: the venv has no rocm-sdk-device-gfx1100 after pip")
    probe["dists"]["rocm-sdk-device-gfx1100"] = "7.14.0"
    got = fw.framework_record(plan, "jax_rocm", probe, True, True, f"{venv}/bin/python", venv)
    assert folded(got["refusal"]).startswith(
        f"jax_rocm: {venv}/bin/python has jax 0.11.1 without its ROCm plugin (jax-rocm7-plugin is"
        " missing). It cannot use an AMD GPU: only with its ROCm plugin can it."
    )
    probe["dists"]["jax-rocm7-plugin"] = "0.11.1"
    got = fw.framework_record(plan, "jax_rocm", probe, True, True, f"{venv}/bin/python", venv)
    assert "lists the devices cpu and no ROCm GPU among them" in got["refusal"]
    probe["devices"] = ["rocm"]
    got = fw.framework_record(plan, "jax_rocm", probe, True, True, f"{venv}/bin/python", venv)
    assert got["refusal"] == ""
    assert (got["result"]["build"], got["result"]["plugin_version"]) == ("rocm", "0.11.1")


def test_pip_runs_until_jax_the_plugin_the_pjrt_and_the_device_code_are_there():
    plan = jax_plan(settings(), ran("3.12.3"))
    dists = {"jax": "0.11.1", "jax-rocm7-plugin": "0.11.1", "jax-rocm7-pjrt": "0.10.2"}
    reasons = fw.framework_pip(plan, "jax_rocm", {"dists": dists})["reasons"]
    assert reasons == [
        "jax-rocm7-pjrt 0.10.2, wanted jax-rocm7-pjrt==0.11.1",
        "rocm-sdk-device-gfx1100 missing (extra device-gfx1100 of rocm)",
    ]
    dists |= {"jax-rocm7-pjrt": "0.11.1", "rocm-sdk-device-gfx1100": "7.14.0"}
    assert fw.framework_pip(plan, "jax_rocm", {"dists": dists})["reasons"] == []


def test_rocms_index_alone_is_refused_naming_where_jax_comes_from():
    # TheRock's RELEASES.md installs jax from PyPI: ROCm's index alone cannot give it.
    said = folded(jax_plan(settings(find_links=""), ran("3.12.3"))["refusal"])
    assert said.startswith("jax_rocm_index_url is ROCm's multi-arch index")
    assert "wheelhouse holding jax==0.11.1 and jaxlib==0.11.1" in said
    # An index of the lab's that mirrors both is the lab's choice.
    mirror = settings(find_links="", index_url="http://devpi.lab/root/pypi/+simple/")
    assert jax_plan(mirror, ran("3.12.3"))["refusal"] == ""


def test_a_lab_cache_fetches_jax_and_jaxlib_ahead_and_passes_rocms_wheels_through():
    proxy = "http://head.lab:8180/rocm-wheels/"
    behind = settings(version="0.10.2", index_url=proxy, wheels_index_url=proxy)
    plan = jax_plan(behind, ran("3.11.2"))
    assert plan["refusal"] == ""
    wants = dl.downloads_lab_cache([{"jax_rocm_downloads": plan["downloads"]}])
    # ROCm's wheels (the plugin, the PJRT, rocm and its device code) are not fetched ahead.
    assert wants["wheels"] == [
        {
            "requirements": ["jax==0.10.2", "jaxlib==0.10.2"],
            "python": "3.11",
            "index_url": "",
            "find_links": "",
        }
    ]
