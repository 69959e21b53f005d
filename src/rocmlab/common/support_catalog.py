# Copyright: rocmlab contributors
# Apache License 2.0
"""The support catalog, src/rocmlab/data/catalog.json: the systems and ROCm releases rocmlab
supports, and the tables that go with them (kernels per release, the amdgpu driver repository,
gfx targets and PCI ids). This module reads and checks it, and reads release strings.

One module in two places: plugins/module_utils/support_catalog.py is the source, and
src/rocmlab/common/support_catalog.py is its copy in the rocmlab wheel (the collection and the
package cannot import each other). tools/role_docs.py writes the copy and every file derived from
the catalog; ``tools/role_docs.py --check`` fails when one differs. Standard library only: the
modules that import it run on hosts, where the catalog itself is not needed.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

FILE = "catalog.json"
# AMD's release lines: "legacy" (repo.radeon.com's versioned apt repositories, packages rocm-*,
# up to 7.2.x) and "core" (the ROCm Core SDK, from 7.14).
LINES = ("legacy", "core")
ROCM_SOURCES = ("amd", "distro")

# --- release strings ---------------------------------------------------------------------

# The release field of an AMD package version: 5 or 6 digits, MMmmpp (6.4.2 -> 60402).
_PACKAGE_FIELD = re.compile(r"(\d{1,2})(\d{2})(\d{2})")
_CONFIGURED = re.compile(r"(\d{1,2})\.(\d{1,2})(?:\.(\d{1,2}))?")
_LEADING = re.compile(r"(\d{1,2})\.(\d{1,2})(?:\.(\d{1,2}))?(?![\d.])")
_NUMBERS = re.compile(r"(?:\d+:)?(\d+)\.(\d+)(?:\.(\d+))?")
# A Core SDK package's upstream version is its release (TheRock's docs/packaging/versioning.md:
# X.Y.Z, or X.Y.Z~preN / ~YYYYMMDD before a release).
_CORE_UPSTREAM = re.compile(r"(\d{1,2})\.(\d{1,2})\.(\d{1,2})(?:~[a-z0-9.]{1,40})?")
# The first series of the Core SDK line (TheRock's first preview was 7.9; 7.14 its first
# production release).
CORE_FROM = (7, 9)


def release_of(version: str) -> str | None:
    """The ROCm release an AMD package version belongs to ("6.4.2"), None for any other version.

    AMD's legacy packages carry their release as the last dot-separated field of the upstream
    version, MMmmpp: rocm-core ``6.4.2.60402-120~22.04``, amdgpu-dkms
    ``1:6.4.60402-2164967.22.04``. The Core SDK's (amdrocm*, 7.9 and later) carry it as their
    upstream version: amdrocm-core10.0 ``10.0.0-1``. Whether a package IS AMD's cannot be read
    from its version (Debian's liberror-perl ``0.17029-2`` has such a field too): use it only on
    packages known to be AMD's."""
    upstream = version.split(":", 1)[1] if ":" in version else version
    if "-" in upstream:
        upstream = upstream.rsplit("-", 1)[0]
    if "." not in upstream:
        return None
    match = _PACKAGE_FIELD.fullmatch(upstream.rsplit(".", 1)[1])
    if match is None:
        core = _CORE_UPSTREAM.fullmatch(upstream)
        if core is None or (int(core.group(1)), int(core.group(2))) < CORE_FROM:
            return None
        return ".".join(str(int(part)) for part in core.groups())
    major, minor, patch = (int(part) for part in match.groups())
    return f"{major}.{minor}.{patch}"


def is_core_release(release: str | None) -> bool:
    """Whether a release ("10.0.0", "7.14") is of AMD's Core SDK line (from CORE_FROM on)."""
    numbers = version_numbers(release or "")
    return numbers is not None and tuple(numbers[:2]) >= CORE_FROM


def full_release(configured: str) -> str:
    """rocm_repo_version as a full release: "7.1" -> "7.1.0" (AMD's repo path drops ".0")."""
    match = _CONFIGURED.fullmatch(configured.strip())
    if match is None:
        raise ValueError(f"not a ROCm release: {configured!r} (expected X.Y or X.Y.Z, e.g. 6.4.2)")
    major, minor, patch = match.groups()
    return f"{int(major)}.{int(minor)}.{int(patch or 0)}"


def leading_release(text: str | None) -> str | None:
    """The release a text starts with, as X.Y.Z: rocm_repo_version "7.1" and AMD's
    /opt/rocm/.info/version "7.1.0-20" are both "7.1.0"; None for anything else."""
    match = _LEADING.match((text or "").strip())
    if match is None:
        return None
    major, minor, patch = match.groups()
    return f"{int(major)}.{int(minor)}.{int(patch or 0)}"


def release_key(release: str) -> tuple[int, ...]:
    """A release ("6.4.2") as numbers, for ordering."""
    return tuple(int(part) for part in release.split(".") if part.isdigit())


def version_numbers(version: str) -> tuple[int, ...] | None:
    """The leading X.Y[.Z] of a package or file version, epoch dropped, as numbers:
    ``6.4.1-83`` (6, 4, 1), ``1:6.4.60402-1`` (6, 4, 60402), ``6.2`` (6, 2); None without one."""
    match = _NUMBERS.match(version.strip())
    if match is None:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def major_minor(version: str) -> str | None:
    """``6.4`` of ``6.4.1-83``, ``6.4.1.60401-83~24.04``, ``6.2.41133-dd7f95766``."""
    numbers = version_numbers(version)
    return f"{numbers[0]}.{numbers[1]}" if numbers else None


# --- the catalog ---------------------------------------------------------------------------


class CatalogError(ValueError):
    """The catalog cannot be read, or an entry is not what this reader accepts (the message
    names the file, the entry, the bad value and what is accepted)."""


_SERIES = re.compile(r"\d{1,2}\.\d{1,2}")
_DRIVER = re.compile(r"\d{1,2}\.\d{1,2}(?:\.\d{1,2})?")
_PLATFORM_VERSION = re.compile(r"\d{1,2}(?:\.\d{2})?")
_DISTRIBUTION = re.compile(r"[A-Z][A-Za-z]{1,31}")
_WORD = re.compile(r"[a-z][a-z0-9]{1,31}")
_PYTHON = re.compile(r"3\.\d{1,2}")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9.+-]{1,63}")
_FINGERPRINT = re.compile(r"[0-9A-F]{40}")
_PATH = re.compile(r"[a-z0-9{][a-z0-9./_{}-]{0,99}")
_GFX = re.compile(r"gfx[0-9a-f]{3,4}")
_OVERRIDE = re.compile(r"(?:\d{1,2}\.\d{1,3}\.\d{1,3})?")
_PCI_ID = re.compile(r"[0-9a-f]{4}")

