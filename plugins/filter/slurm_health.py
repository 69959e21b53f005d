# Copyright: rocmlab contributors
# Apache License 2.0
"""Role slurm_health's filters: slurm_gres_plan (gres.conf and the check of slurm.conf's
Gres=gpu line; plugins/module_utils/slurm_conf.py holds the logic)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.slurm_conf import (
    SlurmConfError,
    gres_plan,
)


def slurm_gres_plan(gpus, visible, rsmi, node, slurm_conf):
    """gres.conf's text and count, slurm.conf's view of the node, and the problems."""
    try:
        return gres_plan(list(gpus or []), list(visible or []), bool(rsmi), node, str(slurm_conf))
    except SlurmConfError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"slurm_gres_plan": slurm_gres_plan}
