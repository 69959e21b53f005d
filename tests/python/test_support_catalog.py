"""The support catalog (src/rocmlab/data/catalog.json) and its reader
(plugins/module_utils/support_catalog.py, copied into the wheel as rocmlab.common.support_catalog):
the reader refuses bad entries naming them, both copies read the same file the same way, every
file derived from the catalog is its generation, and a new release or system is one catalog
entry: tools/role_docs.py rewrites everything that follows from it and nothing else needs an
edit."""

from __future__ import annotations

import copy as copying
import hashlib
import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import rocm_sources
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import (
    support_catalog as collection_reader,
)
from rocmlab_testutil import REPO, role_docs_tree
from test_rocm_sources import DEFAULTS as SETTINGS

from rocmlab.common import support_catalog as wheel_reader
from rocmlab.fleet.rules import release as fleet_release

CATALOG = REPO / "src" / "rocmlab" / "data" / "catalog.json"
_spec = importlib.util.spec_from_file_location("role_docs", REPO / "tools" / "role_docs.py")
assert _spec is not None and _spec.loader is not None
role_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_docs)


def data() -> dict:
    return json.loads(CATALOG.read_text())


# --- the reader ----------------------------------------------------------------------------


def test_the_wheel_carries_the_readers_exact_copy():
    assert (REPO / "src" / "rocmlab" / "common" / "support_catalog.py").read_bytes() == (
        REPO / "plugins" / "module_utils" / "support_catalog.py"
    ).read_bytes()


def test_both_copies_find_and_read_the_same_catalog():
    """The collection's copy finds it under src/, the package's beside itself."""
    assert collection_reader.default_path() == CATALOG
    assert wheel_reader.default_path() == CATALOG
    assert collection_reader.shipped().data == wheel_reader.shipped().data == data()


def test_the_views_rocmlab_reads():
    catalog = wheel_reader.shipped()
    assert catalog.amdgpu_versions() == {"7.0": "30.10", "7.1": "30.20", "7.2": "30.30"}
    assert catalog.ubuntu_codenames() == {"jammy": "22.04", "noble": "24.04"}
    assert [r["version"] for r in catalog.releases] == [
        "10.0", "7.14", "7.2", "7.1", "7.0", "6.4", "6.3", "6.2"
    ]  # fmt: skip
    assert catalog.release("7.1.2")["driver"] == "30.20"
    assert catalog.release("1:6.4.60402-2164967.22.04")["version"] == "6.4"
    assert catalog.release("7.14.0")["line"] == "core"
    assert catalog.release("7.9.0") is None
    # The Core SDK's native targets: RDNA2 cards the legacy line needed an override for.
    assert {"gfx1030", "gfx1031", "gfx1100", "gfx1201", "gfx942"} <= set(
        catalog.native_targets("10.0.0")
    )
    assert catalog.native_targets("6.4.2") is None
    assert catalog.line(catalog.release("10.0"))["suite"] == "stable"
    assert catalog.release("rocm") is None
    kernels = catalog.kernel_table()["releases"]
    assert kernels["7.1"]["kernels"]["debian 13"] == ["6.12"]
    assert kernels["7.2"]["verified"] is False
    assert catalog.gfx()["targets"]["gfx1031"]["override"] == "10.3.0"
    assert catalog.gfx()["pci_ids"]["73df"]["gfx"] == "gfx1031"


def broken(change) -> dict:
    bad = copying.deepcopy(data())
    change(bad)
    return bad


def platform(bad: dict, name: str) -> dict:
    return next(p for p in bad["platforms"] if f"{p['distribution']} {p['version']}" == name)


def release(bad: dict, version: str) -> dict:
    return next(r for r in bad["releases"] if r["version"] == version)