_TOP = {"about": str, "lines": dict, "platforms": list, "releases": list, "gfx": dict}
_TOP_OPTIONAL = {"frameworks": dict}
_LINE = {"about": str, "repositories": dict, "key": dict, "origin": str}
_LINE_OPTIONAL = {"suite": str}
_PLATFORM = {
    "distribution": str,
    "version": str,
    "codename": str,
    "python": str,
    "tested": bool,
    "rocm_source": str,
    "amd": dict,
    "distro_packages": list,
}
_PLATFORM_OPTIONAL = {"amd_unsupported": dict, "amd_note": str, "distro_note": str}
_RELEASE = {"version": str, "line": str, "driver": str, "repositories": list}
_RELEASE_OPTIONAL = {
    "kernels": dict,
    "kernels_source": str,
    "kernels_verified": bool,
    "targets": list,
    "targets_source": str,
}
_TARGET = {"override": str, "usable": bool, "igpu": bool, "note": str}
_PCI = {"gfx": str, "name": str}
_FRAMEWORK = {"file": str, "table": str}


def _kind(kind: type) -> str:
    return {str: "a string", bool: "true or false", dict: "an object", list: "a list"}[kind]


def _fields(where: str, entry: object, required: dict, optional: dict | None = None) -> list[str]:
    """What is wrong with one entry's keys and their JSON types."""
    if not isinstance(entry, dict):
        return [f"{where}: {entry!r} is not an object"]
    optional = optional or {}
    problems = []
    for key in entry:
        if key not in required and key not in optional:
            accepted = ", ".join(list(required) + list(optional))
            problems.append(f"{where}: unknown key {key!r} (accepted: {accepted})")
    for key, kind in list(required.items()) + list(optional.items()):
        if key not in entry:
            if key in required:
                problems.append(f"{where}: {key} is missing ({_kind(kind)})")
        elif not isinstance(entry[key], kind):
            problems.append(f"{where}: {key} is {entry[key]!r}, not {_kind(kind)}")
    return problems


