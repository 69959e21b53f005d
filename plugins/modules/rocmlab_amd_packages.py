#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Write down which installed packages came from AMD's sources (rocmlab's ledger)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_amd_packages
short_description: Write down which installed packages are AMD's
description:
  - Adds to rocmlab's ledger (I(path)) every installed package whose installed version a source
    of I(origin) offers now (apt's cache, as C(apt-cache policy) shows it), and returns the
    installed packages the ledger names as AMD's. The ledger is how rocmlab still knows a
    package of AMD's once the sources name another release and only dpkg knows it; the
    known-good record, the rollback and the release move touch no other package.
  - Run it after AMD's packages were installed or moved (also when that failed), and before the
    apt files change (a rollback).
  - Writes only the ledger (root's, mode 0600; not in check mode). Refuses a ledger that is a
    link, not root's or not one rocmlab wrote, naming it and what to do.
options:
  origin:
    description: The Origins of AMD's repositories, of the legacy line and the Core SDK line.
    type: list
    elements: str
    default: [repo.radeon.com, repo.amd.com]
  path:
    description: The ledger.
    type: path
    default: /var/lib/rocmlab/amd-packages.json
author: rocmlab contributors (@rocmlab)
seealso:
  - module: rocmlab.rocmlab.rocm_release_plan
  - module: rocmlab.rocmlab.rocmlab_rollback_plan
"""

EXAMPLES = r"""
- name: Write down AMD's packages this run installed
  rocmlab.rocmlab.rocmlab_amd_packages:
    origin: [repo.radeon.com, repo.amd.com]
"""

RETURN = r"""
packages:
  description: The installed packages that are AMD's, name -> installed version.
  returned: success
  type: dict
  sample: {"rocm-core": "6.4.2.60402-1", "rocminfo": "1.0.0.60402-1"}
added:
  description: The name=version pairs this run added to the ledger.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import amd_packages
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_apt import apt_cache


def main():
    module = AnsibleModule(
        argument_spec={
            "origin": {
                "type": "list",
                "elements": "str",
                "default": ["repo.radeon.com", "repo.amd.com"],
            },
            "path": {"type": "path", "default": amd_packages.PATH},
        },
        supports_check_mode=True,
    )
    _apt_pkg, cache = apt_cache(module, "rocmlab_amd_packages")
    installed = {
        package.name: package.current_ver.ver_str
        for package in cache.packages
        if package.current_ver is not None
    }
    seen = amd_packages.offered_installed(cache, module.params["origin"])
    try:
        ledger, added = amd_packages.note(module.params["path"], seen, module.check_mode)
    except (ValueError, OSError) as err:
        module.fail_json(msg=f"rocmlab_amd_packages: {err}; nothing was changed")
    module.exit_json(
        changed=bool(added),
        packages=amd_packages.amd_of(installed, ledger),
        added=added,
    )


if __name__ == "__main__":
    main()
