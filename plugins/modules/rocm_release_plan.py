#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Plan the move of a host's AMD ROCm packages to the configured release, from apt's cache."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocm_release_plan
short_description: Tell which installed AMD ROCm packages must change to reach a release
description:
  - Reads the installed packages and, for each one that is AMD's, the version AMD's sources
    offer for I(release). A package is AMD's when its installed version is offered by a source
    of I(origin) now, or was before (rocmlab's ledger, I(ledger), to which this module adds
    what apt says now); its release is read from its version (C(6.4.2.60402-1),
    C(1.0.0.70100-1), C(1:6.4.60402-1)). No other package is ever moved, whatever its version
    looks like. Returns the upgrade or downgrade each needs, as exact C(name=version)
    arguments for apt, and the packages of another release that I(release) does not offer.
  - With I(preview), or when apt does not offer I(release) yet (check mode before the sources
    are written), lists the packages of other releases that will change, without versions.
  - Uses python3-apt's cache as apt-cache policy does. Writes nothing but the ledger (not in
    check mode); changed says whether it did.
options:
  release:
    description: The configured release (rocm_repo_version), C(X.Y) or C(X.Y.Z).
    type: str
    required: true
  origin:
    description: The Origin of AMD's repositories (C(repo.radeon.com)).
    type: str
    required: true
  preview:
    description: Only list what will change (the sources for I(release) are not written yet).
    type: bool
    default: false
  ledger:
    description: rocmlab's ledger of the packages it saw come from AMD's sources.
    type: path
    default: /var/lib/rocmlab/amd-packages.json
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Plan the move to ROCm 7.1
  rocmlab.rocmlab.rocm_release_plan:
    release: "7.1"
    origin: repo.radeon.com
  register: plan
"""

RETURN = r"""
summary:
  description: 'One line for the admin, e.g. "6.4.2 -> 7.1.0: 8 packages change (...)".'
  returned: always
  type: str
apt_names:
  description: C(name=version) for every package that changes (empty in a preview).
  returned: always
  type: list
  elements: str
changes:
  description: name, from, to and action (upgrade, downgrade, rebuild) of each change.
  returned: always
  type: list
  elements: dict
downgrade:
  description: Whether any change is a downgrade (apt needs to be allowed to downgrade).
  returned: always
  type: bool
installed_releases:
  description: The AMD releases the installed packages belong to.
  returned: always
  type: list
  elements: str
stranded:
  description: Installed packages of another release that I(release) does not offer.
  returned: always
  type: list
  elements: dict
"""

import functools

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import amd_packages, rocm_core
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_apt import apt_cache
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_release import (
    full_release,
    plan,
    preview,
    release_of,
)


def read_cache(apt_pkg, cache, origin: str, target: str, ledger: dict):
    """(AMD's installed packages, name -> version (amd_packages.amd_of over LEDGER); name ->
    newest version of target that origin offers, for each of them)."""
    installed = {}
    for package in cache.packages:
        current = package.current_ver
        if current is not None:
            installed[package.name] = current.ver_str
    # The Core SDK's packages are rocm_core_plan's (they live side by side, never moved).
    amd = {
        name: version
        for name, version in amd_packages.amd_of(installed, ledger).items()
        if not rocm_core.is_core_package(name)
    }
    offered = {}
    newest = functools.cmp_to_key(apt_pkg.version_compare)
    for name in amd:
        package = cache[name]
        versions = [
            v.ver_str
            for v in package.version_list
            if release_of(v.ver_str) == target
            and any(pkg_file.origin == origin for pkg_file, _index in v.file_list)
        ]
        if versions:
            offered[name] = max(versions, key=newest)
    return amd, offered


def main():
    module = AnsibleModule(
        argument_spec={
            "release": {"type": "str", "required": True},
            "origin": {"type": "str", "required": True},
            "preview": {"type": "bool", "default": False},
            "ledger": {"type": "path", "default": amd_packages.PATH},
        },
        supports_check_mode=True,
    )
    try:
        target = full_release(module.params["release"])
    except ValueError as error:
        module.fail_json(msg=f"rocm_release_plan: release: {error}")
    apt_pkg, cache = apt_cache(module, "rocm_release_plan")
    try:
        ledger, noted = amd_packages.note(
            module.params["ledger"],
            amd_packages.offered_installed(cache, module.params["origin"]),
            module.check_mode,
        )
    except (ValueError, OSError) as err:
        module.fail_json(msg=f"rocm_release_plan: {err}; nothing was changed")
    amd, offered = read_cache(apt_pkg, cache, module.params["origin"], target, ledger)
    if module.params["preview"] or not offered:
        seen = preview(amd, target)
        module.exit_json(
            changed=bool(noted),
            preview=True,
            summary=seen["summary"],
            moving=seen["moving"],
            installed_releases=seen["installed_releases"],
            apt_names=[],
            changes=[],
            downgrade=False,
            stranded=[],
        )
    result = plan(amd, offered, target)
    module.exit_json(changed=bool(noted), preview=False, **result)


if __name__ == "__main__":
    main()
