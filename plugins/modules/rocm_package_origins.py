#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Report where the installed versions of some packages came from, per apt's own cache."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocm_package_origins
short_description: Tell which installed packages come from which apt origin
description:
  - For each named package that is installed, reports its installed version, the Origin
    fields of the apt releases that offer that version (an empty list when only dpkg knows it),
    the newest version that releases of I(origin) offer, and whether the installed version
    shadows it.
  - Shadowing is what apt's pin cannot undo, an installed version that I(origin) does not
    offer and that sorts above the newest version I(origin) offers (a pin below 1000 never
    downgrades). A lower version from elsewhere is simply upgraded to I(origin)'s.
  - An installed version that rocmlab saw come from AMD's sources (its ledger, I(ledger)) is
    AMD's own package of another release, never the distribution's, even when no source offers
    it any more (the sources were moved to another release); rocm_release_plan moves it.
  - Read-only. Uses python3-apt's cache as apt-cache policy does.
options:
  names:
    description: Package names to look at; names that are not installed are left out.
    type: list
    elements: str
    required: true
  origin:
    description: The Origin whose packages should win (AMD's, C(repo.radeon.com)).
    type: str
    required: true
  ledger:
    description: rocmlab's ledger of the packages it saw come from AMD's sources.
    type: path
    default: /var/lib/rocmlab/amd-packages.json
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Ask apt where the installed ROCm packages come from
  rocmlab.rocmlab.rocm_package_origins:
    names: [rocminfo, rocm-smi, hipcc]
    origin: repo.radeon.com
  register: origins
"""

RETURN = r"""
installed:
  description: Installed packages among I(names).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "rocminfo", "version": "5.2.3-2", "origins": ["Debian"],
            "origin_version": "1.0.0.60402-1", "shadows": true}]
"""

import functools

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import amd_packages
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_apt import apt_cache


def origins_of(version):
    return sorted({pkg_file.origin for pkg_file, _index in version.file_list if pkg_file.origin})


def installed_origins(apt_pkg, cache, names, origin, ledger):
    found = []
    for name in names:
        try:
            package = cache[name]
        except KeyError:
            continue
        current = package.current_ver
        if current is None:
            continue
        offered = [v.ver_str for v in package.version_list if origin in origins_of(v)]
        newest = max(offered, key=functools.cmp_to_key(apt_pkg.version_compare), default=None)
        from_where = origins_of(current)
        shadows = (
            newest is not None
            and origin not in from_where
            and not amd_packages.is_amd(ledger, name, current.ver_str)
            and apt_pkg.version_compare(current.ver_str, newest) > 0
        )
        found.append(
            {
                "name": name,
                "version": current.ver_str,
                "origins": from_where,
                "origin_version": newest,
                "shadows": shadows,
            }
        )
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "origin": {"type": "str", "required": True},
            "ledger": {"type": "path", "default": amd_packages.PATH},
        },
        supports_check_mode=True,
    )
    apt_pkg, cache = apt_cache(module, "rocm_package_origins")
    try:
        ledger = amd_packages.read(module.params["ledger"])
    except (ValueError, OSError) as err:
        module.fail_json(msg=f"rocm_package_origins: {err}; nothing was changed")
    params = module.params
    installed = installed_origins(apt_pkg, cache, params["names"], params["origin"], ledger)
    module.exit_json(changed=False, installed=installed)


if __name__ == "__main__":
    main()
