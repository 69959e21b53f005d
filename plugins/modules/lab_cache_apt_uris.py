#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Ask this host's apt which package files this run's packages need, without installing."""

from __future__ import annotations

DOCUMENTATION = r"""
module: lab_cache_apt_uris
short_description: The package files a host's apt would download for this run's packages
description:
  - Runs on a host that fetches through a lab cache, after its apt sources are written. The
    packages this run installs are computed from the roles' settings (plugins/module_utils/
    lab_cache_apt.py, C(apt_wants)), and C(apt-get install --print-uris -qq) lists the files
    apt would download for them - with this host's own sources, pins, configuration and
    installed packages. Nothing is installed or downloaded; apt's state does not change.
  - Module lab_cache_apt_fill on the lab cache host fetches the union of the lists once.
  - When apt cannot resolve the packages, the list is empty and the reason a warning - the
    install that follows reports it as before.
options:
  rocm:
    description: ROCm's packages (rocm_packages), C(name) or C(name=version).
    type: list
    elements: str
    default: []
  driver:
    description: The kernel driver's packages, when installed.
    type: list
    elements: str
    default: []
  pytorch_plan:
    description: pytorch_rocm_plan (its C(packages) and C(python_found) are read).
    type: dict
    default: {}
  tensorflow_plan:
    description: tensorflow_rocm_plan when TensorFlow is enabled (C(packages), C(python_found)).
    type: dict
    default: {}
  allow_downgrades:
    description: Whether the install moves packages down (a release move).
    type: bool
    default: false
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: List what apt would download here
  rocmlab.rocmlab.lab_cache_apt_uris:
    rocm: [rocm-hip-sdk, rocm-opencl-sdk]
    pytorch_plan: "{{ pytorch_rocm_plan }}"
  register: apt_uris
"""

RETURN = r"""
packages:
  description: The packages asked for.
  returned: always
  type: list
  elements: str
uris:
  description: apt's print-uris output, one C('URI' file size hash) line per file.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.lab_cache_apt import apt_wants


def main():
    module = AnsibleModule(
        argument_spec={
            "rocm": {"type": "list", "elements": "str", "default": []},
            "driver": {"type": "list", "elements": "str", "default": []},
            "pytorch_plan": {"type": "dict", "default": {}},
            "tensorflow_plan": {"type": "dict", "default": {}},
            "allow_downgrades": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        packages = apt_wants(
            params["rocm"], params["driver"], params["pytorch_plan"], params["tensorflow_plan"]
        )
    except ValueError as exc:
        module.fail_json(msg=f"lab_cache_apt_uris: {exc}")
    if not packages:
        module.exit_json(changed=False, packages=[], uris="")
    argv = ["apt-get", "install", "--print-uris", "-qq", "--yes"]
    if params["allow_downgrades"]:
        argv.append("--allow-downgrades")
    rc, out, err = module.run_command(
        [*argv, "--", *packages], environ_update={"DEBIAN_FRONTEND": "noninteractive"}
    )
    if rc != 0:
        module.warn(
            f"lab_cache_apt_uris: apt cannot list the files of {', '.join(packages)} (exit {rc}:"
            f" {' | '.join(err.strip().splitlines()[-3:])}); the lab cache fetches them on demand"
        )
        module.exit_json(changed=False, packages=packages, uris="")
    module.exit_json(changed=False, packages=packages, uris=out)


if __name__ == "__main__":
    main()