def _match(where: str, key: str, value: object, pattern: re.Pattern, accepted: str) -> list[str]:
    if isinstance(value, str) and pattern.fullmatch(value):
        return []
    return [f"{where}: {key} {value!r} is not {accepted}"]


def platform_major(platform: dict) -> str:
    """The major version Ansible reports (distribution_major_version): "22" for 22.04."""
    return platform["version"].split(".")[0]


def platform_key(platform: dict) -> str:
    """The platform as os-release names it (ID and VERSION_ID): "ubuntu 24.04", "debian 12"."""
    return f"{platform['distribution'].lower()} {platform['version']}"


def platform_name(platform: dict) -> str:
    """ "Ubuntu 24.04", "Debian 12"."""
    return f"{platform['distribution']} {platform['version']}"


def _line_problems(name: str, line: object) -> list[str]:
    where = f"lines.{name}"
    if name not in LINES:
        return [f"{where}: {name!r} is not a release line (accepted: {', '.join(LINES)})"]
    problems = _fields(where, line, _LINE, _LINE_OPTIONAL)
    if problems:
        return problems
    if name == "core" and "suite" not in line:
        problems.append(f"{where}: suite is missing (the suite of every system's repository)")
    if "suite" in line:
        problems += _match(where, "suite", line["suite"], _WORD, "an apt suite")
    for repo, path in line["repositories"].items():
        problems += _match(where, f"repositories.{repo}", path, _PATH, "a repository path")
    problems += _fields(
        f"{where}.key", line["key"], {"path": str, "fingerprint": str}, {"verified": bool}
    )
    if not problems:
        problems += _match(where, "key.path", line["key"]["path"], _PATH, "a path")
        problems += _match(
            where,
            "key.fingerprint",
            line["key"]["fingerprint"],
            _FINGERPRINT,
            "a key fingerprint (40 upper-case hex digits)",
        )
    return problems


def _platform_problems(index: int, platform: object) -> list[str]:
    name = platform_name(platform) if isinstance(platform, dict) and _named(platform) else "?"
    where = f"platforms[{index}] ({name})"
    problems = _fields(where, platform, _PLATFORM, _PLATFORM_OPTIONAL)
    if problems:
        return problems
    problems += _match(
        where, "distribution", platform["distribution"], _DISTRIBUTION, "a distribution name"
    )
    problems += _match(
        where, "version", platform["version"], _PLATFORM_VERSION, "a version (12, 24.04)"
    )
    problems += _match(where, "codename", platform["codename"], _WORD, "a lower-case codename")
    problems += _match(where, "python", platform["python"], _PYTHON, "a Python version (3.N)")
    if platform["rocm_source"] not in ROCM_SOURCES:
        problems.append(
            f"{where}: rocm_source {platform['rocm_source']!r} is not one of "
            f"{', '.join(ROCM_SOURCES)}"
        )
    for line, slug in platform["amd"].items():
        if line not in LINES:
            problems.append(f"{where}: amd.{line} is not a release line ({', '.join(LINES)})")
        problems += _match(where, f"amd.{line}", slug, _WORD, "AMD's name for this system")
    if "legacy" not in platform["amd"]:
        problems.append(f"{where}: amd.legacy is missing (the suite of AMD's legacy packages)")
    for line, reason in platform.get("amd_unsupported", {}).items():
        if line not in platform["amd"] or not isinstance(reason, str) or not reason.strip():
            problems.append(f"{where}: amd_unsupported.{line} must be a reason, for a line in amd")
    if platform["rocm_source"] == "amd" and "legacy" in platform.get("amd_unsupported", {}):
        problems.append(f"{where}: rocm_source is amd, but AMD's legacy packages are refused here")
    if not platform["distro_packages"]:
        problems.append(f"{where}: distro_packages is empty")
    for package in platform["distro_packages"]:
        problems += _match(where, "distro_packages", package, _PACKAGE, "a package name")
    return problems


def _named(platform: dict) -> bool:
    return isinstance(platform.get("distribution"), str) and isinstance(
        platform.get("version"), str
    )


