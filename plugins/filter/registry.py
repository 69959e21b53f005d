# Copyright: rocmlab contributors
# Apache License 2.0
"""Filters over the collection's role registry (roles/rocmlab/vars/main.yml, __rocmlab_registry;
the logic is plugins/module_utils/registry.py).

registry_roles(registry) -> {"site", "<group>", "<column>", "all", "tags"}: the roles by group
    and by column, in the registry's order (role rocmlab's __rocmlab_roles_of)
registry_applied(registry, wanted, run_tags, skip_tags, checked, install) -> the roles of WANTED
    whose settings this run checks now (their tag selected by --tags, not skipped by --skip-tags,
    not checked on the host yet, not installing a system ROCm where INSTALL, the host's
    rocmlab_rocm_install, is wheels)
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import registry


def registry_roles(entries):
    """The roles by group and by column."""
    try:
        return registry.roles(list(entries or []))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def registry_applied(entries, wanted, run_tags, skip_tags, checked=None, install="system"):
    """The roles of WANTED whose settings this run checks now."""
    try:
        return registry.applied(
            list(entries or []),
            list(wanted or []),
            run_tags,
            skip_tags,
            list(checked or []),
            install,
        )
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"registry_roles": registry_roles, "registry_applied": registry_applied}
