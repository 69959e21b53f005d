"""AMD's Core SDK line (7.14 and later): the host the earlier tests leave on legacy 6.4.2 moves
to Core 10.0 by rocm_repo_version alone (the legacy packages removed, /opt/rocm/* selected into
/opt/rocm/core-10.0 by update-alternatives), then to 7.14 beside it while 10.0 is its
known-good release, is rolled back to 10.0 with its mirror unreachable (a switch of the
alternatives, no download), and goes back to the legacy line. Every step is checked on the host
(dpkg, alternatives, links) and run twice: the second run changes nothing. Runs after
test_release_change.py (pytest collects the files in name order)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import testinfra
from playbook_runs import changed, play, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PLAYBOOK = PROJECT / "playbooks" / "rocm.yml"
ROLLBACK = PROJECT / "playbooks" / "rollback.yml"
RECORD = Path(__file__).resolve().parents[1] / "record-known-good.yml"
HOST = "rocmlab-migration-debian12"
NETWORK = "rocmlab-test"
MIRROR = os.environ["ROCMLAB_MIRROR_URL"]
AUDIT = "dpkg --audit"
APT_FILES = "sha256sum /etc/apt/sources.list.d/* /etc/apt/preferences.d/* /etc/apt/keyrings/*"
# The mirror fixture's device packages (tests/fixtures/amd_mirror/build.sh): a host without a
# GPU gets every target's.
TARGETS = ("gfx942", "gfx1100", "gfx1201")
# The links AMD's amdrocm-core postinst registers for the tree.
TREE = ("bin", "lib", "include", "llvm", "amdgcn", "libexec", "share")
LEGACY = {"rocm-core", "rocm-hip-runtime", "rocm-hip-sdk", "rocm-opencl-sdk", "rocminfo"}


@pytest.fixture(scope="module")
def node():
    return testinfra.get_host(f"ansible://{HOST}?ansible_inventory={INVENTORY}")


def installed(node) -> dict[str, str]:
    out = node.check_output("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n'")
    return {f[1]: f[2] for f in (line.split() for line in out.splitlines()) if f[0] == "ii"}


def core_packages(series: str) -> set[str]:
    return {f"amdrocm-core{series}", f"amdrocm-runtime{series}"} | {
        f"amdrocm{series}-{target}" for target in TARGETS
    }


def assert_on_core(node, series: str, also: tuple[str, ...] = ()) -> None:
    """Core SERIES installed and selected; the cores in ALSO installed beside it; nothing of the
    legacy line left; dpkg whole."""
    packages = installed(node)
    release = f"{series}.0"
    for one in (series, *also):
        assert core_packages(one) <= set(packages), packages
        assert node.file(f"/opt/rocm/core-{one}").is_directory
    assert {n for n in packages if n.startswith("amdrocm")} == set().union(
        *(core_packages(one) for one in (series, *also))
    )
    assert packages[f"amdrocm-core{series}"] == f"{release}-1"
    assert not LEGACY & set(packages), LEGACY & set(packages)
    assert not node.file("/opt/rocm/.info/version").exists
    assert node.check_output("readlink -f /opt/rocm/core") == f"/opt/rocm/core-{series}"
    for link in TREE:
        target = node.check_output(f"readlink -f /opt/rocm/{link}")
        assert target == f"/opt/rocm/core-{series}/{link}", (link, target)
    assert node.check_output("readlink -f /usr/bin/rocminfo") == (
        f"/opt/rocm/core-{series}/bin/rocminfo"
    )
    assert release in node.check_output("/usr/bin/rocminfo")
    assert node.check_output(AUDIT) == ""


def run_twice(extra: dict) -> str:
    run = play(PLAYBOOK, extra)
    assert run.returncode == 0, said(run)[-3000:]
    again = play(PLAYBOOK, extra)
    assert again.returncode == 0 and changed(again) == 0, said(again)[-3000:]
    return said(run)


def test_check_mode_names_the_move_to_the_core_line_and_changes_nothing(node):
    before = installed(node)
    run = play(PLAYBOOK, {"rocm_repo_version": "10.0"}, "--check")
    assert run.returncode == 0, said(run)[-3000:]
    assert installed(node) == before
    assert node.file("/opt/rocm").linked_to == "/opt/rocm-6.4.2"


def test_legacy_to_the_core_line(node):
    assert node.file("/opt/rocm").linked_to == "/opt/rocm-6.4.2"  # where the tests before leave it
    text = run_twice({"rocm_repo_version": "10.0"})
    assert "6.4.2 (legacy) \u2192 10.0.0 (core): installs amdrocm-core10.0" in text, text[-3000:]
    assert "removes the legacy line's " in text
    assert_on_core(node, "10.0")
    # One sources file for the line, AMD's Core SDK repository of Debian 12, and its pin.
    sources = node.check_output("cat /etc/apt/sources.list.d/rocm.sources")
    assert "/rocm/packages/debian12" in sources and "Suites: stable" in sources
    assert not node.file("/etc/apt/sources.list.d/amdgpu.sources").exists
    assert "o=repo.amd.com" in node.check_output("cat /etc/apt/preferences.d/rocm-pin-600")


def test_another_core_goes_beside_the_known_good_one(node):
    run = play(RECORD, {"rocm_repo_version": "10.0"})  # 10.0 passed its gate
    assert run.returncode == 0, said(run)[-3000:]
    text = run_twice({"rocm_repo_version": "7.14"})
    assert "keeps /opt/rocm/core-10.0 (the known-good release)" in text, text[-3000:]
    assert_on_core(node, "7.14", also=("10.0",))


def test_a_rollback_to_the_known_good_core_is_a_switch_with_the_mirror_unreachable(node):
    files = node.check_output(APT_FILES)
    subprocess.run(["docker", "network", "disconnect", NETWORK, HOST], check=True)
    try:
        probe = f"import urllib.request as u; u.urlopen('{MIRROR}', None, 5)"
        reach = node.run(f'python3 -c "{probe}"')
        assert reach.rc != 0, "the mirror still answers"
        run = play(ROLLBACK, {})
        again = play(ROLLBACK, {})
    finally:
        subprocess.run(["docker", "network", "connect", NETWORK, HOST], check=True)
    assert run.returncode == 0, said(run)[-3000:]
    assert "7.14.0, 10.0.0 \u2192 10.0.0 (the known-good state since " in said(run)
    assert again.returncode == 0 and changed(again) == 0, said(again)[-3000:]
    assert "the host is in its known-good state already" in said(again)
    assert_on_core(node, "10.0")
    assert node.check_output(APT_FILES) == files  # nothing of apt's changed


def test_back_to_the_legacy_line(node):
    text = run_twice({"rocm_repo_version": "6.4.2"})
    assert "removes the Core SDK line's amdrocm-core10.0" in text, text[-3000:]
    packages = installed(node)
    assert not [n for n in packages if n.startswith("amdrocm")]
    assert set(packages) >= LEGACY
    assert node.file("/opt/rocm").linked_to == "/opt/rocm-6.4.2"
    assert not node.file("/etc/alternatives/rocm-bin").exists
    assert node.check_output(AUDIT) == ""
