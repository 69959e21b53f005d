"""The host that gets ROCm from wheels (rocmlab_rocm_install: wheels, group rocm_wheels), after
playbooks/rocm.yml: the lab's AMD settings (group amd_source) apply to it, yet apt and the
system's ROCm are as they were (no AMD source, key, pin or package; the rocminfo the admin
installed from Debian in prepare.yml is still there), and the GPU groups are set up as on every
host: the venvs carry ROCm, the host needs only the kernel driver and access to the devices."""

from __future__ import annotations

import os

import pytest
import testinfra.utils.ansible_runner

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
HOSTS = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("rocm_wheels")


@pytest.fixture(params=HOSTS)
def host(request):
    return testinfra.get_host(f"ansible://{request.param}?ansible_inventory={INVENTORY}")


def test_the_inventory_names_amds_repository_for_this_host_too(host) -> None:
    """Else the tests below would prove nothing: the host has the lab's AMD settings."""
    variables = host.ansible.get_variables()
    assert variables["rocmlab_rocm_install"] == "wheels"
    assert variables["rocm_repo_base_url"] == os.environ["ROCMLAB_MIRROR_URL"]


def test_apt_has_no_source_key_or_pin_of_amds(host) -> None:
    for path in (
        "/etc/apt/sources.list.d/rocm.sources",
        "/etc/apt/sources.list.d/amdgpu.sources",
        "/etc/apt/keyrings/rocm.gpg",
        "/etc/apt/preferences.d/rocm-pin-600",
    ):
        assert not host.file(path).exists, path
    assert "rocmlab-amd-mirror" not in host.check_output("apt-get indextargets --format '$(URI)'")


def installed(host) -> set[str]:
    listing = host.check_output("dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n'")
    return {line.split()[-1] for line in listing.splitlines() if line.startswith("ii")}


def test_no_rocm_package_was_installed_and_none_was_removed(host) -> None:
    before = set(host.file("/root/packages-before").content_string.split())
    now = installed(host)
    assert "rocminfo" in before  # the admin's, from Debian (prepare.yml)
    assert before - now == set()
    added = sorted(n for n in now - before if n.startswith(("rocm", "amdrocm", "hip", "amdgpu")))
    assert added == [], added
    # Debian's, untouched: AMD's rocminfo would be 1.0.0.<release>.
    assert not host.package("rocminfo").version.startswith("1.0.0.")
    assert not host.file("/opt/rocm").exists
    assert not host.file("/etc/ld.so.conf.d/rocm.conf").exists


def test_the_gpu_groups_and_device_rules_are_set_up_as_on_every_host(host) -> None:
    assert {"render", "video"} <= set(host.user("researcher").groups)
    udev = host.file("/etc/udev/rules.d/70-rocmlab-gpu.rules")
    assert 'KERNEL=="kfd", GROUP="render", MODE="0660"' in udev.content_string
