"""The collection built from this checkout, installed into an empty path, did the work: roles
applied by their fully qualified names changed the host, and the packaged playbooks and role
documentation are there for ansible-playbook and ansible-doc."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import testinfra.utils.ansible_runner

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")
INSTALLED = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "collections"
COLLECTION = INSTALLED / "ansible_collections" / "rocmlab" / "rocmlab"
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
# No configuration of this checkout's: only the installed collection may provide anything.
(EPHEMERAL / "empty-ansible.cfg").write_text("[defaults]\n")
ENV = dict(
    os.environ,
    ANSIBLE_COLLECTIONS_PATH=str(INSTALLED),
    ANSIBLE_ROLES_PATH=str(EPHEMERAL / "no-roles"),
    ANSIBLE_CONFIG=str(EPHEMERAL / "empty-ansible.cfg"),
)


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd="/", check=False)


def test_the_roles_changed_the_host(host):
    assert "render" in host.user("researcher").groups
    assert "video" in host.user("researcher").groups
    # Debian 13 takes the distribution's ROCm: rocm_repo wrote no AMD source.
    assert not host.file("/etc/apt/sources.list.d/rocm.sources").exists


def test_the_collection_holds_roles_modules_playbooks_and_the_python_package():
    manifest = json.loads((COLLECTION / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["name"] == "rocmlab"
    for path in (
        "roles/rocm_repo/tasks/main.yml",
        "plugins/modules/rocmlab_settings.py",
        "plugins/module_utils/rocm_gpg.py",
        "playbooks/site.yml",
        "pyproject.toml",
        "src/rocmlab/cli.py",
    ):
        assert (COLLECTION / path).is_file(), path
    assert not (COLLECTION / "collections").exists()  # the checkout's link to itself stays out


def test_the_packaged_site_playbook_resolves_every_role_and_module():
    result = run("ansible-playbook", "-i", "localhost,", "rocmlab.rocmlab.site", "--syntax-check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_doc_shows_a_role_from_the_installed_collection():
    result = run("ansible-doc", "-t", "role", "rocmlab.rocmlab.pytorch_rocm")
    assert result.returncode == 0, result.stderr
    assert "pytorch_rocm_index_url" in result.stdout
    assert str(INSTALLED) in result.stdout
