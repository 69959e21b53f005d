"""Filter smoke_account: the one rule for the account that runs rocmlab's GPU jobs, read by role
smoke_test (smoke_test_account) and role slurm_health (tier 2's account)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.rocmlab.rocmlab.plugins.filter.accounts import smoke_account

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("user", "users", "invoker", "account"),
    [
        ("alice", ["bob"], "carol", "alice"),  # the setting wins
        ("", ["bob", "dave"], "carol", "bob"),  # else the first account given GPU access
        ("", ["root", "bob"], "carol", "bob"),  # root is never the one
        ("", [], "carol", "carol"),  # else the account running the play
        ("", [], "carol\n", "carol"),  # as `id -un` prints it
        ("", None, "carol", "carol"),
        ("", [], "root", ""),  # root alone: none, which the roles refuse
        ("", ["root"], "carol", ""),  # the listed accounts, not the invoker, once there are some
        ("", [], "", ""),
    ],
)
def test_the_account_that_runs_the_jobs(user, users, invoker, account):
    assert smoke_account(user, users, invoker) == account


def test_bad_input_is_named():
    with pytest.raises(AnsibleFilterError, match=r"the users must be a list, not 'bob'"):
        smoke_account("", "bob")
    with pytest.raises(AnsibleFilterError, match=r"the user must be a string, not None"):
        smoke_account(None, [])


def test_both_roles_take_the_account_from_the_filter():
    """The rule is written once: the two roles call the filter and repeat none of it."""
    validate = (ROOT / "roles/smoke_test/tasks/validate.yml").read_text()
    tasks = yaml.safe_load(validate)
    found = [
        t for block in tasks for t in block.get("block", [block])
        if "smoke_test_account" in (t.get("ansible.builtin.set_fact") or {})
    ]  # fmt: skip
    (task,) = found
    rule = task["ansible.builtin.set_fact"]["smoke_test_account"]
    assert "rocmlab.rocmlab.smoke_account(" in rule
    slurm = yaml.safe_load((ROOT / "roles/slurm_health/vars/main.yml").read_text())
    assert "rocmlab.rocmlab.smoke_account(" in slurm["__slurm_health_tier2_account"]
    for text in (validate, yaml.safe_dump(slurm)):
        assert "reject('equalto', 'root')" not in text
