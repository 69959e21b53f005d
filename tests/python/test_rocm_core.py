"""AMD's Core SDK on a host (plugins/module_utils/rocm_core.py): which versioned packages put a
release beside the cores installed, what of the legacy line and of older cores goes (the
known-good core kept), and which update-alternatives groups select a core. The query texts are
update-alternatives' own output, captured on Debian 12 with the mirror fixture's two cores
installed (tests/fixtures/amd_mirror/build.sh, amdrocm-core7.14 and amdrocm-core10.0)."""

from __future__ import annotations

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import rocm_core

# AMD's installed packages on a legacy 6.4.2 host (the ledger's), with a driver package.
LEGACY = {
    "rocm-core": "6.4.2.60402-1",
    "rocm-hip-runtime": "6.4.2.60402-1",
    "rocminfo": "1.0.0.60402-1",
    "amdgpu-core": "1:6.4.60402-1",
}
# What the Core SDK repository offers of 10.0 (the fixture's names and versions).
OFFERED_10 = {
    "amdrocm-core10.0": "10.0.0-1",
    "amdrocm-runtime10.0": "10.0.0-1",
    "amdrocm10.0-gfx942": "10.0.0-1",
    "amdrocm10.0-gfx1100": "10.0.0-1",
    "amdrocm10.0-gfx1201": "10.0.0-1",
    "amdrocm-core-sdk10.0": "10.0.0-1",
}
CORE_714 = {
    "amdrocm-core7.14": "7.14.0-1",
    "amdrocm-runtime7.14": "7.14.0-1",
    "amdrocm7.14-gfx1100": "7.14.0-1",
}
CORE_10 = {
    "amdrocm-core10.0": "10.0.0-1",
    "amdrocm-runtime10.0": "10.0.0-1",
    "amdrocm10.0-gfx1100": "10.0.0-1",
}


def test_legacy_to_core_installs_the_release_for_the_gpus_and_removes_the_legacy_line_first():
    plan = rocm_core.plan("10.0", "core", LEGACY, OFFERED_10, targets=["gfx1100"])
    assert plan["install"] == ["amdrocm-core10.0=10.0.0-1", "amdrocm10.0-gfx1100=10.0.0-1"]
    # The driver is a product of its own: it stays.
    assert plan["remove_other_line"] == ["rocm-core", "rocm-hip-runtime", "rocminfo"]
    assert plan["remove_cores"] == [] and plan["problems"] == []
    assert plan["summary"] == (
        "6.4.2 (legacy) \u2192 10.0.0 (core): installs amdrocm-core10.0, amdrocm10.0-gfx1100; "
        "removes the legacy line's rocm-core, rocm-hip-runtime, rocminfo"
    )


def test_without_a_gpu_every_device_package_and_with_sdk_the_whole_sdk():
    plan = rocm_core.plan("10.0.0", "core", {}, OFFERED_10, targets=None, sdk=True)
    assert [n.split("=")[0] for n in plan["install"]] == [
        "amdrocm-core10.0", "amdrocm10.0-gfx942", "amdrocm10.0-gfx1100", "amdrocm10.0-gfx1201",
        "amdrocm-core-sdk10.0",
    ]  # fmt: skip


def test_a_gpu_the_release_has_no_device_package_for_is_named():
    plan = rocm_core.plan("10.0", "core", {}, OFFERED_10, targets=["gfx1100", "gfx803"])
    assert plan["missing_targets"] == ["gfx803"]
    assert "no device package for gfx803" in plan["summary"]


def test_a_release_the_sources_do_not_offer_stops_the_move():
    plan = rocm_core.plan("7.14", "core", LEGACY, OFFERED_10, targets=["gfx1100"])
    assert plan["problems"] == [
        "the sources offer no amdrocm-core7.14 of ROCm 7.14.0: check rocm_repo_version and that"
        " the Core SDK repository serves this release"
    ]
    assert plan["missing_targets"] == ["gfx1100"]
    assert plan["install"] == []


def test_another_core_goes_beside_and_the_known_good_one_is_kept():
    offered = {"amdrocm-core7.14": "7.14.0-1", "amdrocm7.14-gfx1100": "7.14.0-1"}
    plan = rocm_core.plan("7.14", "core", CORE_10, offered, ["gfx1100"], known_good="10.0.0")
    assert plan["install"] == ["amdrocm-core7.14=7.14.0-1", "amdrocm7.14-gfx1100=7.14.0-1"]
    assert plan["kept"] == ["10.0"] and plan["remove_cores"] == []
    assert plan["remove_other_line"] == []
    assert "keeps /opt/rocm/core-10.0 (the known-good release)" in plan["summary"]


