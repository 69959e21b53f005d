"""Each case runs the foundation roles once with ansible-playbook against one host and checks
what the run said and what it left on the host."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import playbook_runs
import pytest
import testinfra
from playbook_runs import changed, failures, play_aliases, refusal, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PLAYBOOK = PROJECT / "molecule" / "default" / "converge.yml"
D12, D13 = "rocmlab-edge-debian12", "rocmlab-edge-debian13"
AMD_FPR = os.environ["ROCMLAB_MIRROR_FINGERPRINT"]
WRONG_FPR = os.environ["ROCMLAB_MIRROR_WRONG_FINGERPRINT"]

# What a failed run must not have touched.
SNAPSHOT = (
    "find /etc/apt /etc/ld.so.conf.d /etc/profile.d -type f -print0 | sort -z | xargs -0 sha256sum;"
    " ls -la /etc/apt/keyrings 2>/dev/null; cat /etc/group /etc/passwd;"
    " dpkg-query -W -f '${Package} ${Version} ${Status}\\n'"
)


def host(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def play(name: str, extra_vars: dict, *args: str) -> subprocess.CompletedProcess:
    return playbook_runs.play(PLAYBOOK, extra_vars, "--limit", name, *args)


# Settings the first play refuses (id, container, settings, fragments of the message): all of
# them as aliases of the two containers in ONE run, neither container changing.
BAD_SETTINGS = [
    (
        "version-format",
        D12,
        {"rocm_repo_version": "6.x"},
        ["rocm_repo_version", '"6.x"', "X.Y or X.Y.Z"],
    ),
    (
        "version-unknown-driver",
        D12,
        {"rocm_repo_version": "7.3"},
        ["ROCm 7.3", "rocm_repo_amdgpu_version"],
    ),
    (
        "version-unknown-core-series",
        D12,
        {"rocm_repo_version": "7.9"},
        ['"7.9" is a Core SDK series the support catalog does not list', "catalog.json"],
    ),
    (
        "unknown-source",
        D12,
        {"rocm_repo_source": "ubuntu"},
        ["rocm_repo_source", "ubuntu", "amd, distro"],
    ),
    (
        "fingerprint-length",
        D12,
        {"rocm_repo_key_fingerprint": "CA8BB4727A47B4D0"},
        ["rocm_repo_key_fingerprint", '"CA8BB4727A47B4D0"', "40 hexadecimal"],
    ),
    (
        "pin-priority",
        D12,
        {"rocm_repo_pin_priority": 400},
        ["rocm_repo_pin_priority", "400", "501 to 1000"],
    ),
    (
        "url-scheme",
        D12,
        {"rocm_repo_base_url": "ftp://mirror"},
        ["rocm_repo_base_url", '"ftp://mirror"', "https://"],
    ),
    (
        "amd-on-debian13",
        D13,
        {"rocm_repo_source": "amd"},
        ['"amd" is refused on Debian', "rocm_repo_allow_unsupported"],
    ),
    (
        "package-name",
        D12,
        {"rocm_packages_list": ["rocm hip"]},
        ["rocm_packages_list", '"rocm hip"', "Debian package name"],
    ),
    (
        "dkms-without-amd",
        D12,
        {"rocm_repo_source": "distro", "rocm_packages_driver": "dkms"},
        ["rocm_packages_driver", "dkms", 'rocm_packages_source is "distro"'],
    ),
    (
        "dkms-on-the-core-line",
        D12,
        {"rocm_repo_version": "10.0", "rocm_packages_driver": "dkms"},
        ["rocm_packages_driver", "ROCm 10.0, of AMD's Core SDK line, which ships no kernel driver"],
    ),
    (
        "core-line-on-debian13",
        D13,
        {"rocm_repo_source": "amd", "rocm_repo_version": "10.0"},
        ["rocm_repo_version: ROCm 10.0 is of AMD's Core SDK line", "no packages for Debian 13"],
    ),
    (
        "unknown-user",
        D12,
        {"user_groups_users": ["nobody-here"]},
        ["user_groups_users", '"nobody-here"', "does not exist"],
    ),
    (
        "group-name",
        D13,
        {"user_groups_groups": ["Render Group"]},
        ["user_groups_groups", '"Render Group"', "not a group name"],
    ),
]
# The containers' own settings (molecule.yml's host_vars), which an alias does not inherit.
OWN = {
    D12: {
        "rocm_repo_base_url": os.environ["ROCMLAB_MIRROR_URL"],
        "rocm_repo_key_fingerprint": AMD_FPR,
    },
    D13: {},
}


def snapshots() -> dict[str, str]:
    return {name: host(name).check_output(SNAPSHOT) for name in (D12, D13)}


@pytest.fixture(scope="module")
def bad_settings_run(tmp_path_factory):
    """One run of the foundation roles over every bad-settings alias, with both containers'
    snapshots around it."""
    aliases = {
        case: (container, {**OWN[container], **values})
        for case, container, values, _ in BAD_SETTINGS
    }
    run, before, after = play_aliases(
        tmp_path_factory.mktemp("bad-settings") / "inventory.json", aliases, PLAYBOOK, snapshots
    )
    return run, failures(run, items=True), before, after


def test_bad_settings_change_neither_host(bad_settings_run):
    run, _, before, after = bad_settings_run
    assert run.returncode != 0
    assert after == before


@pytest.mark.parametrize(
    ("case", "container", "values", "expected"), BAD_SETTINGS, ids=[c[0] for c in BAD_SETTINGS]
)
def test_bad_settings_are_refused_clearly(bad_settings_run, case, container, values, expected):
    _, failed, _, _ = bad_settings_run
    refusal(failed, case, expected)


def test_a_release_missing_from_the_mirror_fails_before_any_change():
    failure = playbook_runs.refused_without_change(
        host(D12), SNAPSHOT, lambda: play(D12, {"rocm_repo_version": "6.3"})
    )
    for fragment in [
        "rocm/apt/6.3/dists/jammy/InRelease",
        "404",
        "Nothing on this host was changed",
    ]:
        assert fragment in failure, (fragment, failure[-3000:])


def test_a_key_with_another_fingerprint_is_refused_and_apt_stays_as_it_was():
    if host(D12).file("/etc/apt/keyrings/rocm.gpg").exists:  # start from a host AMD never reached
        assert (
            play(D12, {"rocm_repo_state": "absent", "rocm_packages_state": "absent"}).returncode
            == 0
        )
    before = host(D12).check_output(SNAPSHOT)
    run = play(D12, {"rocm_repo_key_fingerprint": WRONG_FPR})
    assert run.returncode != 0
    assert f"has fingerprint {AMD_FPR}" in said(run)
    assert f"expected {WRONG_FPR}" in said(run)
    assert host(D12).check_output(SNAPSHOT) == before
    assert not host(D12).file("/etc/apt/keyrings/rocm.gpg").exists
    update = host(D12).run("apt-get update 2>&1")
    assert update.rc == 0 and "W:" not in update.stdout and "E:" not in update.stdout


def test_distro_rocm_beside_amds_source_stops_naming_the_packages_then_is_replaced_when_asked():
    h = host(D12)
    h.run_expect([0], "DEBIAN_FRONTEND=noninteractive apt-get install -y rocminfo")
    debian_version = h.package("rocminfo").version
    run = play(D12, {})
    assert run.returncode != 0
    assert f"rocminfo {debian_version} (Debian)" in said(run)
    assert "rocm_packages_replace_distro: true" in said(run)
    assert h.package("rocminfo").version == debian_version  # nothing removed
    assert not h.package("rocm-hip-sdk").is_installed

    run = play(D12, {"rocm_packages_replace_distro": True})
    assert run.returncode == 0, run.stdout[-3000:]
    assert host(D12).package("rocminfo").version == "1.0.0.60402-1"
    assert host(D12).package("rocm-hip-sdk").is_installed


ABSENT = {"rocm_repo_state": "absent", "rocm_packages_state": "absent"}


def test_state_absent_removes_packages_sources_pin_and_keyring_and_again_changes_nothing():
    if not host(D12).package("rocm-hip-sdk").is_installed:  # the state this test starts from
        assert play(D12, {"rocm_packages_replace_distro": True}).returncode == 0
    run = play(D12, ABSENT)
    assert run.returncode == 0, run.stdout[-3000:]
    h = host(D12)
    for path in (
        "/etc/apt/sources.list.d/rocm.sources",
        "/etc/apt/sources.list.d/amdgpu.sources",
        "/etc/apt/preferences.d/rocm-pin-600",
        "/etc/apt/keyrings/rocm.gpg",
        "/etc/ld.so.conf.d/rocm.conf",
        "/etc/profile.d/rocm.sh",
    ):
        assert not h.file(path).exists, path
    # AMD's rocminfo and rocm-smi go with rocm-core; Debian's are not installed in their place.
    for package in ("rocm-hip-sdk", "rocm-opencl-sdk", "rocm-core", "rocminfo", "rocm-smi"):
        assert not h.package(package).is_installed, package
    update = h.run("apt-get update 2>&1")
    assert update.rc == 0 and "W:" not in update.stdout and "E:" not in update.stdout
    assert "rocmlab-amd-mirror" not in h.check_output("apt-cache policy")
    again = play(D12, ABSENT)
    assert again.returncode == 0, again.stdout[-3000:]
    assert changed(again) == 0, again.stdout[-3000:]


def test_rocm_7_adds_the_graphics_repository_and_a_separately_versioned_driver():
    # 7.1.0: the repository path drops the trailing .0; the driver repository is amdgpu 30.20.
    # The DKMS driver is asked for, and skipped because this host is a container.
    run = play(D12, {"rocm_repo_version": "7.1.0", "rocm_packages_driver": "dkms"})
    assert run.returncode == 0, said(run)[-3000:]
    h = host(D12)
    mirror = os.environ["ROCMLAB_MIRROR_URL"]
    expected = {
        "rocm": f"{mirror}/rocm/apt/7.1",
        "rocm-graphics": f"{mirror}/graphics/7.1/ubuntu",
        "amdgpu": f"{mirror}/amdgpu/30.20/ubuntu",
    }
    for name, uri in expected.items():
        source = h.file(f"/etc/apt/sources.list.d/{name}.sources").content_string
        assert f"URIs: {uri}\n" in source, (name, source)
    assert h.package("rocm-core").version == "7.1.0.70100-1"
    assert h.file("/opt/rocm/.info/version").content_string.strip() == "7.1.0"
    assert "dkms is skipped: this host is a container" in said(run)
    assert not h.package("amdgpu-dkms").is_installed


KERNEL_GUARD = PROJECT / "molecule" / "edge_cases" / "kernel-guard.yml"
GUARD_FIXTURE = PROJECT / "tests" / "fixtures" / "kernel-guard"
GUARD_RECORD = "/var/lib/rocmlab/kernel-hold.json"
# What of the fixture goes to the container: never root/var/lib/dpkg, which the playbook links
# to the container's own database.
GUARD_PARTS = ("root/boot", "root/lib", "root/proc", "root/var/lib/dkms", "commands-built",
               "commands-newest-unbuilt")  # fmt: skip


def test_the_kernel_guard_holds_the_kernel_for_real_then_releases_only_its_own_hold(tmp_path):
    # tests/fixtures/kernel-guard: running 6.1.0-28, 6.1.0-29 installed and amdgpu not built for
    # it; stand-ins for linux-image-amd64 and linux-headers-amd64 in the container's dpkg, the
    # admin holding linux-headers-amd64 herself.
    tarball = tmp_path / "kernel-guard.tar"
    with tarfile.open(tarball, "w") as archive:
        for part in GUARD_PARTS:
            archive.add(GUARD_FIXTURE / part, arcname=part)
    h = host(D12)
    run = playbook_runs.play(
        KERNEL_GUARD, {"kguard_admin_hold": True, "kguard_tarball": str(tarball)}, "--limit", D12
    )
    assert run.returncode == 0, said(run)[-3000:]
    assert h.check_output("apt-mark showhold").split() == [
        "linux-headers-amd64",
        "linux-image-amd64",
    ]
    assert json.loads(h.file(GUARD_RECORD).content_string) == {"held": ["linux-image-amd64"]}
    for fragment in (
        "Kernel guard: amdgpu is not installed by DKMS for kernel 6.1.0-29-amd64 (not built)",
        "`sudo dkms autoinstall -k 6.1.0-29-amd64`",
        "Held: linux-image-amd64 (apt-mark showhold)",
        "The running kernel 6.1.0-28-amd64 is kept (no reboot)",
    ):
        assert fragment in said(run), (fragment, said(run)[-3000:])

    # amdgpu built for 6.1.0-29 (`dkms status` after `dkms autoinstall`): rocmlab releases its
    # own hold, not the admin's.
    fixed = playbook_runs.play(KERNEL_GUARD, {"kguard_commands": "commands-built"}, "--limit", D12)
    assert fixed.returncode == 0, said(fixed)[-3000:]
    assert h.check_output("apt-mark showhold").split() == ["linux-headers-amd64"]
    assert json.loads(h.file(GUARD_RECORD).content_string) == {"held": []}
    assert "Kernel guard:" not in said(fixed)
    h.run_expect(
        [0],
        "apt-mark unhold linux-headers-amd64 && dpkg --purge linux-image-amd64 linux-headers-amd64"
        f" && rm -rf /tmp/kguard {GUARD_RECORD}",
    )
