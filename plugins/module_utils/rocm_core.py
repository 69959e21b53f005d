# Copyright: rocmlab contributors
# Apache License 2.0
"""AMD's ROCm Core SDK on a host: which packages install a Core release side by side with the
others, what of the other release line and of older cores goes, and which alternatives select a
core.

The Core SDK (TheRock's build_tools/packaging/linux/) installs each release X.Y in
/opt/rocm/core-X.Y from versioned packages (amdrocm-coreX.Y, its per-GPU device code
amdrocmX.Y-gfxNNNN, the SDK amdrocm-core-sdkX.Y), so several releases live side by side; the
amdrocm-core postinst registers /opt/rocm/core, /opt/rocm/core-X, /opt/rocm/{bin,lib,include,
llvm,amdgcn,libexec,share} and /usr/bin/<tool> with update-alternatives, the newest release at the
highest priority. Selecting another core is `update-alternatives --set` of every group that has
an alternative inside it: no download, so a rollback to a core still installed works with every
mirror down.

Pure functions: the modules rocm_core_plan and rocm_core_switch feed them apt's cache and
update-alternatives' answers; tests feed them tables.
"""

from __future__ import annotations

import re

from ansible_collections.rocmlab.rocmlab.plugins.module_utils.support_catalog import (
    full_release,
    release_key,
    release_of,
)

# The per-GPU device code of a Core release: amdrocm10.0-gfx1100.
_DEVICE = re.compile(r"amdrocm(\d{1,2}\.\d{1,2})-(gfx[0-9a-z]{3,5})")
# /opt/rocm/core-X: the newest core of a major release, which another major leaves alone.
_MAJOR_GROUP = re.compile(r"core-\d{1,2}")
# Where each Core release lives, and the alternatives link groups of the whole SDK.
PREFIX = "/opt/rocm"
# The update-alternatives groups the amdrocm-core postinst registers for the tree (the tools'
# groups, /usr/bin/<tool>, are found by their alternatives' paths).
TREE_GROUPS = (
    "core",
    "rocm-bin",
    "rocm-lib",
    "rocm-include",
    "rocm-llvm",
    "rocm-amdgcn",
    "rocm-libexec",
    "rocm-share",
)


def series_of(release: str) -> str:
    """ "10.0" of "10.0.0"."""
    return ".".join(release.split(".")[:2])


def core_dir(series: str) -> str:
    return f"{PREFIX}/core-{series}"


def is_core_package(name: str) -> bool:
    """A package of the Core SDK line (amdrocm, amdrocm-core10.0, amdrocm10.0-gfx1100)."""
    return name.startswith("amdrocm")


def is_driver_package(name: str) -> bool:
    """AMD's kernel driver and graphics stack (amdgpu-dkms, amdgpu-core, mesa-amdgpu-*): a
    product of its own, which a move between ROCm lines leaves alone."""
    return "amdgpu" in name


def wanted_names(series: str, targets: list[str] | None, sdk: bool, offered: dict) -> tuple:
    """(the packages of Core release SERIES to install, the targets it has no device package
    for). targets: the host's gfx targets (gfx_detect), or None for every target the sources
    offer a device package for; offered: name -> version the sources offer of the release."""
    names = [f"amdrocm-core{series}"]
    missing = []
    if targets is None:
        names += sorted(
            (n for n in offered if (m := _DEVICE.fullmatch(n)) and m.group(1) == series),
            key=lambda n: (len(n), n),
        )
    else:
        for target in sorted(set(targets), key=lambda t: (len(t), t)):
            name = f"amdrocm{series}-{target}"
            if name in offered:
                names.append(name)
            else:
                missing.append(target)
    if sdk:
        names.append(f"amdrocm-core-sdk{series}")
    return names, missing


def installed_cores(amd: dict[str, str]) -> dict[str, str]:
    """series -> release of every Core release AMD's installed packages hold."""
    found = {}
    for name, version in amd.items():
        release = release_of(version)
        if is_core_package(name) and release:
            found[series_of(release)] = release
    return found


