#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Record the host's current state as its known-good state (/var/lib/rocmlab/known-good.json)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_known_good
short_description: Record the state a host passed the health gate in
description:
  - Writes I(path) with the exact versions of the installed AMD packages (those rocmlab's ledger,
    I(ledger), says came from AMD's sources; run M(rocmlab.rocmlab.rocmlab_amd_packages) first),
    the installed ROCm release (as module_utils rocm_installed reads it - on the ROCm Core SDK
    line the release of the core C(update-alternatives) selects, with the line and that core's
    series, on the legacy line C(/opt/rocm/.info/version)), the bytes, mode and owner of
    I(apt_files), each venv's C(pip freeze), the GPU override file, the running kernel and the
    rocmlab version, and C(since), when the host was first seen good in exactly this state, and
    a digest of it all. Unchanged state leaves the record as it is (changed=false).
  - Call it only after the host passed the health gate (the smoke job).
  - Links and anything but regular files are refused among I(apt_files) and as I(path); a venv
    is frozen only when it and its Python belong to root.
options:
  path:
    description: The record.
    type: path
    default: /var/lib/rocmlab/known-good.json
  apt_files:
    description: The apt files rocm_repo owns; empty keeps the previous record's list.
    type: list
    elements: path
    default: []
  venvs:
    description: Venvs to freeze (the smoke job's); those that do not exist are left out.
    type: list
    elements: path
    default: []
  records_dir:
    description: >-
      Directory of the frameworks' records (C(pytorch.json), C(tensorflow.json)); the venv each
      names is frozen too.
    type: path
    default: /etc/rocmlab
  gfx_file:
    description: The GPU override file gfx_override writes.
    type: path
    default: /etc/environment.d/90-rocmlab-gfx.conf
  rocmlab_version:
    description: The version of rocmlab that ran; empty reads it from the venvs' freeze.
    type: str
    default: ""
  ledger:
    description: rocmlab's ledger of the packages it saw come from AMD's sources.
    type: path
    default: /var/lib/rocmlab/amd-packages.json
  release_kept:
    description: >-
      Once the record holds this state, remove the copies of the venvs that module
      M(rocmlab.rocmlab.rocmlab_venv_keep) kept beside them for a rollback (those of the venvs
      this record and the one it replaces froze): the health gate passed, they are not needed.
    type: bool
    default: false
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Record this state as the host's known-good
  rocmlab.rocmlab.rocmlab_known_good:
    apt_files: [/etc/apt/sources.list.d/rocm.sources, /etc/apt/keyrings/rocm.gpg]
    venvs: [/opt/rocmlab/smoke-venv]
"""

RETURN = r"""
since:
  description: When the host was first seen good in this state (UTC, ISO 8601).
  returned: always
  type: str
rocm_version:
  description: >-
    The installed ROCm release (the selected core's, C(10.0.0), on the Core SDK line; the text
    of C(/opt/rocm/.info/version), C(6.4.2-120), on the legacy line), or null.
  returned: always
  type: str
rocm_line:
  description: The release line installed, C(core) or C(legacy); null without AMD's ROCm.
  returned: always
  type: str
rocm_selected:
  description: On the Core SDK line, the series of the selected core (C(10.0)); else null.
  returned: always
  type: str
packages:
  description: How many AMD packages the record lists.
  returned: always
  type: int
venvs:
  description: The venvs this record and the one it replaces froze (whose kept copies can go).
  returned: always
  type: list
  elements: str
released:
  description: With I(release_kept), the venvs whose kept copies were removed (or would be).
  returned: always
  type: list
  elements: str
"""

import datetime
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import (
    amd_packages,
    apt_files,
    known_good,
    venv_keep,
)

SMALL = 64 * 1024


def read_small(path: str, limit: int = SMALL) -> str | None:
    """A root-owned regular file's text (at most LIMIT bytes), None when absent."""
    data = known_good.read_root_file(path, limit)
    return None if data is None else data.decode("utf-8", errors="replace")


def freeze(module, venv: str) -> list[str] | None:
    """VENV's freeze (venv_keep.freeze: the same lines a rollback compares), None when absent."""
    try:
        return venv_keep.freeze(
            lambda argv, env: module.run_command(argv, environ_update=env), venv
        )
    except (ValueError, OSError) as err:
        module.fail_json(msg=f"rocmlab_known_good: {err}; the known-good record was not written")


def framework_venvs(directory: str) -> list[str]:
    """The venvs the frameworks' records in DIRECTORY name (root's regular *.json files)."""
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".json"))
    except FileNotFoundError:
        return []
    venvs = []
    for name in names:
        text = read_small(os.path.join(directory, name), known_good.MAX_BYTES)
        try:
            venv = json.loads(text or "null")
        except ValueError:
            continue  # not a framework record; the framework roles rewrite theirs
        venv = venv.get("venv") if isinstance(venv, dict) else None
        if isinstance(venv, str) and venv.startswith("/") and "\0" not in venv:
            venvs.append(os.path.normpath(venv))
    return venvs


