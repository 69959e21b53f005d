# Copyright: rocmlab contributors
# Apache License 2.0
"""Which installed packages are AMD's: a fact rocmlab reads from apt and writes down, never a
guess from a version string.

An installed package is AMD's when its installed version is one that an apt source of AMD's
origin offers (the Release file of its source says ``Origin: repo.radeon.com``, as AMD's and
every copy of them say), or one that rocmlab saw so offered before. What it saw is kept in the
ledger, /var/lib/rocmlab/amd-packages.json (package name -> the versions seen from AMD's
sources): once the sources name another release, no source offers the packages of the old one
and only dpkg knows them, so the ledger is what still says whose they are. Debian's own
packages are never in it, whatever their version looks like (liberror-perl ``0.17029-2`` carries
a 5-digit field as AMD's ``1.0.0.60402-1`` does).

Written by root into a root-owned directory (mode 0600); read back bounded, without following a
link, and checked entry by entry. The module rocmlab_amd_packages and rocm_release_plan add what
apt says now (offered); the known-good record, the rollback plan and the release plan decide on
amd_of() alone.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.rocmlab.rocmlab.plugins.module_utils import bounded_json
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.apt_files import (
    FileRefused,
    read_record,
    write_file,
)

FORMAT = 1
PATH = "/var/lib/rocmlab/amd-packages.json"
# A few hundred packages with a handful of versions each: far below this.
MAX_BYTES = 1024 * 1024
# Versions kept per package, the latest seen last: enough for every release a host went through.
MAX_VERSIONS = 16
# Debian's policy: package names are lower case, digits, + - .; versions [epoch:]upstream[-rev].
NAME = re.compile(r"[a-z0-9][a-z0-9+.-]{0,127}")
VERSION = re.compile(r"(?:[0-9]{1,9}:)?[0-9][A-Za-z0-9.+~-]{0,127}")


def offered_installed(cache, origin) -> dict[str, str]:
    """Installed package name -> installed version, for the packages whose installed version a
    source of ORIGIN (an Origin, or several: AMD's legacy and Core SDK repositories) offers
    (python3-apt's cache, as `apt-cache policy` shows it)."""
    origins = {origin} if isinstance(origin, str) else set(origin)
    found = {}
    for package in cache.packages:
        current = package.current_ver
        if current is None:
            continue
        if any(pkg_file.origin in origins for pkg_file, _index in current.file_list):
            found[package.name] = current.ver_str
    return found


def load(content: bytes | None) -> dict[str, list[str]]:
    """The ledger read back (None: no ledger yet, an empty one); ValueError saying what is
    wrong, for a ledger rocmlab did not write."""
    if content is None:
        return {}
    data = bounded_json.parse(content, MAX_BYTES, "a ledger")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"it is not a ledger of AMD's packages of format {FORMAT}")
    packages = data.get("packages")
    if not isinstance(packages, dict):
        raise ValueError("its packages are not a map of names to versions")
    for name, versions in packages.items():
        if not (isinstance(name, str) and NAME.fullmatch(name)):
            raise ValueError(f"it names {str(name)[:80]!r}, which is not a package name")
        if not (
            isinstance(versions, list)
            and 0 < len(versions) <= MAX_VERSIONS
            and all(isinstance(v, str) and VERSION.fullmatch(v) for v in versions)
        ):
            raise ValueError(f"its versions of {name} are not a list of package versions")
    return packages


def add(ledger: dict[str, list[str]], seen: dict[str, str]) -> tuple[dict[str, list[str]], list]:
    """(the ledger with the name -> version pairs SEEN added, the "name=version" pairs that were
    not in it before)."""
    new = {name: list(versions) for name, versions in ledger.items()}
    added = []
    for name in sorted(seen):
        version = seen[name]
        if not (NAME.fullmatch(name) and VERSION.fullmatch(version)):
            continue  # apt's own cache: never the case; nothing to write down if it were
        versions = new.setdefault(name, [])
        if version in versions:
            continue
        versions.append(version)
        del versions[:-MAX_VERSIONS]
        added.append(f"{name}={version}")
    return new, added


def is_amd(ledger: dict[str, list[str]], name: str, version: str) -> bool:
    return version in ledger.get(name, ())


def amd_of(installed: dict[str, str], ledger: dict[str, list[str]]) -> dict[str, str]:
    """The installed packages that are AMD's: those whose installed version the ledger holds."""
    return {
        name: installed[name] for name in sorted(installed) if is_amd(ledger, name, installed[name])
    }


def dump(ledger: dict[str, list[str]]) -> bytes:
    data = {"format": FORMAT, "packages": {name: ledger[name] for name in sorted(ledger)}}
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode("utf-8")


def read(path: str = PATH) -> dict[str, list[str]]:
    """The ledger at PATH: a regular file of root's, never through a link; {} when absent.
    ValueError naming PATH and what is wrong otherwise."""
    try:
        found = read_record(path)
    except FileRefused as err:
        raise ValueError(str(err)) from err
    if not found.exists:
        return {}
    if found.uid != 0:
        raise ValueError(f"{path} is not root's (uid {found.uid})")
    try:
        return load(found.content)
    except ValueError as err:
        raise ValueError(
            f"{path}: {err}. It is rocmlab's list of the packages it saw come from AMD's sources;"
            " remove it and run playbooks/rocm.yml while the sources name the installed release"
            " to write it anew"
        ) from err


def write(path: str, ledger: dict[str, list[str]]) -> None:
    """PATH becomes the ledger (root's, 0600), whole or not at all."""
    write_file(path, dump(ledger), 0o600, 0, 0)


def note(path: str, seen: dict[str, str], check_mode: bool) -> tuple[dict[str, list[str]], list]:
    """Add SEEN (name -> version offered by AMD's sources now) to the ledger at PATH, writing it
    unless CHECK_MODE; (the ledger as it is now, the "name=version" pairs added). ValueError for
    a ledger that cannot be read (read())."""
    ledger, added = add(read(path), seen)
    if added and not check_mode:
        # /var/lib/rocmlab: root's, made here when no role made it before.
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        write(path, ledger)
    return ledger, added
