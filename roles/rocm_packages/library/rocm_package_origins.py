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
    and the Origin fields of the releases that offer any version of it.
  - Read-only: uses python3-apt's cache as apt-cache policy does.
options:
  names:
    description: Package names to look at; names that are not installed are left out.
    type: list
    elements: str
    required: true
author: rocmlab
"""

RETURN = r"""
installed:
  description: Installed packages among I(names).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "rocminfo", "version": "5.2.3-2", "origins": ["Debian"],
            "offered_by": ["Debian", "repo.radeon.com"]}]
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 (after the module's docs, by convention)


def origins_of(version):
    return sorted({pkg_file.origin for pkg_file, _index in version.file_list if pkg_file.origin})


def installed_origins(cache, names):
    found = []
    for name in names:
        try:
            package = cache[name]
        except KeyError:
            continue
        current = package.current_ver
        if current is None:
            continue
        offered_by = sorted({o for version in package.version_list for o in origins_of(version)})
        found.append(
            {
                "name": name,
                "version": current.ver_str,
                "origins": origins_of(current),
                "offered_by": offered_by,
            }
        )
    return found


def main():
    module = AnsibleModule(
        argument_spec={"names": {"type": "list", "elements": "str", "required": True}},
        supports_check_mode=True,
    )
    try:
        import apt_pkg
    except ImportError:
        module.fail_json(
            msg="rocm_package_origins needs python3-apt on the host: apt-get install python3-apt"
        )
    apt_pkg.init()
    cache = apt_pkg.Cache(progress=None)
    module.exit_json(changed=False, installed=installed_origins(cache, module.params["names"]))


if __name__ == "__main__":
    main()
