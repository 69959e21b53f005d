# Copyright: rocmlab contributors
# Apache License 2.0
"""Where a ROCm release comes from: AMD's apt repositories, suite, key and pin origin of a
configured release, on either release line, decided from the support catalog.

The legacy line (up to 7.2.x): rocm/apt/<release>, amdgpu/<driver>/ubuntu and, from 7.0,
graphics/<release>/ubuntu under rocm_repo_base_url, the suite AMD registers the system with
(Debian 12: jammy). The Core SDK line (7.14 and later, built by TheRock): one repository per
system, <rocm_repo_core_url>/<os folder> (debian12, ubuntu2404), suite stable, with a key and an
origin of its own, and no driver repository (amdgpu is a product of its own).

Pure: the filter rocm_sources feeds it the role's settings and the host's facts; tests feed it
tables. Every refusal names the setting, the value and what is accepted.
"""

from __future__ import annotations

# A series from support_catalog.CORE_FROM on that the catalog does not list is refused rather
# than looked for under the legacy layout.
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.support_catalog import (
    CORE_FROM,
    Catalog,
    platform_major,
    version_numbers,
)

# Every repository rocm_repo may configure, in the order it writes them.
NAMES = ("rocm", "amdgpu", "graphics")


def _platform(catalog: Catalog, distribution: str, major: str) -> dict | None:
    return next(
        (
            p
            for p in catalog.platforms
            if p["distribution"] == distribution and platform_major(p) == str(major)
        ),
        None,
    )


def _known(catalog: Catalog, line: str) -> str:
    found = [r["version"] for r in catalog.releases if r["line"] == line]
    return ", ".join(found) or "none"


def line_of(catalog: Catalog, version: str) -> str | None:
    """The release line of a configured release: the catalog's, else legacy below CORE_FROM;
    None for a series from CORE_FROM on that the catalog does not list."""
    entry = catalog.release(version)
    if entry is not None:
        return entry["line"]
    numbers = version_numbers(version)
    if numbers is not None and tuple(numbers[:2]) >= CORE_FROM:
        return None
    return "legacy"


def _legacy(catalog: Catalog, settings: dict, numbers: tuple) -> tuple[list, str]:
    version = str(settings["version"])
    parts = version.split(".")
    path = ".".join(parts[:2]) if len(parts) == 3 and parts[2] == "0" else version
    series = f"{numbers[0]}.{numbers[1]}"
    driver = str(settings.get("amdgpu_version") or "")
    problem = ""
    if not driver:
        if numbers[0] < 7:
            driver = path
        else:
            known = catalog.amdgpu_versions().get(series, "")
            if known:
                patch = parts[2] if len(parts) == 3 else "0"
                driver = known + ("" if patch == "0" else f".{patch}")
            elif settings.get("amdgpu_enabled", True):
                known = ", ".join(catalog.amdgpu_versions())
                problem = (
                    f"rocm_repo_version: ROCm {version} has no known amdgpu driver version "
                    f"(known: {known}). Set rocm_repo_amdgpu_version (for example 30.30) or "
                    "rocm_repo_amdgpu_enabled: false."
                )
    base = str(settings["base_url"]).rstrip("/")
    repositories = [
        {"name": "rocm", "uri": f"{base}/rocm/apt/{path}", "enabled": True},
        {
            "name": "amdgpu",
            "uri": f"{base}/amdgpu/{driver}/ubuntu",
            "enabled": bool(settings.get("amdgpu_enabled", True)) and not problem,
        },
        {
            "name": "graphics",
            "uri": f"{base}/graphics/{path}/ubuntu",
            "enabled": bool(settings.get("graphics_enabled", True)) and numbers[0] >= 7,
        },
    ]
    return repositories, problem


def plan(catalog: Catalog, settings: dict) -> dict:
    """The sources of the configured release.

    settings: version (rocm_repo_version), distribution and major (Ansible's facts), suite
    (rocm_repo_suite, "" for the catalog's), base_url, amdgpu_enabled, amdgpu_version,
    graphics_enabled, key_url, key_fingerprint, pin_origin (the legacy line's), core_url,
    core_key_url, core_key_fingerprint, core_pin_origin (the Core line's).

    Returns line ("legacy" or "core"), release (X.Y.Z), series (X.Y), suite, key_url,
    fingerprint (upper case, no blanks), origin, repositories ([{name, uri, enabled}] for every
    name in NAMES: the disabled ones are removed from the host), unsupported (why AMD's packages
    of this line are refused on this system, "" when they are not) and problem ("" or the
    refusal, naming the setting).
    """
    version = str(settings.get("version", ""))
    numbers = version_numbers(version)
    empty = {
        "line": None,
        "release": None,
        "series": None,
        "suite": "",
        "key_url": "",
        "fingerprint": "",
        "origin": "",
        "repositories": [],
        "unsupported": "",
    }
    if numbers is None or version != ".".join(str(n) for n in numbers):
        return empty | {
            "problem": f'rocm_repo_version: "{version}" is not a ROCm release (X.Y or X.Y.Z)'
        }
    release = ".".join(str(n) for n in [*numbers, 0, 0][:3])
    series = f"{numbers[0]}.{numbers[1]}"
    line = line_of(catalog, version)
    if line is None:
        return empty | {
            "problem": (
                f'rocm_repo_version: "{version}" is a Core SDK series the support catalog does '
                f"not list (Core SDK releases: {_known(catalog, 'core')}; legacy: "
                f"{_known(catalog, 'legacy')}). Add it to src/rocmlab/data/catalog.json first."
            )
        }
    platform = _platform(catalog, settings.get("distribution", ""), settings.get("major", ""))
    amd = platform["amd"] if platform else {}
    unsupported = (platform or {}).get("amd_unsupported", {}).get(line, "")
    common = {"line": line, "release": release, "series": series, "unsupported": unsupported}
    suite = str(settings.get("suite") or "")
    if line == "legacy":
        repositories, problem = _legacy(catalog, settings, numbers)
        return common | {
            "suite": suite or amd.get("legacy", ""),
            "key_url": str(settings["key_url"]),
            "fingerprint": _fingerprint(settings["key_fingerprint"]),
            "origin": str(settings["pin_origin"]),
            "repositories": repositories,
            "problem": problem,
        }
    core = catalog.data["lines"]["core"]
    folder = amd.get("core")
    problem = ""
    if folder is None:
        where = f"{settings.get('distribution')} {settings.get('major')}"
        has = sorted(p["amd"]["core"] for p in catalog.platforms if "core" in p["amd"])
        newest_legacy = _known(catalog, "legacy").split(", ", maxsplit=1)[0]
        problem = (
            f"rocm_repo_version: ROCm {version} is of AMD's Core SDK line, which has no "
            f"packages for {where} (systems it has: {', '.join(has)}). Use a legacy release "
            f"(up to {newest_legacy}) or rocm_repo_source: distro."
        )
        folder = ""
    base = str(settings["core_url"]).rstrip("/")
    path = core["repositories"]["rocm"].replace("{os}", folder)
    repositories = [
        {"name": "rocm", "uri": f"{base}/{path}", "enabled": not problem},
        {"name": "amdgpu", "uri": "", "enabled": False},
        {"name": "graphics", "uri": "", "enabled": False},
    ]
    return common | {
        "suite": suite or core["suite"],
        "key_url": str(settings["core_key_url"]),
        "fingerprint": _fingerprint(settings["core_key_fingerprint"]),
        "origin": str(settings["core_pin_origin"]),
        "repositories": repositories,
        "problem": problem,
    }


def _fingerprint(value) -> str:
    return "".join(str(value).split()).upper()
