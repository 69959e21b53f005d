#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Select an installed Core SDK release with update-alternatives."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocm_core_switch
short_description: Select an installed ROCm Core SDK release with update-alternatives
description:
  - AMD's Core SDK installs each release in C(/opt/rocm/core-X.Y) and registers C(/opt/rocm/core),
    C(/opt/rocm/{bin,lib,include,llvm,amdgcn,libexec,share}) and its tools in C(/usr/bin) with
    update-alternatives, the newest release winning. This module runs
    C(update-alternatives --set) for every group with an alternative inside
    C(/opt/rocm/core-)I(series) whose value is another, and checks that every link of the tree
    then resolves into it. Nothing is downloaded, so it works with every mirror unreachable.
  - Fails, changing nothing, when the core is not installed (a group of the tree has no
    alternative inside it), naming the groups. Check mode says what would change.
options:
  series:
    description: The Core release to select, C(X.Y) (C(10.0)).
    type: str
    required: true
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Select ROCm 10.0
  rocmlab.rocmlab.rocm_core_switch:
    series: "10.0"
"""

RETURN = r"""
moved:
  description: The groups set to the core, each with name, path and from.
  returned: always
  type: list
  elements: dict
elsewhere:
  description: Groups left on another core, which this one has no alternative for.
  returned: always
  type: list
  elements: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import rocm_core

ADMIN_DIR = "/var/lib/dpkg/alternatives"
# update-alternatives' group names (dpkg's own rule is looser; AMD's are of these characters).
_GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")
_SERIES = re.compile(r"\d{1,2}\.\d{1,2}")


def query(module, name: str) -> dict:
    rc, out, err = module.run_command(["update-alternatives", "--query", name])
    if rc != 0:
        module.fail_json(msg=f"rocm_core_switch: update-alternatives --query {name}: {err.strip()}")
    return rocm_core.parse_query(out)


def groups(module) -> list[dict]:
    """Every alternatives group dpkg knows (its admin directory's file names)."""
    try:
        names = sorted(n for n in os.listdir(ADMIN_DIR) if _GROUP.fullmatch(n))
    except FileNotFoundError:
        names = []
    return [query(module, name) for name in names]


def main():
    module = AnsibleModule(
        argument_spec={"series": {"type": "str", "required": True}},
        supports_check_mode=True,
    )
    series = module.params["series"]
    if not _SERIES.fullmatch(series):
        module.fail_json(msg=f'rocm_core_switch: series "{series}" is not X.Y (10.0)')
    plan = rocm_core.switch_plan(groups(module), series)
    if plan["missing"]:
        module.fail_json(
            msg=(
                f"rocm_core_switch: {rocm_core.core_dir(series)} is not installed: the groups "
                f"{', '.join(plan['missing'])} have no alternative inside it; nothing was changed"
            ),
            moved=[],
            elsewhere=plan["elsewhere"],
        )
    if not module.check_mode:
        for move in plan["moves"]:
            module.run_command(
                ["update-alternatives", "--set", move["name"], move["path"]], check_rc=True
            )
        top = rocm_core.core_dir(series)
        wrong = [
            name
            for name in rocm_core.TREE_GROUPS
            if not rocm_core.inside(os.path.realpath(query(module, name)["link"]), series)
        ]
        if wrong:
            module.fail_json(
                msg=f"rocm_core_switch: after the switch, {', '.join(wrong)} do not resolve "
                f"into {top}",
                moved=plan["moves"],
                elsewhere=plan["elsewhere"],
            )
    module.exit_json(changed=bool(plan["moves"]), moved=plan["moves"], elsewhere=plan["elsewhere"])


if __name__ == "__main__":
    main()
