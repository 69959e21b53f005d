#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Plan the Core SDK side of a move to the configured ROCm release, from apt's cache."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocm_core_plan
short_description: Plan the Core SDK packages to install, and those of the other line or older cores
description:
  - For a release of AMD's Core SDK line (I(line) C(core)) reads the versions AMD's sources (of
    I(origin)) offer of the release's versioned packages, C(amdrocm-coreX.Y), the per-GPU
    C(amdrocmX.Y-gfxNNNN) of I(targets) (every one offered when I(targets) is empty) and, with
    I(sdk), C(amdrocm-core-sdkX.Y); returns the exact C(name=version) apt installs beside the
    cores installed, the older cores' packages that go (all but the known-good release's, up to
    I(keep)) and AMD's packages of the legacy line, which go first (both lines claim /opt/rocm).
  - For a legacy release (I(line) C(legacy)) returns the Core SDK packages that go before the
    legacy packages are installed.
  - A package is AMD's when rocmlab's ledger (I(ledger)) says so, to which this module adds what
    apt says now; no other package is ever named. The known-good release is read from
    I(known_good) (rocmlab's record); a record that cannot be read keeps no core.
  - Writes nothing but the ledger (not in check mode).
options:
  release:
    description: The configured release (rocm_repo_version), C(X.Y) or C(X.Y.Z).
    type: str
    required: true
  line:
    description: Its release line (rocm_repo_line).
    type: str
    required: true
    choices: [legacy, core]
  origin:
    description: The Origins of AMD's repositories, of both lines.
    type: list
    elements: str
    required: true
  targets:
    description: The host's gfx targets; empty for every target the release has a package for.
    type: list
    elements: str
    default: []
  sdk:
    description: Also install the release's whole SDK (C(amdrocm-core-sdkX.Y)).
    type: bool
    default: false
  keep:
    description: How many cores besides the configured one stay (the known-good one first).
    type: int
    default: 1
  known_good:
    description: rocmlab's known-good record.
    type: path
    default: /var/lib/rocmlab/known-good.json
  ledger:
    description: rocmlab's ledger of the packages it saw come from AMD's sources.
    type: path
    default: /var/lib/rocmlab/amd-packages.json
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Plan the move to ROCm 10.0
  rocmlab.rocmlab.rocm_core_plan:
    release: "10.0"
    line: core
    origin: [repo.radeon.com, repo.amd.com]
    targets: [gfx1100]
  register: plan
"""

RETURN = r"""
install:
  description: C(name=version) of each Core SDK package to install (empty on the legacy line).
  returned: always
  type: list
  elements: str
remove_other_line:
  description: AMD's installed packages of the other release line.
  returned: always
  type: list
  elements: str
remove_cores:
  description: The installed packages of older cores that are not kept.
  returned: always
  type: list
  elements: str
kept:
  description: The series of the older cores kept (the known-good one first).
  returned: always
  type: list
  elements: str
series:
  description: The configured release's series (C(10.0)).
  returned: always
  type: str
summary:
  description: 'One line, e.g. "6.4.2 (legacy) -> 10.0.0 (core): installs ...".'
  returned: always
  type: str
"""

import functools

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import (
    amd_packages,
    known_good,
    rocm_core,
)
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_apt import apt_cache
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.support_catalog import (
    full_release,
    release_of,
)


def offered_of(apt_pkg, cache, origins: set, release: str) -> dict[str, str]:
    """name -> newest version of RELEASE a source of ORIGINS offers, for the Core SDK's
    packages."""
    newest = functools.cmp_to_key(apt_pkg.version_compare)
    found = {}
    for package in cache.packages:
        if not rocm_core.is_core_package(package.name):
            continue
        versions = [
            v.ver_str
            for v in package.version_list
            if release_of(v.ver_str) == release
            and any(pkg_file.origin in origins for pkg_file, _index in v.file_list)
        ]
        if versions:
            found[package.name] = max(versions, key=newest)
    return found


def known_good_release(module, path: str) -> str | None:
    try:
        content = known_good.read_root_file(path, known_good.MAX_BYTES)
        if content is None:
            return None
        return known_good.load(content).get("rocm_version")
    except (ValueError, OSError) as err:
        module.warn(f"rocm_core_plan: {path} was not read ({err}); no older core is kept for it")
        return None


def main():
    module = AnsibleModule(
        argument_spec={
            "release": {"type": "str", "required": True},
            "line": {"type": "str", "required": True, "choices": ["legacy", "core"]},
            "origin": {"type": "list", "elements": "str", "required": True},
            "targets": {"type": "list", "elements": "str", "default": []},
            "sdk": {"type": "bool", "default": False},
            "keep": {"type": "int", "default": 1},
            "known_good": {"type": "path", "default": known_good.PATH},
            "ledger": {"type": "path", "default": amd_packages.PATH},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        release = full_release(params["release"])
    except ValueError as error:
        module.fail_json(msg=f"rocm_core_plan: release: {error}")
    origins = set(params["origin"])
    apt_pkg, cache = apt_cache(module, "rocm_core_plan")
    seen = {}
    for origin in origins:
        seen.update(amd_packages.offered_installed(cache, origin))
    try:
        ledger, noted = amd_packages.note(params["ledger"], seen, module.check_mode)
    except (ValueError, OSError) as err:
        module.fail_json(msg=f"rocm_core_plan: {err}; nothing was changed")
    installed = {
        package.name: package.current_ver.ver_str
        for package in cache.packages
        if package.current_ver is not None
    }
    amd = amd_packages.amd_of(installed, ledger)
    offered = offered_of(apt_pkg, cache, origins, release) if params["line"] == "core" else {}
    result = rocm_core.plan(
        release,
        params["line"],
        amd,
        offered,
        targets=params["targets"] or None,
        sdk=params["sdk"],
        keep=params["keep"],
        known_good=known_good_release(module, params["known_good"]),
    )
    module.exit_json(changed=bool(noted), **result)


if __name__ == "__main__":
    main()
