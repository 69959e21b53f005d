"""The collection built from this checkout, installed read-only into an empty path, did the work:
roles applied by their fully qualified names changed the hosts, the smoke job ran from it (its
wheel built outside the collection), the tarball holds no development files, and the packaged
playbooks and documentation are there for ansible-playbook and ansible-doc."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import tarfile
from pathlib import Path

import testinfra.utils.ansible_runner

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")
INSTALLED = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "collections"
COLLECTION = INSTALLED / "ansible_collections" / "rocmlab" / "rocmlab"
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
TARBALL = EPHEMERAL / "dist" / "rocmlab-rocmlab-0.1.0.tar.gz"
SMOKE_HOST = "rocmlab-collection-debian12"
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


def test_the_installed_collection_is_read_only():
    probe = COLLECTION / "roles" / "smoke_test" / "written-by-the-test"
    try:
        probe.write_text("x")
    except OSError as error:
        assert error.errno in (errno.EROFS, errno.EACCES), error
    else:
        probe.unlink()
        raise AssertionError(f"{COLLECTION} is writable: the scenario did not make it read-only")


def test_the_smoke_job_ran_from_the_read_only_collection():
    report = json.loads((EPHEMERAL / "reports" / f"{SMOKE_HOST}.json").read_text())
    assert report["passed"] is True, report
    # The wheel was built in the controller's wheel cache (~/.cache/rocmlab/wheels), nothing in
    # the collection.
    for left in ("build", ".cache", "src/rocmlab.egg-info"):
        assert not (COLLECTION / left).exists(), left


def test_the_smoke_host_runs_rocmlab_from_the_collections_wheel(host):
    if host.backend.get_hostname() != SMOKE_HOST:
        return
    wheels = host.check_output("ls /opt/rocmlab/wheels")
    assert wheels.startswith("rocmlab-") and wheels.endswith(".whl"), wheels


def test_the_tarball_holds_no_development_files():
    with tarfile.open(TARBALL) as tar:
        names = set(tar.getnames())
    for shipped in ("LICENSE", "changelogs/changelog.yaml", "playbooks/cluster_check.yml"):
        assert shipped in names, shipped
    tops = {name.split("/")[0] for name in names}
    for development in (
        "ansible.cfg",
        "inventory",
        "tools",
        "requirements",
        ".ansible-lint",
        ".yamllint",
        ".config",
        "molecule",
        "benchmarks",
        "collections",
        ".venv",
        ".cache",
        "build",
    ):
        assert development not in tops, development
    assert not [n for n in names if n.startswith(("tests/python", "tests/fixtures"))]
    # Collection resource names have no '-' (the old names cluster-check.yml, lab-bundle.yml and
    # lab-cache.yml are gone since 0.1.0).
    playbooks = [n for n in names if n.startswith("playbooks/") and n.count("/") == 1]
    assert playbooks and not [n for n in playbooks if "-" in n], playbooks


def test_the_renamed_playbooks_resolve_by_their_full_names():
    for playbook in ("cluster_check", "lab_cache", "lab_bundle", "fleet", "reset"):
        result = run(
            "ansible-playbook", "-i", "localhost,", f"rocmlab.rocmlab.{playbook}", "--syntax-check"
        )
        assert result.returncode == 0, playbook + result.stdout + result.stderr


def test_ansible_doc_shows_every_filter_and_module_with_examples():
    for kind in ("filter", "module"):
        listed = run("ansible-doc", "-t", kind, "-l", "rocmlab.rocmlab")
        assert listed.returncode == 0, listed.stderr
        names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
        assert names, kind
        for name in names:
            shown = run("ansible-doc", "-t", kind, name)
            assert shown.returncode == 0, shown.stderr
            assert "EXAMPLES" in shown.stdout, name
