# Copyright: rocmlab contributors
# Apache License 2.0
"""Which ROCm release a host's AMD packages belong to, and what changes to reach another one.

AMD's packages carry their release in their version: the last dot-separated field of the
upstream version is the release written MMmmpp (rocm-core ``6.4.2.60402-120~22.04``, rocminfo
``1.0.0.60402-120~22.04``, amdgpu-dkms ``1:6.4.60402-2164967.22.04``; 7.1.0 is ``70100``, see
the package lists of repo.radeon.com/rocm/apt/<release>/), which support_catalog.release_of
reads. Whether a package IS AMD's cannot be read from its version (Debian's liberror-perl
``0.17029-2`` has such a field too): that is amd_packages' fact, and release_of is used only on
packages it names as AMD's.

Pure functions: the module rocm_release_plan feeds them apt's cache; tests feed them tables.
"""

from __future__ import annotations

from ansible_collections.rocmlab.rocmlab.plugins.module_utils.support_catalog import (
    full_release,
    leading_release,
    release_key,
    release_of,
)

# The release parsers are the support catalog's (one parser for the collection and the wheel);
# the names stay importable from here.
__all__ = ["full_release", "leading_release", "plan", "preview", "release_key", "release_of"]


def plan(amd: dict[str, str], offered: dict[str, str], configured: str) -> dict:
    """What moves a host's AMD packages to the configured release.

    amd:       name -> installed version of every installed package that is AMD's
               (amd_packages.amd_of); no other package is ever moved.
    offered:   name -> the version AMD's sources offer for the configured release.
    configured: rocm_repo_version ("7.1", "6.4.2").

    Returns releases found installed, the changes (name, from, to, action: upgrade, downgrade or
    rebuild for another build of the same release), the exact apt arguments (name=version) that
    make them, the packages of another release that the configured one does not offer
    (``stranded``: apt cannot move them; they are named, never removed here), and a summary.
    """
    target = full_release(configured)
    amd = {name: version for name, version in amd.items() if release_of(version)}
    releases = sorted({release_of(version) for version in amd.values()}, key=release_key)
    changes = []
    stranded = []
    for name in sorted(amd):
        have = amd[name]
        if have == offered.get(name):
            continue
        release = release_of(have)
        want = offered.get(name)
        if want is None:
            if release != target:
                stranded.append({"name": name, "from": have, "release": release})
            continue
        if release_of(want) != target:
            # Not the configured release's package (a source that offers another release):
            # nothing to move to.
            continue
        if release_key(release) < release_key(target):
            action = "upgrade"
        elif release_key(release) > release_key(target):
            action = "downgrade"
        else:
            action = "rebuild"
        changes.append({"name": name, "from": have, "to": want, "action": action})
    others = [release for release in releases if release != target]
    return {
        "release": target,
        "installed_releases": releases,
        "changes": changes,
        "apt_names": [f"{change['name']}={change['to']}" for change in changes],
        "downgrade": any(change["action"] == "downgrade" for change in changes),
        "stranded": stranded,
        "summary": summary(others, target, changes, stranded),
    }


def summary(others: list[str], target: str, changes: list[dict], stranded: list[dict]) -> str:
    """One line an admin reads: "6.4.2 -> 7.1.0: 8 packages change (rocm-core 6.4.2... -> ...)"."""
    if not changes and not stranded:
        return f"ROCm {target}: every AMD package installed is already the release's own"
    head = f"{', '.join(others) or target} \u2192 {target}"
    parts = []
    if changes:
        listed = ", ".join(f"{c['name']} {c['from']} \u2192 {c['to']}" for c in changes)
        parts.append(f"{len(changes)} package{'s' if len(changes) != 1 else ''} change ({listed})")
    if stranded:
        listed = ", ".join(f"{s['name']} {s['from']}" for s in stranded)
        parts.append(f"not offered by {target}, left as they are: {listed}")
    return f"{head}: " + "; ".join(parts)


def preview(amd: dict[str, str], configured: str) -> dict:
    """Before the sources name the configured release (check mode): which installed AMD packages
    (AMD: as plan() takes them) belong to another release and so will change, without the
    versions apt does not know yet."""
    target = full_release(configured)
    moving = sorted(
        name for name, version in amd.items() if release_of(version) not in (None, target)
    )
    others = sorted({release_of(amd[name]) for name in moving}, key=release_key)
    if not moving:
        line = f"ROCm {target}: no installed AMD package belongs to another release"
    else:
        line = f"{', '.join(others)} \u2192 {target}: these packages change: {', '.join(moving)}"
    return {"release": target, "installed_releases": others, "moving": moving, "summary": line}
