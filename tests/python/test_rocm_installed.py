"""The probe of the installed ROCm release (plugins/module_utils/rocm_installed.py, shipped in the
wheel as rocmlab.common.rocm_installed) on trees of both release lines, assembled from what dpkg
and update-alternatives really wrote (tests/fixtures/rocm_installed/README.md), and on hostile
trees: links where AMD has directories, links out of the tree, files over their bounds."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import rocm_installed
from rocm_trees import FIXTURE, LEGACY, LEGACY_INFO, TWO, stanzas, tree

from rocmlab.common import rocm_installed as wheel_copy


def summary(found: dict) -> list[tuple]:
    return [(c["series"], c["release"], c["state"], c["selected"]) for c in found["cores"]]


def test_the_wheel_ships_the_same_module():
    source = Path(rocm_installed.__file__).read_text()
    assert Path(wheel_copy.__file__).read_text() == source


def test_no_rocm(tmp_path):
    found = rocm_installed.probe(str(tree(tmp_path)))
    assert (found["line"], found["release"], found["cores"], found["problems"]) == (
        None,
        None,
        [],
        [],
    )
    assert rocm_installed.describe(found) == "no AMD ROCm"


def test_the_legacy_line_alone(tmp_path):
    found = rocm_installed.probe(str(tree(tmp_path, LEGACY, legacy=True)))
    assert found["line"] == "legacy" and found["release"] == "6.4.2" == found["legacy"]
    assert found["legacy_version"] == LEGACY_INFO and found["selected"] is None
    assert found["cores"] == [] and found["problems"] == [], found
    assert rocm_installed.describe(found) == "ROCm 6.4.2 (legacy line)"


def test_the_legacy_line_read_from_info_version_alone(tmp_path):
    """No dpkg entry (a tarball install): .info/version still names the release."""
    found = rocm_installed.probe(str(tree(tmp_path, legacy=True)))
    assert (found["line"], found["release"], found["legacy_version"]) == (
        "legacy",
        "6.4.2",
        LEGACY_INFO,
    )


def test_one_core(tmp_path):
    root = tree(tmp_path, stanzas("cores", "amdrocm-core7.14"), ("7.14",), "one")
    found = rocm_installed.probe(str(root))
    assert (found["line"], found["release"], found["selected"], found["mode"]) == (
        "core",
        "7.14.0",
        "7.14",
        "auto",
    )
    (core,) = found["cores"]
    assert core == {
        "series": "7.14",
        "release": "7.14.0",
        "package": "amdrocm-core7.14",
        "version": "7.14.0-1",
        "packages": ["amdrocm-core7.14"],
        "state": "installed",
        "path": "/opt/rocm/core-7.14",
        "directory": True,
        "priority": 983050000,
        "selected": True,
    }
    assert found["legacy"] is None and found["problems"] == [], found
    assert (
        rocm_installed.describe(found)
        == "ROCm 7.14.0 (Core SDK line, /opt/rocm/core-7.14 selected)"
    )


def test_two_cores_in_auto_mode_the_newest_is_selected(tmp_path):
    found = rocm_installed.probe(str(tree(tmp_path, TWO, ("7.14", "10.0"), "auto")))
    assert (found["line"], found["release"], found["selected"], found["mode"]) == (
        "core",
        "10.0.0",
        "10.0",
        "auto",
    )
    assert summary(found) == [
        ("7.14", "7.14.0", "installed", False),
        ("10.0", "10.0.0", "installed", True),
    ]
    assert found["cores"][1]["packages"] == ["amdrocm-core10.0", "amdrocm-runtime10.0"]
    assert found["problems"] == [], found
    assert rocm_installed.describe(found) == (
        "ROCm 10.0.0 (Core SDK line, /opt/rocm/core-10.0 selected; also installed: core-7.14)"
    )


def test_two_cores_with_the_older_selected_by_hand(tmp_path):
    found = rocm_installed.probe(str(tree(tmp_path, TWO, ("7.14", "10.0"), "manual")))
    assert (found["release"], found["selected"], found["mode"]) == ("7.14.0", "7.14", "manual")
    assert summary(found) == [
        ("7.14", "7.14.0", "installed", True),
        ("10.0", "10.0.0", "installed", False),
    ]
    assert found["problems"] == [], found
    assert "core-7.14 selected by hand; also installed: core-10.0" in rocm_installed.describe(found)


def test_two_cores_none_selected_names_the_newest_and_says_so(tmp_path):
    root = tree(tmp_path, TWO, ("7.14", "10.0"), "auto")
    (root / "etc/alternatives/core").unlink()
    found = rocm_installed.probe(str(root))
    assert found["release"] == "10.0.0" and found["selected"] is None
    assert any("no core is selected" in p and "the newest" in p for p in found["problems"])


def test_an_auto_group_pointing_at_the_worse_core_is_named(tmp_path):
    root = tree(tmp_path, TWO, ("7.14", "10.0"), "auto")
    (root / "etc/alternatives/core").unlink()
    (root / "etc/alternatives/core").symlink_to("/opt/rocm/core-7.14")
    found = rocm_installed.probe(str(root))
    assert found["release"] == "7.14.0"  # what applications get: the link decides
    assert any("update-alternatives --auto core" in p for p in found["problems"])


def test_both_lines_installed(tmp_path):
    root = tree(tmp_path, LEGACY + TWO, ("7.14", "10.0"), "auto", legacy=True)
    found = rocm_installed.probe(str(root))
    assert (found["line"], found["release"], found["legacy"]) == ("core", "10.0.0", "6.4.2")
    assert any("both release lines are installed" in p for p in found["problems"]), found


def test_a_half_configured_core(tmp_path):
    status = stanzas("half-configured", "amdrocm-core7.14", "amdrocm-core10.0")
    found = rocm_installed.probe(str(tree(tmp_path, status, ("7.14", "10.0"), "one")))
    assert found["release"] == "7.14.0" and found["selected"] == "7.14"
    assert summary(found) == [
        ("7.14", "7.14.0", "installed", True),
        ("10.0", "10.0.0", "half-configured", False),
    ]
    assert any(
        "amdrocm-core10.0 10.0.0-1 is half-configured" in p and "dpkg --configure -a" in p
        for p in found["problems"]
    ), found


def test_removed_packages_whose_configuration_is_kept_are_not_installed(tmp_path):
    status = TWO.replace("install ok installed", "deinstall ok config-files")
    found = rocm_installed.probe(str(tree(tmp_path, status)))
    assert found["line"] is None and found["cores"] == []


def test_a_directory_without_a_package_and_a_package_without_a_directory(tmp_path):
    status = stanzas("cores", "amdrocm-core10.0")
    found = rocm_installed.probe(str(tree(tmp_path, status, ("7.14",))))
    assert [(c["series"], c["package"], c["directory"]) for c in found["cores"]] == [
        ("7.14", None, True),
        ("10.0", "amdrocm-core10.0", False),
    ]
    joined = " | ".join(found["problems"])
    assert "/opt/rocm/core-7.14 is there but no dpkg package installed it" in joined
    assert "amdrocm-core10.0 is installed but /opt/rocm/core-10.0 is missing" in joined


# ---------------------------------------------------------------- hostile trees


def test_a_core_directory_that_is_a_link_is_never_followed(tmp_path):
    root = tree(tmp_path, stanzas("cores", "amdrocm-core7.14"), ("7.14",), "one")
    (root / "opt/rocm/core-10.0").symlink_to("/etc")
    found = rocm_installed.probe(str(root))
    assert [c["series"] for c in found["cores"]] == ["7.14"]
    assert any("/opt/rocm/core-10.0 is a link" in p for p in found["problems"]), found


def test_an_alternatives_link_pointing_outside_opt_rocm_is_not_taken(tmp_path):
    root = tree(tmp_path, TWO, ("7.14", "10.0"), "auto")
    for target in ("/etc", "/opt/rocm/core-10.0/../../../etc", "/opt/rocm/core-99.9"):
        (root / "etc/alternatives/core").unlink()
        (root / "etc/alternatives/core").symlink_to(target)
        found = rocm_installed.probe(str(root))
        assert found["selected"] is None, target
        said = [p for p in found["problems"] if p.startswith("/etc/alternatives/core points to")]
        assert said and target in said[0], found["problems"]


def test_an_oversized_status_file_is_refused_not_guessed_from(tmp_path):
    root = tree(tmp_path, cores=("10.0",))
    with open(root / "var/lib/dpkg/status", "wb") as handle:
        handle.write(TWO.encode())
        handle.truncate(rocm_installed.STATUS_LIMIT + 1)  # sparse: no 32 MiB written
    found = rocm_installed.probe(str(root))
    assert found["refused"] == [
        f"/var/lib/dpkg/status: over {rocm_installed.STATUS_LIMIT} bytes, not read"
    ]
    assert found["cores"][0]["package"] is None and found["release"] is None


def test_links_on_the_way_to_a_file_are_refused(tmp_path):
    root = tree(tmp_path, TWO, ("7.14", "10.0"), "auto")
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "var/lib/dpkg/status").unlink()
    (root / "var/lib/dpkg/status").symlink_to("/etc/passwd")
    (root / "var/lib/dpkg/alternatives/core").unlink()
    (root / "var/lib/dpkg/alternatives/core").symlink_to("/etc/passwd")
    found = rocm_installed.probe(str(root))
    assert found["refused"] == [
        "/var/lib/dpkg/status: a symbolic link (not followed)",
        "/var/lib/dpkg/alternatives/core: a symbolic link (not followed)",
    ]
    shutil.rmtree(root / "var/lib/dpkg")
    (root / "var/lib/dpkg").symlink_to("/etc")
    found = rocm_installed.probe(str(root))
    assert found["refused"][0].startswith("/var/lib/dpkg/status: a directory on its path")


def test_the_legacy_links_are_followed_inside_the_root_only(tmp_path):
    root = tree(tmp_path, legacy=True)
    (root / "etc/alternatives/rocm").unlink()
    # An absolute target and ".." start again at the root, as they would for a chroot.
    (root / "etc/alternatives/rocm").symlink_to("/../../../../../../etc")
    (root / "etc/.info").mkdir()
    (root / "etc/.info/version").write_text("7.0.2-1\n")
    assert rocm_installed.probe(str(root))["legacy_version"] == "7.0.2-1"
    (root / "etc/alternatives/rocm").unlink()
    (root / "etc/alternatives/rocm").symlink_to("/opt/rocm")  # a loop
    found = rocm_installed.probe(str(root))
    assert found["line"] is None and any("more than 8 links" in p for p in found["problems"])


def test_an_oversized_or_linked_info_version_is_refused(tmp_path):
    root = tree(tmp_path, legacy=True)
    info = root / "opt/rocm-6.4.2/.info/version"
    info.write_text("7" * 300)
    found = rocm_installed.probe(str(root))
    assert found["legacy_version"] is None and "over 256 bytes" in found["refused"][0]
    info.unlink()
    info.symlink_to("/etc/hostname")
    assert "a symbolic link" in rocm_installed.probe(str(root))["refused"][0]


def test_files_of_another_owner_are_refused_when_an_owner_is_asked(tmp_path):
    root = tree(tmp_path, TWO, ("7.14", "10.0"), "auto")
    other = os.getuid() + 1
    found = rocm_installed.probe(str(root), owner=other)
    assert f"/var/lib/dpkg/status: owned by uid {os.getuid()}, not {other}" in found["refused"]
    assert rocm_installed.probe(str(root), owner=os.getuid())["refused"] == []


def test_packages_parsed_by_the_caller_are_taken_as_they_are(tmp_path):
    root = tree(tmp_path, "", ("10.0",))
    packages = {"amdrocm-core10.0": {"Status": "install ok installed", "Version": "10.0.0-1"}}
    found = rocm_installed.probe(str(root), packages=packages)
    assert found["release"] == "10.0.0" and found["cores"][0]["state"] == "installed"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sometimes\n/opt/rocm/core\n\n",
        "auto\n/opt/rocm/core\n",
        "auto\n/opt/rocm/core\n\n/opt/rocm/core-10.0\nhigh\n\n",
    ],
)
def test_an_admin_file_in_another_format_is_named(tmp_path, text):
    with pytest.raises(ValueError):
        rocm_installed.parse_alternatives(text)
    root = tree(tmp_path, TWO, ("7.14", "10.0"), "auto")
    (root / "var/lib/dpkg/alternatives/core").write_text(text)
    found = rocm_installed.probe(str(root))
    assert found["mode"] is None and found["selected"] == "10.0"
    assert any(p.startswith("/var/lib/dpkg/alternatives/core: ") for p in found["problems"])


def test_the_captured_admin_files_parse():
    auto = rocm_installed.parse_alternatives((FIXTURE / "alternatives/auto/core").read_text())
    assert auto == {
        "mode": "auto",
        "link": "/opt/rocm/core",
        "alternatives": {"/opt/rocm/core-10.0": 1375051440, "/opt/rocm/core-7.14": 983050000},
    }
    slaves = "manual\n/usr/bin/x\nx.1\n/usr/share/man/x.1\n\n/opt/a\n5\n/opt/a.1\n\n"
    assert rocm_installed.parse_alternatives(slaves)["alternatives"] == {"/opt/a": 5}
