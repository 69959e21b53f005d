# Copyright: rocmlab contributors
# Apache License 2.0
"""Who runs the GPU jobs rocmlab starts: smoke_account, the one rule role smoke_test (its smoke
job, the health timer's tier 2, cluster_check's jobs through smoke_test_account) and role
slurm_health (tier 2 after a failed job or a maintenance boot) both apply."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def smoke_account(user, users=None, invoker="") -> str:
    """USER (smoke_test_user) when set; else the first account of USERS (user_groups_users, the
    accounts role user_groups gives GPU access to), or of [INVOKER] when USERS is empty, that is
    not root; '' when there is none (the caller refuses it: root never runs these jobs)."""
    if not isinstance(user, str):
        raise AnsibleFilterError(f"smoke_account: the user must be a string, not {user!r}")
    if user:
        return user
    if users is not None and not isinstance(users, list):
        raise AnsibleFilterError(f"smoke_account: the users must be a list, not {users!r}")
    candidates = list(users or []) or [str(invoker or "").strip()]
    return next((str(name) for name in candidates if name and name != "root"), "")


class FilterModule:
    def filters(self):
        return {"smoke_account": smoke_account}
