#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Plan the move of a host's AMD ROCm packages to the configured release, from apt's cache."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocm_release_plan
short_description: Tell which installed AMD ROCm packages must change to reach a release
description:
  - Reads the installed packages and, for each one whose version carries an AMD release
    (C(6.4.2.60402-1), C(1.0.0.70100-1), C(1:6.4.60402-1)), the version AMD's sources offer
    for I(release). Returns the upgrade or downgrade each needs, as exact C(name=version)
    arguments for apt, and the packages of another release that I(release) does not offer.
  - With I(preview), or when apt does not offer I(release) yet (check mode before the sources
    are written), lists the packages of other releases that will change, without versions.
  - Read-only. Uses python3-apt's cache as apt-cache policy does.
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
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_apt import apt_cache
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_release import (
    full_release,
    plan,
    preview,
    release_of,
)


def read_cache(apt_pkg, cache, origin: str, target: str):
    """(installed name -> version, name -> newest version of target that origin offers)."""
    installed = {}
    offered = {}
    newest = functools.cmp_to_key(apt_pkg.version_compare)
    for package in cache.packages:
        current = package.current_ver
        if current is None:
            continue
        installed[package.name] = current.ver_str
        if release_of(current.ver_str) is None:
            continue
        versions = [
            v.ver_str
            for v in package.version_list
            if release_of(v.ver_str) == target
            and any(pkg_file.origin == origin for pkg_file, _index in v.file_list)
        ]
        if versions:
            offered[package.name] = max(versions, key=newest)
    return installed, offered


def main():
    module = AnsibleModule(
        argument_spec={
            "release": {"type": "str", "required": True},
            "origin": {"type": "str", "required": True},
            "preview": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        target = full_release(module.params["release"])
    except ValueError as error:
        module.fail_json(msg=f"rocm_release_plan: release: {error}")
    apt_pkg, cache = apt_cache(module, "rocm_release_plan")
    installed, offered = read_cache(apt_pkg, cache, module.params["origin"], target)
    if module.params["preview"] or not offered:
        seen = preview(installed, target)
        module.exit_json(
            changed=False,
            preview=True,
            summary=seen["summary"],
            moving=seen["moving"],
            installed_releases=seen["installed_releases"],
            apt_names=[],
            changes=[],
            downgrade=False,
            stranded=[],
        )
    result = plan(installed, offered, target)
    module.exit_json(changed=False, preview=False, **result)


if __name__ == "__main__":
    main()