BAD = {
    "a platform's Python": (
        lambda d: platform(d, "Debian 12").update(python="3"),
        "platforms[2] (Debian 12): python '3' is not a Python version (3.N)",
    ),
    "a misspelt key": (
        lambda d: platform(d, "Ubuntu 24.04").update(pyhton="3.12"),
        "platforms[1] (Ubuntu 24.04): unknown key 'pyhton'",
    ),
    "a missing key": (
        lambda d: platform(d, "Debian 13").pop("codename"),
        "platforms[3] (Debian 13): codename is missing (a string)",
    ),
    "a system listed twice": (
        lambda d: d["platforms"].append(copying.deepcopy(platform(d, "Debian 12"))),
        "platforms[4] (Debian 12): the same system as platforms[2]",
    ),
    "a default source AMD's packages are refused for": (
        lambda d: platform(d, "Debian 13").update(rocm_source="amd"),
        "platforms[3] (Debian 13): rocm_source is amd, but AMD's legacy packages are refused here",
    ),
    "an unknown source": (
        lambda d: platform(d, "Debian 12").update(rocm_source="ppa"),
        "platforms[2] (Debian 12): rocm_source 'ppa' is not one of amd, distro",
    ),
    "a slug for no release line": (
        lambda d: platform(d, "Debian 12")["amd"].update(beta="debian12"),
        "platforms[2] (Debian 12): amd.beta is not a release line (legacy, core)",
    ),
    "a driver that is no version": (
        lambda d: release(d, "7.1").update(driver="30.2x"),
        "releases[3] (7.1): driver '30.2x' is not an amdgpu repository version (30.20)",
    ),
    "a release of a line the catalog does not describe": (
        lambda d: d["lines"].pop("core"),
        "releases[0] (10.0): line 'core' is not in lines (legacy)",
    ),
    "a Core SDK release without its targets": (
        lambda d: release(d, "10.0").pop("targets"),
        "releases[0] (10.0): targets is missing (the gfx targets it has code for)",
    ),
    "a Core SDK release with a driver": (
        lambda d: release(d, "7.14").update(driver="30.40"),
        'releases[1] (7.14): driver must be "" on the core line (no driver repository)',
    ),
    "a Core SDK target that is no gfx target": (
        lambda d: release(d, "10.0")["targets"].append("navi31"),
        "releases[0] (10.0): targets 'navi31' is not a gfx target (gfx1100)",
    ),
    "the Core SDK line without its suite": (
        lambda d: d["lines"]["core"].pop("suite"),
        "lines.core: suite is missing (the suite of every system's repository)",
    ),
    "kernels for a system that is not a platform": (
        lambda d: release(d, "6.4")["kernels"].update({"debian 11": ["5.10"]}),
        "releases[5] (6.4): kernels names 'debian 11', which is no platform",
    ),
    "a kernel that is no series": (
        lambda d: release(d, "6.4")["kernels"].update({"debian 12": ["6.1.0-28"]}),
        "releases[5] (6.4): kernels['debian 12'] '6.1.0-28' is not a kernel series (6.8)",
    ),
    "a release listed twice": (
        lambda d: d["releases"].append(copying.deepcopy(release(d, "7.2"))),
        "releases[8] (7.2): listed again (releases[2])",
    ),
    "a release written in full": (
        lambda d: release(d, "7.2").update(version="7.2.1"),
        "releases[2] (7.2.1): version '7.2.1' is not a release series (X.Y, e.g. 7.1)",
    ),
    "a repository the line does not have": (
        lambda d: release(d, "7.2")["repositories"].append("multimedia"),
        "releases[2] (7.2): repository 'multimedia' is not one of line legacy's",
    ),
    "a key fingerprint in lower case": (
        lambda d: d["lines"]["legacy"]["key"].update(
            fingerprint="ca8bb4727a47b4d09b4ee8969386b48a1a693c5c"
        ),
        "lines.legacy: key.fingerprint 'ca8bb4727a47b4d09b4ee8969386b48a1a693c5c' is not a key "
        "fingerprint (40 upper-case hex digits)",
    ),
    "a PCI id of a target the table does not have": (
        lambda d: d["gfx"]["pci_ids"].update({"7551": {"gfx": "gfx1202", "name": "Navi 48"}}),
        "gfx.pci_ids.7551: gfx 'gfx1202' is not in gfx.targets",
    ),
    "an override that HSA_OVERRIDE_GFX_VERSION does not take": (
        lambda d: d["gfx"]["targets"]["gfx1031"].update(override="gfx1030"),
        "gfx.targets.gfx1031: override 'gfx1030' is not \"\" or X.Y.Z (10.3.0)",
    ),
    "a section missing": (
        lambda d: d.pop("releases"),
        "catalog: releases is missing (a list)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_entry_is_refused_naming_it(case):
    change, message = BAD[case]
    with pytest.raises(collection_reader.CatalogError) as refused:
        collection_reader.Catalog(broken(change), "catalog.json")
    assert str(refused.value).startswith("catalog.json: ")
    assert message in str(refused.value)
    with pytest.raises(wheel_reader.CatalogError) as refused_too:
        wheel_reader.Catalog(broken(change), "catalog.json")
    assert str(refused_too.value) == str(refused.value)


def test_every_problem_is_named_at_once():
    def two(d):
        platform(d, "Debian 12").update(python="3")
        platform(d, "Ubuntu 22.04").update(tested="no")

    found = collection_reader.problems(broken(two))
    assert found == [
        "platforms[0] (Ubuntu 22.04): tested is 'no', not true or false",
        "platforms[2] (Debian 12): python '3' is not a Python version (3.N)",
    ]


def test_a_file_that_cannot_be_read_or_is_no_json_is_named(tmp_path):
    with pytest.raises(collection_reader.CatalogError, match=r"missing\.json: cannot be read"):
        collection_reader.load(tmp_path / "missing.json")
    (tmp_path / "catalog.json").write_text('{"platforms": [')
    with pytest.raises(collection_reader.CatalogError, match=r"catalog\.json: not JSON"):
        collection_reader.load(tmp_path / "catalog.json")


# --- release strings: one parser ----------------------------------------------------------

RELEASES = ["7.1", "7.1.0-20", " 6.4.2 ", "6.4.2.60402-120~22.04", "1:6.4.2", "10.0.0", "x", ""]


def test_the_fleet_reads_releases_with_the_collections_parser():
    assert [fleet_release(t) for t in RELEASES] == [
        collection_reader.leading_release(t) for t in RELEASES
    ]
    assert fleet_release("7.1.0-20") == "7.1.0"


def test_package_and_file_versions_read_as_numbers():
    read = collection_reader.version_numbers
    assert read("6.4.1-83") == (6, 4, 1)
    assert read("1:6.4.60402-2164967.22.04") == (6, 4, 60402)
    assert read("6.2") == (6, 2)
    assert read("rocm") is None
    assert collection_reader.major_minor("6.4.1.60401-83~24.04") == "6.4"
    assert collection_reader.major_minor("6.2.41133-dd7f95766") == "6.2"


# --- what is derived from it -----------------------------------------------------------------


def test_every_derived_file_is_its_generation():
    wanted, stale, drifted = role_docs.from_catalog(REPO)
    differ = [
        str(path.relative_to(REPO))
        for path, text in wanted.items()
        if not path.exists() or path.read_text() != text
    ]
    assert differ == []
    assert stale == []
    assert drifted == []
    assert len([p for p in wanted if p.name == "main.yml" and p.parent.name == "meta"]) == 14


def test_the_framework_tables_the_catalog_points_to_cover_its_releases():
    frameworks = data()["frameworks"]
    tables = {
        name: yaml.safe_load((REPO / pointer["file"]).read_text())[pointer["table"]]
        for name, pointer in frameworks.items()
    }
    built_by_pytorch = {rocm for row in tables["pytorch"].values() for rocm in row["rocm"]}
    # The Core SDK's frameworks are TheRock's wheels, not these tables' indexes.
    for entry in (r for r in data()["releases"] if r["line"] == "legacy"):
        assert entry["version"] in tables["tensorflow"], entry["version"]
        assert entry["version"] in built_by_pytorch, entry["version"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """What tools/role_docs.py reads and writes, copied."""
    return role_docs_tree(tmp_path)


def digests(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def edit_catalog(root: Path, change) -> None:
    path = root / "src" / "rocmlab" / "data" / "catalog.json"
    catalog = json.loads(path.read_text())
    change(catalog)
    path.write_text(json.dumps(catalog, indent=2) + "\n")


FORKY = {
    "distribution": "Debian",
    "version": "14",
    "codename": "forky",
    "python": "3.14",
    "tested": False,
    "rocm_source": "distro",
    "amd": {"legacy": "noble"},
    "amd_unsupported": {"legacy": "A fictitious system of this test: AMD has no packages for it."},
    "distro_packages": ["rocminfo", "hipcc"],
    "distro_note": "A fictitious Debian 14.",
}
ROCM_7_3 = {
    "version": "7.3",
    "line": "legacy",
    "driver": "30.40",
    "repositories": ["rocm", "amdgpu", "graphics"],
    "kernels": {"ubuntu 24.04": ["6.8", "6.17"], "debian 14": ["6.18"]},
    "kernels_source": "a fictitious release of this test",
    "kernels_verified": False,
}
ROCM_10_2 = {
    "version": "10.2",
    "line": "core",
    "driver": "",
    "repositories": ["rocm"],
    "targets": ["gfx942", "gfx1100", "gfx1201"],
    "targets_source": "a fictitious release of this test",
}


def test_a_new_release_and_system_are_one_catalog_entry_each(tree, capsys):
    """Adding ROCm 7.3, ROCm 10.2 (Core SDK) and Debian 14 to the catalog alone: --check names
    what is stale, the tool rewrites exactly the files that follow from them, the tree is whole
    again, and rocm_repo's sources of the new releases follow from the catalog alone."""
    before = digests(tree)

    def add(catalog):
        catalog["platforms"].append(FORKY)
        catalog["releases"].insert(0, ROCM_7_3)
        catalog["releases"].insert(0, ROCM_10_2)
        catalog["platforms"][-1]["amd"]["core"] = "debian14"

    edit_catalog(tree, add)
    assert role_docs.main(["--check", "--root", str(tree)]) == 1
    err = capsys.readouterr().err
    assert "roles/rocm_repo/vars/Debian-14.yml is not what tools/role_docs.py generates" in err
    assert "roles/user_groups/meta/main.yml is not what tools/role_docs.py generates" in err

    assert role_docs.main(["--root", str(tree)]) == 0
    assert role_docs.main(["--check", "--root", str(tree)]) == 0
    after = digests(tree)
    changed = {name for name in after if before.get(name) != after[name]}
    metas = {
        f"roles/{p.parent.parent.name}/meta/main.yml" for p in tree.glob("roles/*/meta/main.yml")
    }
    assert changed == metas | {
        "src/rocmlab/data/catalog.json",
        "roles/rocm_repo/vars/Debian-14.yml",
        "roles/rocm_packages/vars/Debian-14.yml",
        "roles/rocmlab/vars/main.yml",
        "README.md",
        # The starter names the catalog's releases.
        "inventory/lab.example/group_vars/all.yml",
        # The gfx tables name the targets each Core SDK release ships code for (10.2's).
        "roles/gfx_override/vars/main.yml",
        "roles/rocm_packages/vars/main.yml",
        "roles/slurm_health/vars/main.yml",
    }

    for meta in metas:
        platforms = yaml.safe_load((tree / meta).read_text())["galaxy_info"]["platforms"]
        assert {"name": "Debian", "versions": ["bookworm", "trixie", "forky"]} in platforms
    rocm_repo = yaml.safe_load((tree / "roles/rocm_repo/vars/Debian-14.yml").read_text())
    assert rocm_repo == {"__rocm_repo_default_source": "distro"}
    rocm_packages = yaml.safe_load((tree / "roles/rocm_packages/vars/Debian-14.yml").read_text())
    assert rocm_packages == {"__rocm_packages_distro_default": ["rocminfo", "hipcc"]}
    matrix = yaml.safe_load((tree / "roles/rocmlab/vars/main.yml").read_text())
    assert {
        "distribution": "Debian",
        "major": "14",
        "version": "14",
        "codename": "forky",
        "tested": False,
    } in matrix["__rocmlab_platforms"]
    readme = (tree / "README.md").read_text()
    assert (
        "| 7.3.x | legacy | 30.40 | Ubuntu 24.04: 6.8, 6.17; Debian 14: 6.18 (not verified) |"
        in readme
    )
    assert "Declared but not tested here: Ubuntu 22.04, Ubuntu 24.04, Debian 14." in readme
    # What the doctor reads of that catalog: the new release's kernels.
    catalog = collection_reader.load(tree / "src" / "rocmlab" / "data" / "catalog.json")
    assert catalog.kernel_table()["releases"]["7.3"]["kernels"]["debian 14"] == ["6.18"]
    assert catalog.release("7.3.1")["driver"] == "30.40"
    # What rocm_repo configures for them (filter rocm_sources), with no other edit.
    legacy = rocm_sources.plan(catalog, SETTINGS | {"version": "7.3.1"})
    assert [r["uri"] for r in legacy["repositories"] if r["enabled"]] == [
        "https://repo.radeon.com/rocm/apt/7.3.1",
        "https://repo.radeon.com/amdgpu/30.40.1/ubuntu",
        "https://repo.radeon.com/graphics/7.3.1/ubuntu",
    ]
    core = rocm_sources.plan(catalog, SETTINGS | {"version": "10.2", "major": "14"})
    assert (core["line"], core["release"], core["problem"]) == ("core", "10.2.0", "")
    assert [r["uri"] for r in core["repositories"] if r["enabled"]] == [
        "https://repo.amd.com/rocm/packages/debian14"
    ]
    assert catalog.native_targets("10.2.1") == ["gfx942", "gfx1100", "gfx1201"]
    assert "| 10.2.x | core | its own product | - |" in readme


def test_a_system_taken_out_takes_its_vars_files_with_it(tree, capsys):
    def drop(catalog):  # Ubuntu 22.04, and its kernels (the reader refuses them without it)
        catalog["platforms"].pop(0)
        for entry in catalog["releases"]:
            entry.get("kernels", {}).pop("ubuntu 22.04", None)

    edit_catalog(tree, drop)
    assert role_docs.main(["--check", "--root", str(tree)]) == 1
    err = capsys.readouterr().err
    assert "roles/rocm_repo/vars/Ubuntu-22.yml is for no platform of" in err
    assert role_docs.main(["--root", str(tree)]) == 0
    assert not (tree / "roles/rocm_repo/vars/Ubuntu-22.yml").exists()
    assert not (tree / "roles/rocm_packages/vars/Ubuntu-22.yml").exists()
    meta = yaml.safe_load((tree / "roles/rocm_repo/meta/main.yml").read_text())
    assert {"name": "Ubuntu", "versions": ["noble"]} in meta["galaxy_info"]["platforms"]
    assert role_docs.main(["--check", "--root", str(tree)]) == 0


def test_a_new_gfx_target_reaches_both_roles_tables(tree):
    def add(catalog):
        catalog["gfx"]["targets"]["gfx1151"] = {
            "override": "",
            "usable": True,
            "igpu": True,
            "note": "a fictitious entry of this test",
        }

    edit_catalog(tree, add)
    assert role_docs.main(["--root", str(tree)]) == 0
    for path, name in (
        ("roles/gfx_override/vars/main.yml", "__gfx_override_targets"),
        ("roles/slurm_health/vars/main.yml", "__slurm_health_gfx_targets"),
    ):
        table = yaml.safe_load((tree / path).read_text())[name]
        assert table["gfx1151"]["note"] == "a fictitious entry of this test"


def test_rocm_repo_defaults_must_name_the_catalogs_key_and_a_catalog_release(tree, capsys):
    def change(catalog):
        catalog["lines"]["legacy"]["key"]["fingerprint"] = "0" * 40
        catalog["releases"] = [r for r in catalog["releases"] if r["version"] != "6.4"]

    edit_catalog(tree, change)
    assert role_docs.main(["--check", "--root", str(tree)]) == 1
    err = capsys.readouterr().err
    assert "rocm_repo_key_fingerprint is 'CA8BB4727A47B4D09B4EE8969386B48A1A693C5C'" in err
    assert "rocm_repo_version '6.4.2' is no release of src/rocmlab/data/catalog.json" in err


def test_a_bad_catalog_stops_the_tool_naming_the_entry(tree):
    edit_catalog(tree, lambda c: c["releases"][2].update(driver="thirty"))
    with pytest.raises(SystemExit, match=r"releases\[2\] \(7.2\): driver 'thirty'"):
        role_docs.main(["--check", "--root", str(tree)])
