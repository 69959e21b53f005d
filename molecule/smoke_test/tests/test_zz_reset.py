"""playbooks/reset.yml on the converged host. It takes the host apart, so it runs last: pytest
collects this module after test_smoke_test.py (by name) and keeps modules in that order."""

from __future__ import annotations

import os
from pathlib import Path

import testinfra.utils.ansible_runner
from playbook_runs import changed, play, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")
PLAYBOOK = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "playbooks" / "reset.yml"
REPORTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"
# rocmlab's: the PyTorch venv (rocmlab's command is in it), the wheels, the record.
OURS = ["/opt/rocmlab/venvs/pytorch", "/opt/rocmlab/wheels", "/etc/rocmlab/pytorch.json"]
# The host's records and the users' data: the staged dataset, the smoke job's and health runs'
# reports, the known-good record, every file and its size and time.
KEPT = "find /var/lib/rocmlab -printf '%p %y %s %T@\\n' | sort"


def test_reset_removes_what_rocmlab_installed_keeps_the_users_data_and_again_changes_nothing(
    host,
):
    host.run_expect([0], "echo 'the site s own' > /etc/rocmlab/site.conf")
    kept = host.check_output(KEPT)
    assert "/var/lib/rocmlab/datasets/mnist/t10k-labels-idx1-ubyte f" in kept
    assert "/var/lib/rocmlab/known-good.json f" in kept
    groups = set(host.user("researcher").groups)
    assert {"render", "video"} <= groups
    assert all(host.file(path).exists for path in OURS)

    dry = play(PLAYBOOK, {}, "--check")
    assert dry.returncode == 0, said(dry)[-3000:]
    assert changed(dry) > 0, said(dry)[-3000:]
    assert all(host.file(path).exists for path in OURS)  # --check removed nothing

    run = play(PLAYBOOK, {})
    assert run.returncode == 0, said(run)[-3000:]
    for path in OURS:
        assert not host.file(path).exists, path
    assert not host.file("/opt/rocmlab").exists  # nothing else was in it
    assert host.file("/etc/rocmlab/site.conf").exists  # the site's own file, and its directory
    assert host.check_output(KEPT) == kept
    assert set(host.user("researcher").groups) == groups  # the account keeps its GPU access
    assert (REPORTS / f"{host.backend.get_hostname()}.json").exists()  # the controller's copy

    again = play(PLAYBOOK, {})
    assert again.returncode == 0, said(again)[-3000:]
    assert changed(again) == 0, said(again)[-3000:]