def previous_record(path: str) -> tuple[dict | None, str | None]:
    try:
        text = read_small(path, known_good.MAX_BYTES)
    except ValueError as err:
        return None, str(err)
    if text is None:
        return None, None
    try:
        return known_good.load(text.encode("utf-8")), None
    except ValueError as err:
        return None, f"{path}: {err}"


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": known_good.PATH},
            "apt_files": {"type": "list", "elements": "path", "default": []},
            "venvs": {"type": "list", "elements": "path", "default": []},
            "gfx_file": {"type": "path", "default": "/etc/environment.d/90-rocmlab-gfx.conf"},
            "records_dir": {"type": "path", "default": "/etc/rocmlab"},
            "rocmlab_version": {"type": "str", "default": ""},
            "release_kept": {"type": "bool", "default": False},
            "ledger": {"type": "path", "default": amd_packages.PATH},
        },
        supports_check_mode=True,
    )
    params = module.params
    previous, replaced = previous_record(params["path"])
    paths = params["apt_files"] or [
        entry["path"] for entry in (previous or {}).get("apt_files", []) if isinstance(entry, dict)
    ]
    try:
        records = [apt_files.read_record(path).to_dict() for path in sorted(set(paths))]
        gfx = read_small(params["gfx_file"])
        rocm = known_good.installed()
        ledger = amd_packages.read(params["ledger"])
    except (apt_files.FileRefused, ValueError, OSError) as err:
        module.fail_json(msg=f"rocmlab_known_good: {err}; the known-good record was not written")
    installed = known_good.installed_packages(module, "rocmlab_known_good")
    try:
        found = framework_venvs(params["records_dir"])
    except (ValueError, OSError) as err:
        module.fail_json(msg=f"rocmlab_known_good: {err}; the known-good record was not written")
    venvs = {}
    for venv in sorted(set(params["venvs"]) | set(found)):
        frozen = freeze(module, venv)
        if frozen is not None:
            venvs[venv] = frozen
    current = known_good.state(
        packages=amd_packages.amd_of(installed, ledger),
        rocm_version=known_good.rocm_version_of(rocm),
        rocm_line=rocm["line"],
        rocm_selected=rocm["selected"],
        apt_files=records,
        venvs=venvs,
        gfx_override=gfx,
        kernel=os.uname().release,
        rocmlab_version=params["rocmlab_version"] or known_good.rocmlab_in(venvs),
    )
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    kept, changed = known_good.record(previous, current, now)
    if changed and not module.check_mode:
        try:
            # /var/lib/rocmlab: root's, made here when no role made it before (ROCm alone).
            os.makedirs(os.path.dirname(params["path"]), mode=0o755, exist_ok=True)
            apt_files.write_file(params["path"], known_good.dump(kept), 0o600, 0, 0)
        except OSError as err:
            module.fail_json(msg=f"rocmlab_known_good: cannot write {params['path']}: {err}")
    # Their kept copies (module rocmlab_venv_keep) are not needed once this state is recorded.
    frozen = sorted(set(kept["venvs"]) | set((previous or {}).get("venvs") or {}))
    released = []
    if params["release_kept"]:
        try:
            released = venv_keep.release_all(frozen, module.check_mode)
        except (ValueError, OSError) as err:
            module.fail_json(
                msg=f"rocmlab_known_good: the record was written, but a kept venv copy could"
                f" not be removed: {err}"
            )
    module.exit_json(
        changed=changed or bool(released),
        path=params["path"],
        since=kept["since"],
        rocm_version=kept["rocm_version"],
        rocm_line=kept.get("rocm_line"),
        rocm_selected=kept.get("rocm_selected"),
        packages=len(kept["packages"]),
        venvs=frozen,
        released=released,
        replaced_invalid=replaced,
    )


if __name__ == "__main__":
    main()
