"""Unit tests for plugins/module_utils/rocm_release.py: AMD's release in a package version, and
the plan that moves a host's AMD packages to the configured release.

The versions are the forms AMD's repositories publish (rocm-core 6.4.2.60402-120~22.04,
rocminfo 1.0.0.60402-120~22.04, amdgpu-dkms 1:6.4.60402-2164967.22.04) and the forms the
project's AMD-layout mirror fixture builds from them (tests/fixtures/amd_mirror/build.sh);
the distribution's are Debian 12's (rocminfo 5.2.3-2).
"""

from __future__ import annotations

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import amd_packages
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_release import (
    full_release,
    plan,
    preview,
    release_of,
)


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("6.4.2.60402-120~22.04", "6.4.2"),
        ("1.0.0.60402-120~22.04", "6.4.2"),
        ("1:6.4.60402-2164967.22.04", "6.4.2"),
        ("7.1.0.70100-20~24.04", "7.1.0"),
        ("1:30.20.70100-2238427.24.04", "7.1.0"),
        ("1:25.0.0.70100-1", "7.1.0"),
        ("6.4.2.60402-1", "6.4.2"),  # the mirror fixture's
        ("1.0.0.70100-1", "7.1.0"),
        ("10.0.0.100000-1", "10.0.0"),
        # Not AMD's: Debian's own, and versions whose last field is no release.
        ("5.2.3-2", None),
        ("5.7.1-3+b1", None),
        ("2.4.120-1", None),
        ("20230101-1", None),
        ("1.0.0.6040-1", None),
        ("1.0.0.6040212-1", None),
        ("6.4.2", None),
    ],
)
def test_the_release_is_read_from_amds_versions_only(version, release):
    assert release_of(version) == release


@pytest.mark.parametrize(
    ("configured", "full"),
    [("7.1", "7.1.0"), ("6.4.2", "6.4.2"), ("7.0.1", "7.0.1"), (" 6.4 ", "6.4.0")],
)
def test_the_configured_release_is_made_full(configured, full):
    assert full_release(configured) == full


@pytest.mark.parametrize("bad", ["latest", "7", "7.1.0.1", "", "7.x"])
def test_a_configured_value_that_is_no_release_is_refused(bad):
    with pytest.raises(ValueError, match=r"expected X\.Y or X\.Y\.Z"):
        full_release(bad)


# The mirror fixture's two releases (build.sh): the packages rocm-hip-sdk and rocm-opencl-sdk
# pull in, and the driver's.
def release_set(rocm: str, num: str, driver: str) -> dict[str, str]:
    v, tv = f"{rocm}.{num}-1", f"1.0.0.{num}-1"
    names = [
        "rocm-core", "rocm-hip-runtime", "rocm-hip-libraries", "rocm-hip-sdk",
        "rocm-opencl-runtime", "rocm-opencl-sdk",
    ]  # fmt: skip
    found = dict.fromkeys(names, v)
    found.update({"rocminfo": tv, "rocm-smi": tv, "amdgpu-core": f"1:{driver}.{num}-1"})
    return found


R642 = release_set("6.4.2", "60402", "6.4.2")
R710 = release_set("7.1.0", "70100", "30.20")
# Debian 12's own, the Perl modules among them whose last version field has 5 or 6 digits as
# AMD's do (release_of reads them as releases 1.70.29, 2.0.5, 2.0.4, 1.0.0): never AMD's.
OTHERS = {
    "bash": "5.2.15-2+b7", "python3": "3.11.2-1+b1", "libc6": "2.36-9+deb12u9",
    "liberror-perl": "0.17029-2", "libmoo-perl": "2.005005-1", "librole-tiny-perl": "2.002004-1",
    "libjson-perl": "4.10000-1",
}  # fmt: skip
# What rocmlab saw come from AMD's sources (the mirror fixture's two releases).
LEDGER, _ = amd_packages.add({}, R642)
LEDGER, _ = amd_packages.add(LEDGER, R710)


def amd(installed: dict[str, str]) -> dict[str, str]:
    """The installed packages the plan is given: AMD's by the ledger (as rocm_release_plan)."""
    return amd_packages.amd_of(installed, LEDGER)


def test_debians_packages_with_release_like_versions_are_never_amds():
    assert {release_of(OTHERS[n]) for n in ("liberror-perl", "libjson-perl")} == {
        "1.70.29",
        "1.0.0",
    }  # why the version cannot say whose a package is
    result = plan(amd({**R642, **OTHERS}), R710, "7.1")
    assert not {c["name"] for c in result["changes"]} & set(OTHERS)
    assert result["stranded"] == [] and result["installed_releases"] == ["6.4.2"]
    assert preview(amd(OTHERS), "7.1")["moving"] == []


