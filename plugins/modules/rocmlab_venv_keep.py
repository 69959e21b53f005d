#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Keep a venv the known-good record froze side by side while a run alters it; put it back."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_venv_keep
short_description: Keep the known-good venvs side by side until the health gate passes
description:
  - C(state=kept), before a run alters I(venv) (pip installs or removes in it) - when the host's
    known-good record (I(path)) froze that venv and its C(pip freeze) is still the record's, a copy
    is kept beside it as C(.NAME.rocmlab-kept) in the same directory, made of hard links
    (C(cp -al)) - owned and moded as the venv, costing room only for the files pip then replaces
    (pip unlinks a file before writing it again, so the copy keeps the old bytes); a copy that
    already has the record's freeze is left as it is. A venv that differs from the record already
    is not kept (a warning says so).
  - C(state=released), once the host passed the health gate and its new state is recorded -
    removes the kept copies of I(venvs) (and anything a stopped step left).
  - C(state=restored), in a rollback - for each venv the record froze, a venv whose freeze is not
    the record's is exchanged with its kept copy when that copy has the record's freeze (one
    rename), and the changed venv removed. With no such copy it is rebuilt from the record's
    freeze - a new venv made beside it (C(.NAME.rocmlab-rebuild)) by I(sources)' interpreter,
    C(pip install --no-deps) of the freeze's exact pins (C(name==version)) from I(sources)' index
    and wheelhouse, a C(name @ file://) line from that wheel in rocmlab's wheel directory
    (C(/opt/rocmlab/wheels), where the smoke job puts rocmlab's) - and exchanged with the venv
    only when its own freeze is the record's. When the record's freeze holds a line a rebuild
    does not take (an editable install, a URL, a file elsewhere) the task fails before anything
    changes; when the rebuild cannot reach the record's freeze its directory is removed and the
    task fails with the venv as it was. Either message names the venv, what differs and the pip
    command that puts the recorded freeze back.
  - The rules are in C(plugins/module_utils/venv_keep.py); a venv, its copy and their directory
    must be root's. At no step is the host left without a working venv at its path (see there).
options:
  state:
    description: What to do.
    type: str
    choices: [kept, released, restored]
    required: true
  venv:
    description: The venv a run is about to alter (C(state=kept)).
    type: path
  venvs:
    description: The venvs whose kept copies are removed (C(state=released)).
    type: list
    elements: path
    default: []
  path:
    description: The known-good record.
    type: path
    default: /var/lib/rocmlab/known-good.json
  sources:
    description:
      - Where a rebuild (C(state=restored)) gets the recorded distributions, as the PyTorch
        role's own install reads them (role rocmlab's tasks/rollback.yml passes that role's
        settings).
    type: dict
    default: {}
    suboptions:
      index_url:
        description:
          - pip's C(--index-url); empty - none. One of I(index_base_url)'s (PyTorch's per-ROCm
            indexes) is replaced by the one the recorded torch came from (its local version,
            C(+rocm6.4)).
        type: str
        default: ""
      index_base_url:
        description: The base of PyTorch's per-ROCm indexes (C(pytorch_rocm_index_base_url)).
        type: str
        default: ""
      no_index:
        description: pip's C(--no-index) (the wheelhouse alone).
        type: bool
        default: false
      find_links:
        description: pip's C(--find-links) (a wheelhouse); empty - none.
        type: str
        default: ""
      extra_args:
        description: More pip options of the lab's (proxy, certificates); never logged.
        type: list
        elements: str
        default: []
      python:
        description: The interpreter a rebuilt venv is made from.
        type: path
        default: /usr/bin/python3
author: rocmlab contributors (@rocmlab)
seealso:
  - module: rocmlab.rocmlab.rocmlab_known_good
  - module: rocmlab.rocmlab.rocmlab_rollback_plan
"""

EXAMPLES = r"""
- name: Keep the venv's known-good state before pip changes it
  rocmlab.rocmlab.rocmlab_venv_keep:
    state: kept
    venv: /opt/rocmlab/venvs/pytorch

- name: Put the venvs back in their known-good state
  rocmlab.rocmlab.rocmlab_venv_keep:
    state: restored
"""

RETURN = r"""
action:
  description: C(state=kept) - keep, none or stale (see venv_keep.keep_decision).
  returned: state=kept
  type: str
why:
  description: C(state=kept) - why, in words.
  returned: state=kept
  type: str
kept:
  description: C(state=kept) - the kept copy's path.
  returned: state=kept
  type: str
released:
  description: C(state=released) - the venvs whose kept copies were removed.
  returned: state=released
  type: list
  elements: str
venvs:
  description: >-
    C(state=restored) - each recorded venv's path, action (in_state, restore, rebuild, fail), why.
  returned: state=restored
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import known_good, venv_keep


def read_record(path: str) -> dict | None:
    """The known-good record (None: there is none); ValueError when it cannot be used."""
    try:
        content = known_good.read_root_file(path, known_good.MAX_BYTES)
        return None if content is None else known_good.load(content)
    except (ValueError, OSError) as err:
        raise ValueError(f"the known-good record {path} cannot be used: {err}") from err


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["kept", "released", "restored"], "required": True},
            "venv": {"type": "path"},
            "venvs": {"type": "list", "elements": "path", "default": []},
            "path": {"type": "path", "default": known_good.PATH},
            "sources": {
                "type": "dict",
                "default": {},
                "options": {
                    "index_url": {"type": "str", "default": ""},
                    "index_base_url": {"type": "str", "default": ""},
                    "no_index": {"type": "bool", "default": False},
                    "find_links": {"type": "str", "default": ""},
                    "extra_args": {
                        "type": "list",
                        "elements": "str",
                        "default": [],
                        "no_log": True,
                    },
                    "python": {"type": "path", "default": "/usr/bin/python3"},
                },
            },
        },
        required_if=[("state", "kept", ["venv"])],
        supports_check_mode=True,
    )
    params = module.params

    def run(argv, env=None):
        return module.run_command(argv, environ_update=env or {})

    def freeze(venv):
        return venv_keep.freeze(run, venv)

    try:
        if params["state"] == "kept":
            venv = venv_keep.check_venv_path(params["venv"])
            kept = venv_keep.kept_path(venv)
            unusable = None
            try:
                recorded = venv_keep.recorded_venvs(read_record(params["path"])).get(venv)
            except ValueError as err:
                # Nothing to keep a copy for; the next passing gate writes a new record.
                recorded, unusable = None, str(err)
                module.warn(f"rocmlab_venv_keep: {venv} is not kept: {err}")
            now = venv_keep.readable_freeze(venv, freeze, "venv") if recorded is not None else None
            copy = venv_keep.kept_freeze(venv, freeze) if recorded is not None else None
            action, why = venv_keep.keep_decision(recorded, now, copy)
            why = unusable or why
            if action == "keep" and not module.check_mode:
                venv_keep.check_parent(venv)
                venv_keep.make_kept_copy(venv, run)
                if freeze(kept) != recorded:
                    raise ValueError(f"the copy {kept} does not have {venv}'s freeze")
            if action == "stale":
                module.warn(
                    f"rocmlab_venv_keep: {venv} is not kept: {why}. A rollback cannot put it back"
                    " from a kept copy."
                )
            module.exit_json(changed=action == "keep", action=action, why=why, kept=kept)

        if params["state"] == "released":
            released = venv_keep.release_all(params["venvs"], module.check_mode)
            module.exit_json(changed=bool(released), released=released)

        record = read_record(params["path"])
        if record is None:
            module.fail_json(
                msg=f"rocmlab_venv_keep: there is no known-good record at {params['path']}"
            )
        recorded = venv_keep.recorded_venvs(record)
        now, kept = venv_keep.host_freezes(recorded, freeze)
        plan = venv_keep.restore_plan(recorded, now, kept)
        failing = [entry["why"] for entry in plan if entry["action"] == "fail"]
        if failing:
            module.fail_json(
                msg="rocmlab_venv_keep: " + " ".join(failing) + " Nothing was changed.",
                venvs=plan,
            )
        restore = [entry["path"] for entry in plan if entry["action"] == "restore"]
        rebuild = [entry["path"] for entry in plan if entry["action"] == "rebuild"]
        if not module.check_mode:
            for venv in restore:
                venv_keep.check_parent(venv)
                venv_keep.put_back(venv)
                if freeze(venv) != recorded[venv]:
                    raise ValueError(f"{venv} was put back but its freeze is not the record's")
            for venv in rebuild:
                try:
                    venv_keep.rebuild(venv, recorded[venv], params["sources"] or {}, run)
                except venv_keep.RebuildFailed as err:
                    module.fail_json(
                        msg="rocmlab_venv_keep: "
                        + venv_keep.rebuild_failed(venv, recorded[venv], now[venv], str(err)),
                        venvs=plan,
                    )
                if freeze(venv) != recorded[venv]:
                    raise ValueError(f"{venv} was rebuilt but its freeze is not the record's")
        module.exit_json(changed=bool(restore or rebuild), venvs=plan)
    except (ValueError, OSError) as err:
        module.fail_json(msg=f"rocmlab_venv_keep: {err}")


if __name__ == "__main__":
    main()
