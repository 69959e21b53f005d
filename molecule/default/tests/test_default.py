"""State of the hosts after the foundation roles: apt sources, pin, packages, groups, paths.

Debian 12 hosts (group amd_source) use the local signed mirror in repo.radeon.com's layout,
Debian 13 hosts (group distro_source) the distribution's own ROCm packages. The host that gets
ROCm from wheels (group rocm_wheels) has its own tests (test_rocm_from_wheels.py).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
from apt_keys import primary_fingerprints

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
HOSTS = RUNNER.get_hosts("all:!rocm_wheels")
MIRROR_HOST = "rocmlab-amd-mirror"
KEYRING = "/etc/apt/keyrings/rocm.gpg"
AMD_SOURCES = ("rocm", "amdgpu", "rocm-graphics")


def groups_of(host) -> list[str]:
    return host.ansible.get_variables()["group_names"]


def amd(host) -> bool:
    return "amd_source" in groups_of(host)


@pytest.mark.parametrize("host_name", HOSTS)
def test_keyring_is_root_owned_and_world_readable(host_name):
    host = testinfra.get_host(f"ansible://{host_name}?ansible_inventory={INVENTORY}")
    keyring = host.file(KEYRING)
    if not amd(host):
        assert not keyring.exists
        return
    assert keyring.is_file
    assert (keyring.user, keyring.group, keyring.mode) == ("root", "root", 0o644)
    assert primary_fingerprints(host, KEYRING) == [os.environ["ROCMLAB_MIRROR_FINGERPRINT"]]


@pytest.mark.parametrize("host_name", HOSTS)
def test_no_key_is_trusted_for_every_repository(host_name):
    host = testinfra.get_host(f"ansible://{host_name}?ansible_inventory={INVENTORY}")
    assert not host.file("/etc/apt/trusted.gpg").exists
    rings = host.check_output(
        "find /etc/apt/trusted.gpg.d -type f -name '*.gpg' -o -type f -name '*.asc'"
    )
    for ring in rings.split():
        assert os.environ["ROCMLAB_MIRROR_FINGERPRINT"] not in primary_fingerprints(host, ring)


@pytest.mark.parametrize("host_name", HOSTS)
def test_amd_sources_are_deb822_with_signed_by(host_name):
    host = testinfra.get_host(f"ansible://{host_name}?ansible_inventory={INVENTORY}")
    sources = {name: host.file(f"/etc/apt/sources.list.d/{name}.sources") for name in AMD_SOURCES}
    if not amd(host):
        assert not any(f.exists for f in sources.values())
        return
    rocm = sources["rocm"].content_string
    assert f"URIs: {os.environ['ROCMLAB_MIRROR_URL']}/rocm/apt/6.4.2\n" in rocm
    assert "Suites: jammy\n" in rocm  # AMD registers Debian 12 with its Ubuntu 22.04 suite
    assert f"Signed-By: {KEYRING}\n" in rocm
    amdgpu = sources["amdgpu"].content_string
    assert f"URIs: {os.environ['ROCMLAB_MIRROR_URL']}/amdgpu/6.4.2/ubuntu\n" in amdgpu
    assert not sources["rocm-graphics"].exists  # only ROCm 7.x has a graphics repository
    for source in (sources["rocm"], sources["amdgpu"]):
        assert (source.user, source.mode) == ("root", 0o644)


@pytest.mark.parametrize("host_name", HOSTS)
def test_every_third_party_source_is_signed_by_its_own_keyring(host_name):
    host = testinfra.get_host(f"ansible://{host_name}?ansible_inventory={INVENTORY}")
    listing = host.check_output(
        "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true"
    )
    stanzas = [s for s in re.split(r"\n\s*\n", listing) if "URIs:" in s]
    for stanza in stanzas:
        if MIRROR_HOST in stanza:
            assert "Signed-By:" in stanza, stanza
    one_line = [ln for ln in listing.splitlines() if re.match(r"\s*deb(-src)?\s", ln)]
    assert not [ln for ln in one_line if MIRROR_HOST in ln or "radeon" in ln]


@pytest.mark.parametrize("host_name", HOSTS)
def test_pin_makes_the_mirror_win_over_debian(host_name):
    host = testinfra.get_host(f"ansible://{host_name}?ansible_inventory={INVENTORY}")
    pin = host.file("/etc/apt/preferences.d/rocm-pin-600")
    if not amd(host):
        assert not pin.exists
        return
    assert pin.content_string.splitlines()[-3:] == [
        "Package: *",
        "Pin: release o=repo.radeon.com",
        "Pin-Priority: 600",
    ]
    policy = host.check_output("apt-cache policy rocminfo")
    installed = re.search(r"Installed: (\S+)", policy).group(1)
    candidate = re.search(r"Candidate: (\S+)", policy).group(1)
    # AMD-style versions sort below Debian's 5.2.3: only the pin lets the mirror win.
    assert installed == candidate == "1.0.0.60402-1"
    assert re.search(
        r"\*\*\* 1\.0\.0\.60402-1 600\n\s+600 http://rocmlab-amd-mirror/rocm/apt/6\.4\.2 jammy",
        policy,
    )
    assert re.search(r"5\.2\.3-\S+ 500", policy)  # Debian's rocminfo is there, and loses


def origins_of_installed(host, name: str) -> set[str]:
    """The Origin fields of the releases that offer the installed version, from apt-cache policy."""
    policy = host.check_output("apt-cache policy %s", name)
    # The lines under "*** <installed version>", up to the next version of the table.
    after_installed = policy.split("*** ", 1)[1].splitlines()[1:]
    sources = []
    for line in after_installed:
        if not line.startswith(" " * 8):
            break
        sources.append(line)
    urls = re.findall(r"^\s+\d+ (http\S+) (\S+)/", "\n".join(sources), re.M)
    assert urls, policy
    releases = host.check_output("apt-cache policy")
    origins = set()
    for url, suite in urls:
        block = re.search(re.escape(f"{url} {suite}/") + r".*\n\s+release (\S+)", releases)
        origins |= {f[2:] for f in block.group(1).split(",") if f.startswith("o=")}
    return origins


@pytest.mark.parametrize("host_name", HOSTS)
def test_rocm_packages_are_installed_from_the_right_origin(host_name):
    host = testinfra.get_host(f"ansible://{host_name}?ansible_inventory={INVENTORY}")
    if amd(host):
        wanted = ["rocm-hip-sdk", "rocm-opencl-sdk", "rocm-core", "rocminfo", "rocm-smi"]
        origin = "repo.radeon.com"
    else:
        wanted = ["rocminfo", "rocm-smi", "hipcc", "rocm-opencl-icd", "clinfo"]
        origin = "Debian"
    for name in wanted:
        assert host.package(name).is_installed, name
        assert origins_of_installed(host, name) == {origin}, name


@pytest.mark.parametrize("host_name", HOSTS)
def test_gpu_groups_and_members(host_name):
    host = testinfra.get_host(f"ansible://{host_name}?ansible_inventory={INVENTORY}")
    member = "researcher" if amd(host) else "root"  # default: the account that runs the play
    assert host.group("render").exists
    assert host.group("video").exists
    assert {"render", "video"} <= set(host.user(member).groups)
    adduser = host.file("/etc/adduser.conf")
    udev = host.file("/etc/udev/rules.d/70-rocmlab-gpu.rules")
    if amd(host):
        assert 'EXTRA_GROUPS="render video"' in adduser.content_string
        assert "ADD_EXTRA_GROUPS=1" in adduser.content_string
        assert 'KERNEL=="kfd", GROUP="render", MODE="0660"' in udev.content_string
    else:
        assert not udev.exists


@pytest.mark.parametrize("host_name", HOSTS)
def test_opt_rocm_paths(host_name):
    host = testinfra.get_host(f"ansible://{host_name}?ansible_inventory={INVENTORY}")
    ld_conf = host.file("/etc/ld.so.conf.d/rocm.conf")
    profile = host.file("/etc/profile.d/rocm.sh")
    if not amd(host):
        assert not ld_conf.exists and not profile.exists
        return
    assert ld_conf.content_string.splitlines()[1:] == ["/opt/rocm/lib", "/opt/rocm/lib64"]
    assert host.file("/opt/rocm").is_symlink
    path = host.check_output("env -i bash -lc 'echo $PATH'")
    assert "/opt/rocm/bin" in path.split(":")
    assert "/opt/rocm/lib" in host.check_output("ldconfig -v 2>/dev/null | grep '^/'")


@pytest.mark.parametrize("host_name", HOSTS)
def test_rocminfo_reports_no_gpu_instead_of_crashing(host_name):
    host = testinfra.get_host(f"ansible://{host_name}?ansible_inventory={INVENTORY}")
    result = host.run("rocminfo")
    # No KFD in a container: rocminfo must say so and exit with an error, not die on a signal.
    assert 0 < result.rc < 128
    assert re.search(
        r"ROCk module is NOT loaded|HSA_STATUS_ERROR|no GPU", result.stdout + result.stderr
    )


def test_check_mode_on_the_converged_hosts_changes_nothing():
    playbook = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
    run = subprocess.run(
        ["ansible-playbook", "--check", "-i", INVENTORY, str(playbook)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", run.stdout, re.M)
    assert len(recap) == len(RUNNER.get_hosts("all"))
    assert all(changed == "0" for _, changed in recap), run.stdout[-3000:]