def test_once_the_new_core_is_known_good_the_old_one_goes():
    amd = CORE_10 | CORE_714
    offered = {"amdrocm-core7.14": "7.14.0-1", "amdrocm7.14-gfx1100": "7.14.0-1"}
    plan = rocm_core.plan("7.14", "core", amd, offered, ["gfx1100"], known_good="7.14.0")
    assert plan["install"] == [] and plan["kept"] == []
    assert plan["remove_cores"] == sorted(CORE_10)
    # With 2 kept, the newest other core stays too.
    plan = rocm_core.plan("7.14", "core", amd, offered, ["gfx1100"], keep=2, known_good="7.14.0")
    assert plan["kept"] == ["10.0"] and plan["remove_cores"] == []
    # With 0, even the known-good one goes (a rollback then downloads it).
    plan = rocm_core.plan("7.14", "core", amd, offered, ["gfx1100"], keep=0, known_good="10.0.0")
    assert plan["remove_cores"] == sorted(CORE_10)


def test_back_to_the_legacy_line_removes_the_core_sdk_first():
    plan = rocm_core.plan("6.4.2", "legacy", CORE_10 | {"amdgpu-core": "1:6.4.60402-1"}, {})
    assert plan["remove_other_line"] == sorted(CORE_10)
    assert plan["install"] == [] and plan["remove_cores"] == []


def test_the_same_release_again_changes_nothing():
    offered = {"amdrocm-core10.0": "10.0.0-1", "amdrocm10.0-gfx1100": "10.0.0-1"}
    plan = rocm_core.plan("10.0", "core", CORE_10, offered, ["gfx1100"], known_good="10.0.0")
    assert plan["install"] == plan["remove_cores"] == plan["remove_other_line"] == []
    assert plan["summary"] == (
        "10.0.0 (core) \u2192 10.0.0 (core): every package is installed already"
    )


QUERY_AUTO = """Name: core
Link: /opt/rocm/core
Status: auto
Best: /opt/rocm/core-10.0
Value: /opt/rocm/core-10.0

Alternative: /opt/rocm/core-10.0
Priority: 1375276832

Alternative: /opt/rocm/core-7.14
Priority: 983276832
"""


def group(name: str, value: str | None, *alternatives: str) -> dict:
    return {"name": name, "link": f"/x/{name}", "status": "auto", "value": value,
            "alternatives": list(alternatives)}  # fmt: skip


def test_update_alternatives_query_is_read():
    assert rocm_core.parse_query(QUERY_AUTO) == {
        "name": "core",
        "link": "/opt/rocm/core",
        "status": "auto",
        "value": "/opt/rocm/core-10.0",
        "alternatives": ["/opt/rocm/core-10.0", "/opt/rocm/core-7.14"],
    }
    assert rocm_core.parse_query("Name: x\nLink: /x\nStatus: auto\nValue: none\n")["value"] is None


def tree(series_value: str, *series: str) -> list[dict]:
    found = []
    for name, sub in [("core", ""), ("rocm-bin", "/bin"), ("rocm-lib", "/lib"),
                      ("rocm-include", "/include"), ("rocm-llvm", "/llvm"),
                      ("rocm-amdgcn", "/amdgcn"), ("rocm-libexec", "/libexec"),
                      ("rocm-share", "/share"), ("rocminfo", "/bin/rocminfo")]:  # fmt: skip
        paths = [f"/opt/rocm/core-{s}{sub}" for s in series]
        found.append(group(name, f"/opt/rocm/core-{series_value}{sub}", *paths))
    return found


def test_the_switch_sets_every_group_with_an_alternative_in_the_core():
    flang = "/opt/rocm/core-10.0/bin/amdflang"
    groups = [
        *tree("10.0", "10.0", "7.14"),
        group("core-10", "/opt/rocm/core-10.0", "/opt/rocm/core-10.0"),
        group("core-7", "/opt/rocm/core-7.14", "/opt/rocm/core-7.14"),
        group("amdflang", flang, flang),
        group("editor", "/usr/bin/vim.basic", "/usr/bin/vim.basic", "/bin/nano"),
    ]
    plan = rocm_core.switch_plan(groups, "7.14")
    assert [m["name"] for m in plan["moves"]] == [
        "core", "rocm-bin", "rocm-lib", "rocm-include", "rocm-llvm", "rocm-amdgcn",
        "rocm-libexec", "rocm-share", "rocminfo",
    ]  # fmt: skip
    assert plan["moves"][1] == {
        "name": "rocm-bin", "path": "/opt/rocm/core-7.14/bin", "from": "/opt/rocm/core-10.0/bin"
    }  # fmt: skip
    # A tool only 10.0 ships stays on it, named; core-10 is 10's own link; other groups untouched.
    assert plan["elsewhere"] == ["amdflang"] and plan["missing"] == []


def test_the_switch_to_the_selected_core_moves_nothing():
    assert rocm_core.switch_plan(tree("10.0", "10.0", "7.14"), "10.0")["moves"] == []


@pytest.mark.parametrize("series", ["7.14", "7.1"])
def test_the_switch_to_a_core_not_installed_names_what_it_lacks(series):
    plan = rocm_core.switch_plan(tree("10.0", "10.0"), series)
    assert plan["missing"] == list(rocm_core.TREE_GROUPS)
    assert not rocm_core.inside("/opt/rocm/core-7.140/bin", "7.14")
