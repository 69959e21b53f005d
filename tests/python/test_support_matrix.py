"""The support matrix comes from the support catalog (src/rocmlab/data/catalog.json), written by
tools/role_docs.py into roles/rocmlab/vars/main.yml (__rocmlab_platforms); every role's
meta/main.yml, the per-distribution vars files, the Molecule images and the README agree with
it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MATRIX = yaml.safe_load((REPO / "roles" / "rocmlab" / "vars" / "main.yml").read_text())[
    "__rocmlab_platforms"
]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "main.yml").exists())


def names(rows: list[dict]) -> list[str]:
    return [f"{row['distribution']} {row['version']}" for row in rows]


@pytest.mark.parametrize("role", ROLES)
def test_meta_platforms_are_the_matrix(role):
    meta = yaml.safe_load((REPO / "roles" / role / "meta" / "main.yml").read_text())
    declared = {p["name"]: p["versions"] for p in meta["galaxy_info"]["platforms"]}
    wanted: dict[str, list[str]] = {}
    for row in MATRIX:
        wanted.setdefault(row["distribution"], []).append(row["codename"])
    assert declared == wanted


@pytest.mark.parametrize("role", ["rocm_repo", "rocm_packages"])
def test_per_distribution_vars_cover_the_matrix_and_nothing_else(role):
    files = {p.stem for p in (REPO / "roles" / role / "vars").glob("*-*.yml")}
    assert files == {f"{row['distribution']}-{row['major']}" for row in MATRIX}


def test_the_molecule_scenarios_run_exactly_the_tested_systems():
    images = set()
    for molecule_yml in (REPO / "molecule").glob("*/molecule.yml"):
        # ROCMLAB_IMAGE_DEBIAN12_CONVERGED: the Debian 12 image converged by site.yml.
        images |= set(re.findall(r"ROCMLAB_IMAGE_([A-Z]+[0-9]+)", molecule_yml.read_text()))
    tested = {f"{row['distribution'].upper()}{row['major']}" for row in MATRIX if row["tested"]}
    assert images == tested


def test_the_readme_says_which_systems_are_tested_and_which_only_declared():
    readme = " ".join((REPO / "README.md").read_text().split())
    tested = ", ".join(names([row for row in MATRIX if row["tested"]]))
    untested = ", ".join(names([row for row in MATRIX if not row["tested"]]))
    assert f"Tested here: {tested}." in readme
    assert f"Declared but not tested here: {untested}" in readme
