#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Documentation of the action plugin rocmlab_check_settings (plugins/action/), which runs on
the controller only; nothing of it is sent to a host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_check_settings
short_description: Check every host's settings against the roles' declarations, on the controller
description:
  - An action plugin that runs on the controller only, once per play (C(run_once)), before any
    host changes (role rocmlab, C(tasks/roles.yml)). Nothing is sent to the hosts.
  - For every host of the play's batch it resolves the settings of I(roles) as that host's tasks
    would see them (inventory, play and extra vars, facts, over the roles' defaults and vars),
    validates them against each role's declaration, C(roles/<role>/meta/settings.yml) - the
    declared types and choices with Ansible's argument spec validator, and each setting's
    C(check) (kind, pattern, choices, range, path rule, accepted values) with
    C(module_utils/settings.py).
  - Returns the problems per host (one sentence each, naming the variable, the value and what is
    accepted) and the checks only the host can answer (a directory made root's, C(owner=root)),
    for M(rocmlab.rocmlab.rocmlab_settings). It never fails itself; the caller fails each host
    with its own problems.
  - Role C(rocmlab) (the lab cache a host names, its run lock, dpkg) is checked too, unless
    I(only) is given or I(common) is false. A role whose declaration lists C(includes) (roles
    whose settings it uses) checks theirs as well.
options:
  roles:
    description: The roles whose settings are checked.
    type: list
    elements: str
    required: true
  only:
    description: Check these settings of I(roles) only (an entry point's own settings).
    type: list
    elements: str
  common:
    description: Also check role C(rocmlab)'s settings (the lab cache, the run lock, dpkg).
    type: bool
    default: true
  common_only:
    description:
      - Also check these settings of role C(rocmlab), and no other of its settings (the rollout's
        own settings with the reports directory, in one call).
    type: list
    elements: str
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Check the settings of the roles this run applies, for every host
  rocmlab.rocmlab.rocmlab_check_settings:
    roles: [rocm_repo, rocm_packages]
  run_once: true
  register: __checked

- name: Refuse this host's settings
  ansible.builtin.fail:
    msg: "{{ __checked.problems[inventory_hostname] | join(' ') }} Nothing here was changed."
  when: inventory_hostname in __checked.problems
"""

RETURN = r"""
problems:
  description: Per host of the batch with a problem, one sentence per bad value.
  returned: always
  type: dict
on_host:
  description: Per host, the checks that need the host itself (for rocmlab_settings).
  returned: always
  type: dict
roles:
  description: The roles checked.
  returned: always
  type: list
  elements: str
"""