def plan(
    configured: str,
    line: str,
    amd: dict[str, str],
    offered: dict[str, str],
    targets: list[str] | None = None,
    sdk: bool = False,
    keep: int = 1,
    known_good: str | None = None,
) -> dict:
    """What puts the host on the configured release of LINE, as far as the Core SDK goes.

    amd: AMD's installed packages, name -> version (amd_packages.amd_of: the ledger's, never a
    guess). offered: on the core line, name -> version the sources offer of the configured
    release. known_good: the release of the host's known-good record (None without one).

    Returns install (name=version for apt), remove_other_line (AMD's packages of the other line,
    which go first: the two lines both claim /opt/rocm), remove_cores (the packages of older
    cores not kept), kept (series kept: the known-good one first, then the newest, up to KEEP),
    missing_targets, problems (what stops the move) and summary. KEEP: how many older cores stay,
    the known-good one first (1, the default: that one alone), then the newest.
    """
    release = full_release(configured)
    series = series_of(release)
    cores = installed_cores(amd)
    other_line = sorted(
        name
        for name, version in amd.items()
        if release_of(version)
        and not is_driver_package(name)
        and is_core_package(name) != (line == "core")
    )
    result = {
        "release": release,
        "series": series,
        "line": line,
        "install": [],
        "remove_other_line": other_line,
        "remove_cores": [],
        "kept": [],
        "missing_targets": [],
        "problems": [],
        "cores": sorted(cores, key=release_key),
    }
    if line == "core":
        names, missing = wanted_names(series, targets, sdk, offered)
        result["missing_targets"] = missing
        absent = [name for name in names if name not in offered]
        if absent:
            result["problems"].append(
                f"the sources offer no {', '.join(absent)} of ROCm {release}: check "
                "rocm_repo_version and that the Core SDK repository serves this release"
            )
        result["install"] = [
            f"{name}={offered[name]}"
            for name in names
            if name in offered and amd.get(name) != offered[name]
        ]
        others = sorted((s for s in cores if s != series), key=release_key, reverse=True)
        good = series_of(known_good) if known_good else None
        # The known-good core first (a rollback to it is then a switch); then, from a second
        # place on, the newest others.
        first = [good] if good in others and keep >= 1 else []
        result["kept"] = first + [s for s in others if s != good][: max(keep - 1, 0)]
        result["remove_cores"] = sorted(
            name
            for name, version in amd.items()
            if is_core_package(name)
            and release_of(version)
            and series_of(release_of(version)) not in result["kept"] + [series]
        )
    result["summary"] = summary(result, amd, known_good)
    return result


def _installed_line(amd: dict[str, str]) -> str:
    releases = {}
    for name, version in amd.items():
        release = release_of(version)
        if release and not is_driver_package(name):
            releases[release] = "core" if is_core_package(name) else "legacy"
    if not releases:
        return "no ROCm"
    return ", ".join(f"{r} ({releases[r]})" for r in sorted(releases, key=release_key))


def summary(result: dict, amd: dict[str, str], known_good: str | None) -> str:
    """One line: "6.4.2 (legacy) -> 10.0.0 (core): installs ...; removes ...; keeps ..."."""
    head = f"{_installed_line(amd)} \u2192 {result['release']} ({result['line']})"
    parts = []
    if result["install"]:
        parts.append(f"installs {', '.join(n.split('=')[0] for n in result['install'])}")
    if result["remove_other_line"]:
        other = "legacy" if result["line"] == "core" else "Core SDK"
        parts.append(f"removes the {other} line's {', '.join(result['remove_other_line'])}")
    if result["remove_cores"]:
        parts.append(f"removes older cores' {', '.join(result['remove_cores'])}")
    for series in result["kept"]:
        why = " (the known-good release)" if known_good and series_of(known_good) == series else ""
        parts.append(f"keeps {core_dir(series)}{why}")
    if result["missing_targets"]:
        parts.append(
            f"no device package for {', '.join(result['missing_targets'])} (gfx_override decides)"
        )
    if not (result["install"] or result["remove_other_line"] or result["remove_cores"]):
        parts.insert(0, "every package is installed already")
    return f"{head}: " + "; ".join(parts)


# --- update-alternatives ----------------------------------------------------------------------


def parse_query(text: str) -> dict:
    """`update-alternatives --query NAME` (its machine-readable form, the man page's QUERY
    FORMAT): {"name", "link", "status": "auto"|"manual", "value": path or None,
    "alternatives": [path, ...]}."""
    info: dict = {"name": None, "link": None, "status": None, "value": None, "alternatives": []}
    for line in text.splitlines():
        key, _sep, value = line.partition(": ")
        if key == "Name":
            info["name"] = value
        elif key == "Link":
            info["link"] = value
        elif key == "Status":
            info["status"] = value
        elif key == "Value":
            info["value"] = None if value == "none" else value
        elif key == "Alternative":
            info["alternatives"].append(value)
    return info


def inside(path: str, series: str) -> bool:
    top = core_dir(series)
    return path == top or path.startswith(top + "/")


def switch_plan(groups: list[dict], series: str) -> dict:
    """Which groups `update-alternatives --set` moves to core SERIES: every group with an
    alternative inside /opt/rocm/core-SERIES whose value is not it (each as {name, path, from}),
    and the groups left on another core because this one has no alternative for them (a tool
    only another release ships)."""
    moves, elsewhere, have = [], [], []
    for group in groups:
        ours = [a for a in group["alternatives"] if inside(a, series)]
        if not ours:
            if (
                group["value"]
                and group["value"].startswith(f"{PREFIX}/core-")
                and not _MAJOR_GROUP.fullmatch(group["name"])
            ):
                elsewhere.append(group["name"])
            continue
        have.append(group["name"])
        if group["value"] != ours[0]:
            moves.append({"name": group["name"], "path": ours[0], "from": group["value"]})
    missing = [name for name in TREE_GROUPS if name not in have]
    return {"moves": moves, "elsewhere": sorted(elsewhere), "missing": missing}