def _release_problems(index: int, release: object, lines: dict, keys: set) -> list[str]:
    version = release.get("version") if isinstance(release, dict) else None
    where = f"releases[{index}] ({version if isinstance(version, str) else '?'})"
    problems = _fields(where, release, _RELEASE, _RELEASE_OPTIONAL)
    if problems:
        return problems
    problems += _match(where, "version", version, _SERIES, "a release series (X.Y, e.g. 7.1)")
    if release["line"] == "core":
        # The Core SDK carries no driver: amdgpu is a product of its own (RFC0009).
        if release["driver"] != "":
            problems.append(f'{where}: driver must be "" on the core line (no driver repository)')
        targets = release.get("targets")
        if not isinstance(targets, list) or not targets:
            problems.append(f"{where}: targets is missing (the gfx targets it has code for)")
        else:
            for target in targets:
                problems += _match(where, "targets", target, _GFX, "a gfx target (gfx1100)")
            if not release.get("targets_source"):
                problems.append(f"{where}: targets_source is missing (where they were read)")
    else:
        problems += _match(
            where, "driver", release["driver"], _DRIVER, "an amdgpu repository version (30.20)"
        )
    line = lines.get(release["line"])
    if line is None:
        problems.append(
            f"{where}: line {release['line']!r} is not in lines ({', '.join(lines) or 'none'})"
        )
    else:
        for repo in release["repositories"]:
            if repo not in line["repositories"]:
                problems.append(
                    f"{where}: repository {repo!r} is not one of line {release['line']}'s "
                    f"({', '.join(line['repositories'])})"
                )
    if "rocm" not in release["repositories"]:
        problems.append(f"{where}: repositories must name rocm")
    kernels = release.get("kernels", {})
    for key, series in kernels.items():
        if key not in keys:
            problems.append(
                f"{where}: kernels names {key!r}, which is no platform "
                f"(accepted: {', '.join(sorted(keys))})"
            )
        if not isinstance(series, list) or not series:
            problems.append(f"{where}: kernels[{key!r}] is {series!r}, not a list of X.Y")
            continue
        for one in series:
            problems += _match(where, f"kernels[{key!r}]", one, _SERIES, "a kernel series (6.8)")
    if kernels and not release.get("kernels_source"):
        problems.append(f"{where}: kernels_source is missing (where the kernels were read)")
    if kernels and "kernels_verified" not in release:
        problems.append(f"{where}: kernels_verified is missing (true or false)")
    return problems


def _gfx_problems(gfx: object) -> list[str]:
    problems = _fields("gfx", gfx, {"about": str, "targets": dict, "pci_ids": dict})
    if problems:
        return problems
    for name, target in gfx["targets"].items():
        where = f"gfx.targets.{name}"
        problems += _match(where, "name", name, _GFX, "a gfx target (gfx1030)")
        more = _fields(where, target, _TARGET)
        problems += more or _match(
            where, "override", target["override"], _OVERRIDE, '"" or X.Y.Z (10.3.0)'
        )
    for pci_id, device in gfx["pci_ids"].items():
        where = f"gfx.pci_ids.{pci_id}"
        problems += _match(where, "id", pci_id, _PCI_ID, "4 lower-case hex digits")
        more = _fields(where, device, _PCI)
        if not more and device["gfx"] not in gfx["targets"]:
            more = [f"{where}: gfx {device['gfx']!r} is not in gfx.targets"]
        problems += more
    return problems


def problems(data: object) -> list[str]:
    """Everything wrong with a catalog, one line per entry ([] when it is whole)."""
    found = _fields("catalog", data, _TOP, _TOP_OPTIONAL)
    if found:
        return found
    lines = data["lines"]
    for name, line in lines.items():
        found += _line_problems(name, line)
    seen: dict = {}
    for index, platform in enumerate(data["platforms"]):
        more = _platform_problems(index, platform)
        found += more
        if more:
            continue
        for what, value in (
            ("system", (platform["distribution"], platform_major(platform))),
            ("codename", platform["codename"]),
        ):
            if (what, value) in seen:
                found.append(
                    f"platforms[{index}] ({platform_name(platform)}): the same {what} as "
                    f"platforms[{seen[what, value]}]"
                )
            seen.setdefault((what, value), index)
    if found:
        return found
    keys = {platform_key(platform) for platform in data["platforms"]}
    versions: dict = {}
    for index, release in enumerate(data["releases"]):
        found += _release_problems(index, release, lines, keys)
        version = release.get("version") if isinstance(release, dict) else None
        if version in versions:
            found.append(
                f"releases[{index}] ({version}): listed again (releases[{versions[version]}])"
            )
        versions.setdefault(version, index)
    found += _gfx_problems(data["gfx"])
    for name, pointer in data.get("frameworks", {}).items():
        found += _fields(f"frameworks.{name}", pointer, _FRAMEWORK)
    return found


