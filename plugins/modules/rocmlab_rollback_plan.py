#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""What returns a host to its known-good state (/var/lib/rocmlab/known-good.json)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_rollback_plan
short_description: Plan the return of a host to its known-good state
description:
  - Reads the host's known-good record (written by M(rocmlab.rocmlab.rocmlab_known_good) after
    the host last passed the health gate), the installed packages (C(dpkg-query)) and the
    record's apt files as they are now, and returns what puts the host back - the apt files to
    write back byte-identical (in the form M(rocmlab.rocmlab.rocmlab_apt_files) takes) or to
    remove, AMD's packages to move to their recorded versions (C(name=version)), and AMD's
    packages of a release the record does not hold, which came with the change being undone
    (also those a failed run left unpacked or half-configured), and
    the venvs the record froze whose C(pip freeze) differs now - put back from the copy kept
    beside each (M(rocmlab.rocmlab.rocmlab_venv_keep)) when it has the recorded freeze, else
    rebuilt from the recorded freeze when every line of it is an exact pin or a wheel of
    rocmlab's wheel directory.
  - A package is AMD's when rocmlab's ledger (I(ledger), M(rocmlab.rocmlab.rocmlab_amd_packages))
    says it saw that version come from AMD's sources; no other package is ever changed or
    removed, whatever its version looks like. A record that names another package, or an apt
    file outside I(apt_dir), or that does not match its digest, is refused.
  - Changes nothing; the rules are in C(plugins/module_utils/known_good.py) (rollback_plan).
  - Fails, naming the path and what to do, when the host has no record (it never passed the
    health gate since rocmlab began recording) or the record is not one (a link, not root's,
    too big, not JSON, another format).
options:
  path:
    description: The known-good record.
    type: path
    default: /var/lib/rocmlab/known-good.json
  ledger:
    description: rocmlab's ledger of the packages it saw come from AMD's sources.
    type: path
    default: /var/lib/rocmlab/amd-packages.json
  apt_dir:
    description: The directory every apt file of the record must be in (rocm_repo's).
    type: path
    default: /etc/apt
author: rocmlab contributors (@rocmlab)
seealso:
  - module: rocmlab.rocmlab.rocmlab_known_good
  - module: rocmlab.rocmlab.rocmlab_apt_files
"""

EXAMPLES = r"""
- name: Plan the return to the known-good state
  rocmlab.rocmlab.rocmlab_rollback_plan:
  register: plan

- name: Put AMD's packages back to their recorded versions, removing the other release's
  ansible.builtin.command:
    argv: "{{ plan.apt_command }}"
  when: plan.apt_command | length > 0
"""

RETURN = r"""
since:
  description: When the host was first seen good in the recorded state.
  returned: success
  type: str
release:
  description: The recorded ROCm release.
  returned: success
  type: str
core_series:
  description: The recorded release's core (C(10.0)) when it is of AMD's Core SDK line, else null.
  returned: success
  type: str
apt_files:
  description: C(files) to write back (path, content_base64, owner, group, mode) and C(remove).
  returned: success
  type: dict
changes:
  description: Each package change (name, from, to, action - install, upgrade, downgrade, rebuild).
  returned: success
  type: list
  elements: dict
apt_names:
  description: The changes as C(name=version) for apt.
  returned: success
  type: list
  elements: str
downgrade:
  description: Whether apt must be allowed to install lower versions.
  returned: success
  type: bool
apt_command:
  description: >-
    The one C(apt-get install) that makes the package changes and removals together (a package
    left half-configured by the change being undone is replaced or removed in that run), or [].
  returned: success
  type: list
  elements: str
remove_packages:
  description: AMD packages of a release the record does not hold (came with the change undone).
  returned: success
  type: list
  elements: str
unlisted:
  description: AMD packages of the recorded release that the record does not list (left alone).
  returned: success
  type: list
  elements: str
not_amd:
  description: >-
    Packages a record of format 1 lists that the ledger does not name as AMD's, as "name
    version" (left alone).
  returned: success
  type: list
  elements: str
venvs:
  description: >-
    Each venv the record froze - path, action (in_state; restore - its kept copy, made by
    M(rocmlab.rocmlab.rocmlab_venv_keep) before a run altered it, has the recorded freeze and is
    put back; rebuild - no such copy, and the venv is made anew from the recorded freeze; fail -
    neither: why names what differs, the lines no rebuild takes and the pip command) and why.
  returned: success
  type: list
  elements: dict
summary:
  description: One line saying the move and what changes, or that the host is in its state.
  returned: success
  type: str
missing:
  description: True when the module failed because the host has no known-good record.
  returned: failure
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import (
    amd_packages,
    apt_files,
    known_good,
    venv_keep,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": known_good.PATH},
            "ledger": {"type": "path", "default": amd_packages.PATH},
            "apt_dir": {"type": "path", "default": known_good.APT_DIR},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        content = known_good.read_root_file(path, known_good.MAX_BYTES)
        if content is None:
            module.fail_json(
                msg=f"rocmlab_rollback_plan: there is no known-good record at {path}: this host "
                "has not passed the health gate since rocmlab began recording its state, so "
                "there is no state to go back to. Fix what fails and run playbooks/smoke.yml "
                "(or site.yml) on it; a passing smoke job writes the record.",
                missing=True,
            )
        record = known_good.load(content)
    except (ValueError, OSError) as err:
        module.fail_json(
            msg=f"rocmlab_rollback_plan: the known-good record {path} cannot be used: {err}. "
            "Nothing was changed; a passing smoke job (playbooks/smoke.yml) writes a new one."
        )
    installed = known_good.installed_packages(module, "rocmlab_rollback_plan", present=True)
    try:
        ledger = amd_packages.read(module.params["ledger"])
        now = {
            name: apt_files.read_record(name).to_dict()
            for name in known_good.checked_apt_paths(record, module.params["apt_dir"])
        }
        recorded = venv_keep.recorded_venvs(record)
        venvs_now, kept = venv_keep.host_freezes(
            recorded,
            lambda venv: venv_keep.freeze(
                lambda argv, env: module.run_command(argv, environ_update=env), venv
            ),
        )
        venvs = venv_keep.restore_plan(recorded, venvs_now, kept)
        plan = known_good.rollback_plan(record, installed, ledger, now, venvs)
    except (apt_files.FileRefused, ValueError, KeyError, OSError) as err:
        module.fail_json(msg=f"rocmlab_rollback_plan: {path}: {err}; nothing was changed")
    module.exit_json(changed=False, **plan)


if __name__ == "__main__":
    main()
