"""Where a configured ROCm release comes from (plugins/module_utils/rocm_sources.py, role
rocm_repo's filter rocm_sources): the legacy line's three repositories with their path and
driver rules, the Core SDK line's one repository per system, and refusals that name the setting,
the value and what would be accepted."""

from __future__ import annotations

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import rocm_sources, support_catalog

CATALOG = support_catalog.shipped()
# rocm_repo's defaults on Debian 12 (roles/rocm_repo/defaults/main.yml).
DEFAULTS = {
    "distribution": "Debian",
    "major": "12",
    "suite": "",
    "base_url": "https://repo.radeon.com",
    "amdgpu_enabled": True,
    "amdgpu_version": "",
    "graphics_enabled": True,
    "key_url": "https://repo.radeon.com/rocm/rocm.gpg.key",
    "key_fingerprint": "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C",
    "pin_origin": "repo.radeon.com",
    "core_url": "https://repo.amd.com/rocm/packages",
    "core_key_url": "https://repo.amd.com/rocm/packages/gpg/rocm.gpg",
    "core_key_fingerprint": "d0f0 04a0 025a 1145 c780 7fcd 0701 eac4 d5e0 2107",
    "core_pin_origin": "repo.amd.com",
}


def plan(**settings) -> dict:
    return rocm_sources.plan(CATALOG, DEFAULTS | settings)


def enabled(result: dict) -> list[str]:
    return [r["uri"] for r in result["repositories"] if r["enabled"]]


@pytest.mark.parametrize(
    ("version", "uris"),
    [
        (
            "6.4.2",  # 6.x: the driver repository carries the ROCm version; no graphics repo
            [
                "https://repo.radeon.com/rocm/apt/6.4.2",
                "https://repo.radeon.com/amdgpu/6.4.2/ubuntu",
            ],
        ),
        (
            "7.1.0",  # the path drops a trailing .0; the driver is the catalog's
            [
                "https://repo.radeon.com/rocm/apt/7.1",
                "https://repo.radeon.com/amdgpu/30.20/ubuntu",
                "https://repo.radeon.com/graphics/7.1/ubuntu",
            ],
        ),
        (
            "7.1.1",  # a patch release keeps its patch number in the driver's version
            [
                "https://repo.radeon.com/rocm/apt/7.1.1",
                "https://repo.radeon.com/amdgpu/30.20.1/ubuntu",
                "https://repo.radeon.com/graphics/7.1.1/ubuntu",
            ],
        ),
    ],
)
def test_the_legacy_line(version, uris):
    result = plan(version=version)
    assert (result["line"], result["problem"]) == ("legacy", "")
    assert enabled(result) == uris
    assert result["suite"] == "jammy"  # AMD registers Debian 12 with its Ubuntu 22.04 packages
    assert result["origin"] == "repo.radeon.com"
    assert result["fingerprint"] == "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C"
    assert [r["name"] for r in result["repositories"]] == list(rocm_sources.NAMES)


def test_the_legacy_lines_settings_win():
    result = plan(version="7.2", amdgpu_version="30.31", graphics_enabled=False, suite="noble")
    assert enabled(result) == [
        "https://repo.radeon.com/rocm/apt/7.2",
        "https://repo.radeon.com/amdgpu/30.31/ubuntu",
    ]
    assert result["suite"] == "noble"


def test_a_legacy_release_without_a_known_driver_is_refused_naming_the_way_out():
    result = plan(version="7.3")
    assert "rocm_repo_version: ROCm 7.3 has no known amdgpu driver version" in result["problem"]
    assert "rocm_repo_amdgpu_version" in result["problem"]
    assert plan(version="7.3", amdgpu_enabled=False)["problem"] == ""


@pytest.mark.parametrize(("version", "release"), [("10.0", "10.0.0"), ("7.14.0", "7.14.0")])
def test_the_core_line(version, release):
    result = plan(version=version)
    assert (result["line"], result["release"], result["problem"]) == ("core", release, "")
    # One repository for every Core release of the system: moving between them changes no
    # apt file.
    assert enabled(result) == ["https://repo.amd.com/rocm/packages/debian12"]
    assert result["suite"] == "stable"
    assert result["origin"] == "repo.amd.com"
    assert result["key_url"] == "https://repo.amd.com/rocm/packages/gpg/rocm.gpg"
    assert result["fingerprint"] == "D0F004A0025A1145C7807FCD0701EAC4D5E02107"


def test_the_core_line_on_ubuntu_and_behind_a_mirror():
    result = plan(version="10.0", distribution="Ubuntu", major="24", core_url="http://m:3142/c/")
    assert enabled(result) == ["http://m:3142/c/ubuntu2404"]


def test_the_core_line_on_a_system_it_has_no_packages_for_is_refused():
    result = plan(version="10.0", major="13")
    assert result["problem"].startswith(
        "rocm_repo_version: ROCm 10.0 is of AMD's Core SDK line, which has no packages for "
        "Debian 13"
    )
    assert "debian12, ubuntu2204, ubuntu2404" in result["problem"]
    assert enabled(result) == []


def test_a_core_series_the_catalog_does_not_list_is_refused():
    result = plan(version="10.4")
    assert result["problem"].startswith(
        'rocm_repo_version: "10.4" is a Core SDK series the support catalog does not list'
    )
    assert "Core SDK releases: 10.0, 7.14" in result["problem"]
    assert result["repositories"] == []


def test_what_is_no_release_is_refused():
    assert plan(version="7.x")["problem"] == (
        'rocm_repo_version: "7.x" is not a ROCm release (X.Y or X.Y.Z)'
    )