class Catalog:
    """A checked catalog, and the views of it that rocmlab reads."""

    def __init__(self, data: object, source: str = FILE) -> None:
        found = problems(data)
        if found:
            raise CatalogError(f"{source}: " + "; ".join(found))
        self.data = data
        self.source = source

    @property
    def platforms(self) -> list:
        return self.data["platforms"]

    @property
    def releases(self) -> list:
        """The releases, newest first."""
        return sorted(self.data["releases"], key=lambda r: release_key(r["version"]), reverse=True)

    def release(self, text: str | None) -> dict | None:
        """The entry of the series a release string belongs to ("7.1.2" -> 7.1), or None."""
        numbers = version_numbers(text or "")
        if numbers is None:
            return None
        wanted = f"{numbers[0]}.{numbers[1]}"
        return next((r for r in self.data["releases"] if r["version"] == wanted), None)

    def kernel_table(self) -> dict:
        """{"releases": {"7.1": {"kernels": {"ubuntu 24.04": ["6.8", ...]}, "source": ...,
        "verified": ...}}}: the kernel series AMD lists per release and platform."""
        return {
            "releases": {
                r["version"]: {
                    "kernels": r["kernels"],
                    "source": r["kernels_source"],
                    "verified": r["kernels_verified"],
                }
                for r in self.releases
                if r.get("kernels")
            }
        }

    def gfx(self) -> dict:
        """{"targets": {gfx: {override, usable, igpu, note}}, "pci_ids": {id: {gfx, name}}}."""
        return {"targets": self.data["gfx"]["targets"], "pci_ids": self.data["gfx"]["pci_ids"]}

    def ubuntu_codenames(self) -> dict:
        """Ubuntu's releases by codename ({"noble": "24.04"}), for derivatives that name their
        base in os-release's UBUNTU_CODENAME."""
        return {
            p["codename"]: p["version"] for p in self.platforms if p["distribution"] == "Ubuntu"
        }

    def amdgpu_versions(self) -> dict:
        """Release -> AMD's amdgpu driver repository version, where the driver is versioned on
        its own (ROCm 7.x: "7.1" -> "30.20"; a 6.x release's driver repository is its own)."""
        return {
            r["version"]: r["driver"]
            for r in sorted(self.data["releases"], key=lambda r: release_key(r["version"]))
            if r["driver"] and r["driver"] != r["version"]
        }

    def line(self, release: dict) -> dict:
        """The release line's entry (repositories, key, origin, suite) of a release entry."""
        return self.data["lines"][release["line"]]

    def native(self) -> dict:
        """Core SDK series -> the gfx targets it ships code for, oldest series first."""
        return {
            r["version"]: list(r["targets"])
            for r in sorted(self.data["releases"], key=lambda r: release_key(r["version"]))
            if r["line"] == "core"
        }

    def native_targets(self, text: str | None) -> list | None:
        """The gfx targets a Core SDK release has code objects for; None for a legacy or an
        unknown release (the gfx table's override column speaks for the legacy line)."""
        release = self.release(text)
        if release is None or release["line"] != "core":
            return None
        return list(release["targets"])


def default_path() -> Path:
    """Where this copy of the module finds the catalog: beside its package in the wheel
    (rocmlab/data/), under src/ in the collection."""
    here = Path(__file__).resolve().parent
    candidates = (
        here.parent / "data" / FILE,
        here.parent.parent / "src" / "rocmlab" / "data" / FILE,
    )
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise CatalogError(f"{FILE} is neither at {candidates[0]} nor at {candidates[1]}")


def load(path: str | Path | None = None) -> Catalog:
    """The catalog at path (default: default_path()), checked."""
    path = Path(path) if path is not None else default_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise CatalogError(f"{path}: not JSON ({exc})") from exc
    return Catalog(data, str(path))


@lru_cache(maxsize=1)
def shipped() -> Catalog:
    """The catalog shipped with this copy of the module (read once)."""
    return load()
