#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""List the installed packages that depend on a package, per apt's own cache."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocm_package_dependents
short_description: List the installed packages that depend on a package
description:
  - Reports the installed packages whose installed version depends on I(name), directly or
    through other installed packages, that is the packages that have to go when I(name) goes.
  - Only C(Depends) and C(Pre-Depends) count, as with C(apt-cache rdepends --installed
    --recurse --no-suggests --no-recommends --no-enhances --no-conflicts --no-breaks
    --no-replaces); alternatives (C(a | b)) count for each of their members, version
    constraints do not matter.
  - Two differences from that command. Only the installed version's dependencies count,
    where apt-cache also counts those of versions that are not installed (a distribution
    package that AMD's repository also offers, in a version that depends on rocm-core, is not
    a dependent of rocm-core here). A dependency on C(NAME:any) counts as one on I(name).
  - A package apt does not know has no dependents; that is not an error.
  - Read-only. Uses python3-apt's cache, which Ansible's apt module needs as well.
options:
  name:
    description:
      - The package, as apt names it (C(rocm-core), or C(libfoo:i386) for a foreign
        architecture).
    type: str
    required: true
seealso:
  - module: rocmlab.rocmlab.rocm_package_origins
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: List the installed packages that depend on rocm-core
  rocm_package_dependents:
    name: rocm-core
  register: dependents

- name: Remove rocm-core and everything that depends on it in one transaction
  ansible.builtin.apt:
    name: "{{ ['rocm-core'] + dependents.dependents }}"
    state: absent
"""

RETURN = r"""
name:
  description: I(name) as apt names it (the native architecture left out).
  returned: always
  type: str
  sample: rocm-core
known:
  description: Whether apt knows a package of that name.
  returned: always
  type: bool
installed:
  description: Whether the package itself is installed.
  returned: always
  type: bool
dependents:
  description: The installed packages that depend on it, sorted; empty when none do.
  returned: always
  type: list
  elements: str
  sample: [hip-runtime-amd, rocm-hip-runtime, rocminfo]
"""

from collections.abc import Iterable, Mapping

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_apt import apt_cache

STRONG_DEPENDENCIES = ("Depends", "PreDepends")


def dependents(depends: Mapping[str, Iterable[str]], name: str) -> list[str]:
    """The packages that depend on NAME, directly or through each other, sorted (NAME excluded).

    DEPENDS maps each installed package to the packages its installed version depends on.
    """
    reverse: dict[str, set[str]] = {}
    for package, targets in depends.items():
        for target in targets:
            reverse.setdefault(target, set()).add(package)
    found: set[str] = set()
    todo = [name]
    while todo:
        for package in reverse.get(todo.pop(), ()):
            if package != name and package not in found:
                found.add(package)
                todo.append(package)
    return sorted(found)


def installed_depends(cache) -> dict[str, set[str]]:
    """Each installed package of an apt_pkg.Cache, mapped to what its installed version depends on.

    Packages are named as apt-cache prints them (``libfoo:i386`` for a foreign architecture).
    A dependency on ``NAME:any`` is one on every installed architecture of NAME.
    """
    installed = [package for package in cache.packages if package.current_ver is not None]
    by_name: dict[str, list[str]] = {}
    for package in installed:
        by_name.setdefault(package.name, []).append(package.get_fullname(True))
    depends: dict[str, set[str]] = {}
    for package in installed:
        targets: set[str] = set()
        lists = package.current_ver.depends_list
        for kind in STRONG_DEPENDENCIES:
            for alternatives in lists.get(kind, []):
                for dependency in alternatives:
                    target = dependency.target_pkg
                    if target.architecture == "any":
                        base = target.name.rsplit(":", 1)[0]
                        targets.update(by_name.get(base, [base]))
                    else:
                        targets.add(target.get_fullname(True))
        depends[package.get_fullname(True)] = targets
    return depends


def main() -> None:
    module = AnsibleModule(
        argument_spec={"name": {"type": "str", "required": True}},
        supports_check_mode=True,
    )
    _apt_pkg, cache = apt_cache(module, "rocm_package_dependents")
    name = module.params["name"]
    try:
        package = cache[name]
    except KeyError:
        module.exit_json(changed=False, name=name, known=False, installed=False, dependents=[])
    fullname = package.get_fullname(True)
    module.exit_json(
        changed=False,
        name=fullname,
        known=True,
        installed=package.current_ver is not None,
        dependents=dependents(installed_depends(cache), fullname),
    )


if __name__ == "__main__":
    main()