def test_a_host_on_642_moved_to_71_upgrades_every_amd_package_to_its_exact_version():
    result = plan(amd({**R642, **OTHERS}), R710, "7.1")
    assert result["release"] == "7.1.0"
    assert result["installed_releases"] == ["6.4.2"]
    assert {c["name"] for c in result["changes"]} == set(R642)
    assert all(c["action"] == "upgrade" for c in result["changes"])
    assert sorted(result["apt_names"]) == sorted(f"{n}={v}" for n, v in R710.items())
    assert result["downgrade"] is False and result["stranded"] == []
    assert result["summary"].startswith("6.4.2 \u2192 7.1.0: 9 packages change (amdgpu-core ")
    assert "rocm-core 6.4.2.60402-1 \u2192 7.1.0.70100-1" in result["summary"]


def test_a_host_on_71_moved_back_to_642_is_a_downgrade_to_exact_versions():
    result = plan(amd({**R710, **OTHERS}), R642, "6.4.2")
    assert all(c["action"] == "downgrade" for c in result["changes"])
    assert result["downgrade"] is True
    assert sorted(result["apt_names"]) == sorted(f"{n}={v}" for n, v in R642.items())
    assert result["summary"].startswith("7.1.0 \u2192 6.4.2: 9 packages change")


def test_a_host_already_on_its_release_changes_nothing():
    result = plan(amd({**R642, **OTHERS}), R642, "6.4.2")
    assert result["changes"] == [] and result["apt_names"] == [] and result["stranded"] == []
    assert (
        result["summary"] == "ROCm 6.4.2: every AMD package installed is already the release's own"
    )


def test_a_half_moved_host_changes_only_what_is_left_behind():
    # An interrupted upgrade: rocm-core and rocminfo already at 7.1, the rest at 6.4.2.
    installed = {**R642, "rocm-core": R710["rocm-core"], "rocminfo": R710["rocminfo"]}
    result = plan(amd(installed), R710, "7.1")
    assert result["installed_releases"] == ["6.4.2", "7.1.0"]
    assert {c["name"] for c in result["changes"]} == set(R642) - {"rocm-core", "rocminfo"}
    assert result["summary"].startswith("6.4.2 \u2192 7.1.0: 7 packages change")


def test_another_build_of_the_same_release_is_a_rebuild():
    installed = {**R642, "rocm-core": "6.4.2.60402-0"}  # an earlier build AMD's sources served
    ledger, _ = amd_packages.add(LEDGER, {"rocm-core": "6.4.2.60402-0"})
    result = plan(amd_packages.amd_of(installed, ledger), R642, "6.4.2")
    assert result["changes"] == [
        {"name": "rocm-core", "from": "6.4.2.60402-0", "to": "6.4.2.60402-1", "action": "rebuild"}
    ]


def test_the_distributions_packages_are_never_moved():
    # Debian's rocminfo beside AMD's 6.4.2: not from AMD's sources; distro-conflicts decides.
    installed = {**R642, "rocminfo": "5.2.3-2"}
    result = plan(amd(installed), R710, "7.1")
    assert "rocminfo" not in {c["name"] for c in result["changes"]}


def test_a_package_the_new_release_does_not_offer_is_named_not_moved():
    installed = {**R642, "rocm-legacy-tool": "6.4.2.60402-1"}
    ledger, _ = amd_packages.add(LEDGER, {"rocm-legacy-tool": "6.4.2.60402-1"})
    result = plan(amd_packages.amd_of(installed, ledger), R710, "7.1")
    assert result["stranded"] == [
        {"name": "rocm-legacy-tool", "from": "6.4.2.60402-1", "release": "6.4.2"}
    ]
    assert "rocm-legacy-tool=" not in " ".join(result["apt_names"])
    assert (
        "not offered by 7.1.0, left as they are: rocm-legacy-tool 6.4.2.60402-1"
        in result["summary"]
    )


def test_check_mode_names_what_will_change_before_the_sources_know_the_release():
    seen = preview(amd({**R642, **OTHERS}), "7.1")
    assert seen["moving"] == sorted(R642)
    assert seen["summary"] == "6.4.2 \u2192 7.1.0: these packages change: " + ", ".join(
        sorted(R642)
    )
    assert preview(amd({**R642, **OTHERS}), "6.4.2")["moving"] == []
    assert preview(amd(OTHERS), "7.1")["summary"] == (
        "ROCm 7.1.0: no installed AMD package belongs to another release"
    )
