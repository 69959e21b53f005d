"""A tutorial-style host after the migration: legacy source and trusted key gone, new setup in
place, nothing else in /etc/apt changed, apt-get update clean."""

from __future__ import annotations

import os

import pytest
import testinfra.utils.ansible_runner
from apt_keys import primary_fingerprints

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")
AMD_FPR = os.environ["ROCMLAB_MIRROR_FINGERPRINT"]
OTHER_FPR = os.environ["ROCMLAB_MIRROR_WRONG_FINGERPRINT"]


def test_tutorial_source_is_removed(host):
    assert not host.file("/etc/apt/sources.list.d/rocm.list").exists


def test_only_amds_line_is_removed_from_the_admins_file(host):
    extras = host.file("/etc/apt/sources.list.d/lab-extras.list").content_string
    assert extras == (
        "# lab extras, kept by the admin\n"
        "# deb http://packages.lab.example.org/debian bookworm main\n"
    )


def test_amds_key_is_no_longer_trusted_for_every_repository(host):
    assert primary_fingerprints(host, "/etc/apt/trusted.gpg") == [OTHER_FPR]
    assert not host.file("/etc/apt/trusted.gpg.d/rocm.gpg").exists
    assert primary_fingerprints(host, "/etc/apt/trusted.gpg.d/other-vendor.gpg") == [OTHER_FPR]


def test_the_versioned_signed_by_setup_replaces_it(host):
    assert primary_fingerprints(host, "/etc/apt/keyrings/rocm.gpg") == [AMD_FPR]
    source = host.file("/etc/apt/sources.list.d/rocm.sources").content_string
    assert "Signed-By: /etc/apt/keyrings/rocm.gpg" in source
    assert host.file("/etc/apt/preferences.d/rocm-pin-600").exists


def test_nothing_else_in_etc_apt_changed(host):
    result = host.run("sha256sum --check --quiet /root/apt-untouched.sha256")
    assert result.rc == 0, result.stdout + result.stderr
    assert host.file("/etc/apt/apt.conf.d/99lab-proxy").exists


@pytest.fixture(scope="module")
def apt_update(host):
    return host.run("apt-get update 2>&1")


@pytest.mark.parametrize("noise", ["W:", "E:", "Err:", "NO_PUBKEY", "legacy trusted.gpg"])
def test_apt_get_update_is_clean(apt_update, noise):
    assert apt_update.rc == 0, apt_update.stdout
    assert noise not in apt_update.stdout
