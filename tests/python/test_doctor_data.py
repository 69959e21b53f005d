"""The doctor's shipped tables: the support catalog, which the gfx_override role's tables are
generated from, and the GPU reading rules agreeing with the role's gfx_detect module on every
fixture tree."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from rocmlab_testutil import REPO

from rocmlab.doctor.checks_kernel import kernel_table
from rocmlab.doctor.gpus import detect, gfx_tables, wanted_environment

ROLE = REPO / "roles" / "gfx_override"
SYSFS = REPO / "tests" / "fixtures" / "sysfs"
TREES = sorted(path.name for path in SYSFS.iterdir() if path.is_dir())

_spec = importlib.util.spec_from_file_location(
    "gfx_detect", REPO / "plugins" / "modules" / "gfx_detect.py"
)
assert _spec is not None and _spec.loader is not None
gfx_detect = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gfx_detect)


def role_vars() -> dict:
    return yaml.safe_load((ROLE / "vars" / "main.yml").read_text())


def test_the_shipped_gfx_tables_are_the_roles() -> None:
    """The doctor's tables (the catalog's gfx, shipped in the wheel) are the role's vars tables,
    which tools/role_docs.py writes from the catalog."""
    shipped = gfx_tables()
    assert shipped["targets"] == role_vars()["__gfx_override_targets"]
    assert shipped["pci_ids"] == role_vars()["__gfx_override_pci_ids"]


def test_the_tables_ship_inside_the_package() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"rocmlab.data" = ["*.json"]' in pyproject
    data = REPO / "src" / "rocmlab" / "data"
    catalog = json.loads((data / "catalog.json").read_text())
    assert {"platforms", "releases", "gfx"} <= set(catalog)


def test_every_kernel_row_cites_its_source() -> None:
    releases = kernel_table()["releases"]
    assert {"6.4", "7.0", "7.1"} <= set(releases)
    for release, row in releases.items():
        assert re.fullmatch(r"\d+\.\d+", release)
        assert isinstance(row["verified"], bool)
        assert "rocm.docs.amd.com" in row["source"]
        for distro, kernels in row["kernels"].items():
            assert re.fullmatch(r"(ubuntu \d\d\.\d\d|debian \d+)", distro)
            assert kernels and all(re.fullmatch(r"\d+\.\d+", k) for k in kernels)


@pytest.mark.parametrize("tree", TREES)
def test_gpus_agree_with_the_roles_module(tree: str) -> None:
    role = gfx_detect.detect(
        str(SYSFS / tree),
        role_vars()["__gfx_override_targets"],
        role_vars()["__gfx_override_pci_ids"],
        None,
        [],
    )
    source, gpus = detect(SYSFS / tree)
    assert source == role["source"]
    assert [
        (g.index, g.pci_address, g.gfx, g.override, g.usable, g.igpu, g.device_id) for g in gpus
    ] == [
        (
            g["rocr_index"],
            g["pci_address"],
            g["gfx_target"],
            g["override"],
            g["usable"],
            g["igpu"],
            g["device_id"],
        )
        for g in role["gpus"]
    ]


@pytest.mark.parametrize("tree", TREES)
def test_the_wanted_environment_is_what_the_role_writes(tree: str) -> None:
    vars_ = role_vars()
    found = gfx_detect.detect(
        str(SYSFS / tree),
        vars_["__gfx_override_targets"],
        vars_["__gfx_override_pci_ids"],
        None,
        [],
    )
    planned = gfx_detect.plan(found["gpus"], "auto", "", True)
    env, conflict = wanted_environment(detect(SYSFS / tree)[1])
    assert env == planned["environment"]
    assert conflict == bool(planned["conflict"])


def test_a_conflict_tree_is_among_them() -> None:
    """The agreement above covers a refusal, an override and iGPU hiding."""
    outcomes = {tree: wanted_environment(detect(SYSFS / tree)[1]) for tree in TREES}
    assert outcomes["desktop-7900xtx-rx6700xt"] == ({}, True)
    assert outcomes["rx6700xt"][0] == {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    assert outcomes["desktop-7900xtx-raphael"][0] == {"ROCR_VISIBLE_DEVICES": "0"}


def test_the_wheel_carries_the_tables(tmp_path: Path) -> None:
    """Hosts run the doctor from the installed wheel, where roles/ is absent."""
    source = tmp_path / "src"
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("rocmlab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "rocmlab/data/catalog.json" in names
    assert "rocmlab/common/support_catalog.py" in names
    assert "rocmlab/doctor/checks_gfx.py" in names
