# Copyright: rocmlab contributors
# Apache License 2.0
"""The host's known-good record, /var/lib/rocmlab/known-good.json: the state it was in when it
last passed the health gate, complete enough to go back to it.

It holds the exact versions of the installed packages that are AMD's (amd_packages: those
rocmlab saw come from AMD's sources, never a guess from a version; their versions carry the ROCm
release, see rocm_release.release_of), the installed ROCm release, the apt files rocm_repo wrote
(apt_files.Record: bytes, mode, owner, their SHA-256), each framework venv's `pip freeze`, the GPU
override file gfx_override wrote, the running kernel and the rocmlab version; `since` says when
the host was first seen good in exactly this state (a later pass in the same state keeps it, so
a converged host's record does not change); `digest`, the SHA-256 of all of that, so that an
edited record (a version, a file, a package added) is refused as a whole. The record is written
by root into a root-owned directory, and read back bounded like any other file a host holds.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re

from ansible_collections.rocmlab.rocmlab.plugins.module_utils import (
    amd_packages,
    bounded_json,
    rocm_installed,
)
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.apt_files import Record
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_release import (
    release_key,
    release_of,
)
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.support_catalog import (
    is_core_release,
)

# 2: AMD's packages from amd_packages' ledger, and the digest. A record of format 1 (before
# both) is still read: its packages that the ledger does not name as AMD's are left out of a
# rollback (and named), and the next passing gate writes format 2.
FORMAT = 2
FORMATS = (1, 2)
# Where the record lives: the default of every module that reads or writes it (their
# DOCUMENTATION repeats it; ansible-test's validate-modules checks the two agree).
PATH = "/var/lib/rocmlab/known-good.json"
_WHEEL = re.compile(r"/rocmlab-([0-9][^-/]*)-[^/]*\.whl$")
# The record lists packages, a few kB of apt files and each venv's freeze: far below this.
MAX_BYTES = 4 * 1024 * 1024
# The fields that make the state; `since` and `format` are about the record, not the state.
STATE_FIELDS = (
    "rocm_version",
    "packages",
    "apt_files",
    "venvs",
    "gfx_override",
    "kernel",
    "rocmlab_version",
)
# Fields of the state since the ROCm Core SDK line: the release line ("legacy", "core") and, on
# the Core line, the selected core's series ("10.0"). The digest covers them where a record
# holds them, so a format-2 record written before them still verifies; such a record is written
# anew, keeping its since, the first time the same state passes again.
LINE_FIELDS = ("rocm_line", "rocm_selected")


DPKG_QUERY = ["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Version}\n"]


def installed_packages(module, who: str, present: bool = False) -> dict[str, str]:
    """The host's installed packages (parse_dpkg of DPKG_QUERY, PRESENT as it takes it), run by
    the AnsibleModule MODULE; a failure of dpkg-query fails the task, named after WHO."""
    rc, out, err = module.run_command(DPKG_QUERY)
    if rc != 0:
        module.fail_json(msg=f"{who}: dpkg-query failed (exit {rc}): {err.strip()[-400:]}")
    return parse_dpkg(out, present)


# dpkg's package states whose files are on disk, whole or not: installed (i), unpacked (U),
# half-configured (F), half-installed (H), triggers-awaited (W), triggers-pending (t).
_PRESENT = frozenset("iUFHWt")


def parse_dpkg(text: str, present: bool = False) -> dict[str, str]:
    """`dpkg-query -W -f '${db:Status-Abbrev}\\t${Package}\\t${Version}\\n'` -> installed name ->
    version: the fully installed packages; with PRESENT also those a failed or interrupted run
    left unpacked or half-configured (what a rollback must move too). Removed packages whose
    configuration is kept are never listed."""
    found = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 3:
            continue
        if fields[0].strip() == "ii" or (present and fields[0][1:2] in _PRESENT):
            found[fields[1]] = fields[2]
    return found


def rocmlab_in(venvs: dict[str, list[str]]) -> str | None:
    """rocmlab's version as a venv's freeze lists it (``rocmlab==0.1.0``), None when none has it."""
    for path in sorted(venvs):
        for line in venvs[path]:
            name, sep, version = line.partition("==")
            if sep and name.strip().lower() == "rocmlab":
                return version.strip()
            # Installed from the wheel the role built: "rocmlab @ file:///.../rocmlab-0.1.0-py3-none-any.whl".
            wheel = _WHEEL.search(line) if line.lower().startswith("rocmlab @ ") else None
            if wheel:
                return wheel.group(1)
    return None


def state(
    *,
    packages: dict[str, str],
    rocm_version: str | None,
    apt_files: list[dict],
    venvs: dict[str, list[str]],
    gfx_override: str | None,
    kernel: str,
    rocmlab_version: str | None,
    rocm_line: str | None = None,
    rocm_selected: str | None = None,
) -> dict:
    """The state to record (JSON-ready; apt_files are apt_files.Record.to_dict() forms).
    packages: AMD's installed packages (amd_packages.amd_of), name -> version; rocm_line and
    rocm_selected: installed()'s line and selected core."""
    return {
        "rocm_version": rocm_version,
        "rocm_line": rocm_line,
        "rocm_selected": rocm_selected,
        "packages": {name: packages[name] for name in sorted(packages)},
        "apt_files": sorted(apt_files, key=lambda record: record["path"]),
        "venvs": {path: venvs[path] for path in sorted(venvs)},
        "gfx_override": gfx_override,
        "kernel": kernel,
        "rocmlab_version": rocmlab_version,
    }


def same_state(previous: dict | None, current: dict) -> bool:
    """Whether PREVIOUS records the state CURRENT is (LINE_FIELDS compared where it has them)."""
    return previous is not None and all(
        previous.get(name) == current.get(name)
        for name in (*STATE_FIELDS, *(n for n in LINE_FIELDS if n in previous))
    )


def digest(data: dict) -> str:
    """The SHA-256 of a record's since and state, as canonical JSON (LINE_FIELDS where the
    record holds them)."""
    names = ("format", "since", *STATE_FIELDS, *(n for n in LINE_FIELDS if n in data))
    covered = {name: data.get(name) for name in names}
    text = json.dumps(covered, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def record(previous: dict | None, current: dict, now: str) -> tuple[dict, bool]:
    """(the record to keep, whether it changed): the previous one when the state is the same
    and the record of this format; the same state in an older format is written anew with its
    since."""
    same = same_state(previous, current)
    complete = all(name in previous for name in LINE_FIELDS if name in current) if same else False
    if same and complete and previous.get("format") == FORMAT:
        return previous, False
    kept = {"format": FORMAT, "since": previous["since"] if same else now, **current}
    kept["digest"] = digest(kept)
    return kept, True


def load(content: bytes) -> dict:
    """A record read back from the host (bounded by the caller); ValueError saying what is wrong."""
    data = bounded_json.parse(content, MAX_BYTES, "a known-good record")
    if not isinstance(data, dict) or data.get("format") not in FORMATS:
        raise ValueError(
            f"it is not a known-good record of format {' or '.join(map(str, FORMATS))}"
        )
    missing = [name for name in ("since", *STATE_FIELDS) if name not in data]
    if missing:
        raise ValueError(f"it lacks {', '.join(missing)}")
    if data["format"] >= 2 and data.get("digest") != digest(data):
        raise ValueError(
            "it does not match its digest: it was changed after rocmlab wrote it (a version, a"
            " file or a package edited, added or removed)"
        )
    if not isinstance(data["packages"], dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data["packages"].items()
    ):
        raise ValueError("its packages are not a map of names to versions")
    if not isinstance(data["apt_files"], list) or not isinstance(data["venvs"], dict):
        raise ValueError("its apt_files or venvs have the wrong type")
    return data


def read_root_file(path: str, limit: int) -> bytes | None:
    """The bytes of PATH (at most LIMIT) when it is a regular file of root's, None when absent;
    ValueError for a link (never followed), anything else, or more than LIMIT bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symbolic link") from err
        raise
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not (info.st_mode & 0o170000 == 0o100000 and info.st_uid == 0):
            raise ValueError(f"{path} is not a regular file of root's")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is over {limit} bytes")
    return data


def installed(root: str = "/") -> dict:
    """AMD's installed ROCm (rocm_installed.probe, every file read root's); ValueError naming
    a file that was refused (a link, another owner's, over its bound)."""
    found = rocm_installed.probe(root, owner=0)
    if found["refused"]:
        raise ValueError("; ".join(found["refused"]))
    return found


def rocm_version_of(found: dict) -> str | None:
    """The record's rocm_version of a probe's answer: the selected core's release on the Core
    line ("10.0.0"); on the legacy line the text of /opt/rocm/.info/version as its rocm-core
    writes it ("6.4.2-120", as records have always held it), else rocm-core's release; None
    without AMD's ROCm."""
    if found["line"] == "legacy":
        return found["legacy_version"] or found["legacy"]
    return found["release"]


def installed_rocm_version(root: str = "/") -> str | None:
    """The installed release as the record holds it (rocm_version_of(installed(root)))."""
    return rocm_version_of(installed(root))


def _same_file(recorded: dict, now: dict) -> bool:
    fields = ("exists", "sha256", "mode", "uid", "gid", "link")
    return all(recorded.get(name) == now.get(name) for name in fields)


APT_DIR = "/etc/apt"


def checked_apt_paths(known: dict, apt_dir: str = APT_DIR) -> list[str]:
    """The paths of the record's apt files; ValueError for one that is not a clean path below
    APT_DIR (rocm_repo writes nowhere else)."""
    paths = []
    for entry in known["apt_files"]:
        path = entry.get("path") if isinstance(entry, dict) else None
        if not (
            isinstance(path, str)
            and path.startswith(apt_dir.rstrip("/") + "/")
            and os.path.normpath(path) == path
            and "\0" not in path
        ):
            raise ValueError(
                f"the record names {str(path)[:200]!r} as an apt file; rocm_repo's apt files are"
                f" below {apt_dir}/"
            )
        paths.append(path)
    return paths


def amd_in_record(known: dict, ledger: dict[str, list[str]]) -> tuple[dict[str, str], list[str]]:
    """(the record's packages that are AMD's by the ledger, the others as "name version").

    A record of this format names AMD's packages alone (rocmlab_known_good wrote them from the
    ledger): one that names another package was not written by rocmlab, and is refused
    (ValueError). A record of format 1 guessed from versions: its other packages are left out."""
    wanted, not_amd = {}, []
    for name in sorted(known["packages"]):
        version = known["packages"][name]
        if amd_packages.is_amd(ledger, name, version):
            wanted[name] = version
        elif known["format"] >= 2:
            raise ValueError(
                f"the record names the package {name[:128]} {version[:128]}, which rocmlab never"
                f" saw come from AMD's sources ({amd_packages.PATH}); a rollback touches AMD's"
                " packages alone"
            )
        else:
            not_amd.append(f"{name} {version}")
    return wanted, not_amd


def rollback_plan(
    known: dict,
    installed: dict[str, str],
    ledger: dict[str, list[str]],
    files_now: dict[str, dict],
    venvs: list[dict] | None = None,
) -> dict:
    """What returns a host to its known-good record KNOWN (as load() returns it).

    installed: every package on the host, name -> version (parse_dpkg, present: those a failed
    run left half-installed too).
    ledger: amd_packages' ledger; only the packages it names as AMD's are ever changed or
    removed, whatever other packages' versions look like.
    files_now: for each apt file the record lists, its state now (apt_files.Record.to_dict()).
    venvs: what becomes of each venv the record froze (venv_keep.restore_plan), or None.

    Returns the apt files to write back (rocmlab_apt_files' files: bytes, owner, mode as
    recorded) and to remove; the package changes to the recorded versions (name=version for
    apt, install, upgrade, downgrade or rebuild); the AMD packages of a release the record does
    not hold, which came with the change being undone (removed: the record's own release does
    not depend on them); the AMD packages of the record's release it does not list (left as they
    are, named); and a summary line. ValueError when the record cannot be put back (a link among
    its apt files).
    """
    files, remove = [], []
    for entry in known["apt_files"]:
        if not isinstance(entry, dict):
            raise ValueError(
                f"an apt file of the record is a {type(entry).__name__}, not a file's record"
            )
        Record.from_dict(entry)  # ValueError naming the field: a bad path, the wrong sha256
        path = entry["path"]
        now = files_now.get(path, {"path": path, "exists": False})
        if _same_file(entry, now):
            continue
        if not entry.get("exists"):
            remove.append(path)
        elif entry.get("link") is not None:
            raise ValueError(f"the record's {path} is a link; rollback writes regular files only")
        else:
            files.append(
                {
                    "path": path,
                    "content_base64": entry["content"],
                    "owner": str(entry["uid"]),
                    "group": str(entry["gid"]),
                    "mode": entry["mode"],
                }
            )
    wanted, not_amd = amd_in_record(known, ledger)
    releases = {release_of(version) for version in wanted.values()}
    changes = []
    for name in sorted(wanted):
        have, want = installed.get(name), wanted[name]
        if have == want:
            continue
        if have is None:
            action = "install"
        else:
            now_key, want_key = _release_key(have), _release_key(want)
            if now_key < want_key:
                action = "upgrade"
            elif now_key > want_key:
                action = "downgrade"
            else:
                action = "rebuild"
        changes.append({"name": name, "from": have, "to": want, "action": action})
    amd_now = amd_packages.amd_of(installed, ledger)
    later = sorted(n for n in amd_now if n not in wanted and release_of(amd_now[n]) not in releases)
    unlisted = sorted(n for n in amd_now if n not in wanted and n not in later)
    apt_names = [f"{c['name']}={c['to']}" for c in changes]
    # A rebuild of the same release may be an older build: apt must be allowed to go down.
    downgrade = any(c["action"] in ("downgrade", "rebuild") for c in changes)
    return {
        "since": known["since"],
        "release": known["rocm_version"],
        # The recorded Core SDK release's core, which the rollback selects again.
        "core_series": (
            ".".join(known["rocm_version"].split(".")[:2])
            if is_core_release(known["rocm_version"])
            else None
        ),
        "apt_files": {"files": files, "remove": remove},
        "changes": changes,
        "apt_names": apt_names,
        "downgrade": downgrade,
        "remove_packages": later,
        "apt_command": apt_command(apt_names, later, downgrade),
        "unlisted": unlisted,
        "not_amd": not_amd,
        "venvs": venvs or [],
        "summary": rollback_summary(
            known, amd_now, files, remove, changes, later, unlisted, venvs or [], not_amd
        ),
    }


def apt_command(apt_names: list[str], remove: list[str], downgrade: bool) -> list[str]:
    """One apt-get run that installs APT_NAMES (name=version) and removes REMOVE: apt configures
    every package left half-configured at the end of each run, so a package whose maintainer
    script failed in the change being undone is replaced or removed in the same run, never left
    for the next one to trip on. [] when there is nothing to do. The names and versions are
    the ledger's (amd_packages.NAME, VERSION): none can be read as an option."""
    if not apt_names and not remove:
        return []
    options = ["-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]
    return [
        "apt-get",
        "install",
        "--yes",
        "--quiet",
        *options,
        *(["--allow-downgrades"] if downgrade else []),
        *apt_names,
        *[f"{name}-" for name in remove],
    ]


def _release_key(version: str) -> tuple[int, ...]:
    """A package version's (or a release's own "6.4.2") release as numbers, for ordering."""
    return release_key(release_of(version) or version)


def rollback_summary(
    known, amd_now, files, remove, changes, later, unlisted, venvs=(), not_amd=()
) -> str:
    """One line: "7.1.0 -> 6.4.2 (known-good since ...): ..." or that the host is in it.
    amd_now: AMD's installed packages (amd_packages.amd_of), name -> version; venvs: as
    venv_keep.restore_plan returns them; not_amd: a format-1 record's other packages."""
    restored = [v["path"] for v in venvs if v["action"] == "restore"]
    rebuilt = [v["path"] for v in venvs if v["action"] == "rebuild"]
    failing = [v["path"] for v in venvs if v["action"] == "fail"]
    now = sorted({release_of(v) for v in amd_now.values()} - {None}, key=release_key)
    head = f"{', '.join(now) or 'no ROCm'} \u2192 {known['rocm_version'] or 'no ROCm'}"
    head += f" (the known-good state since {known['since']})"
    if not (files or remove or changes or later or restored or rebuilt or failing):
        line = f"{head}: the host is in its known-good state already"
    else:
        parts = []
        if files or remove:
            parts.append(f"apt files put back: {', '.join([f['path'] for f in files] + remove)}")
        if changes:
            listed = ", ".join(
                f"{c['name']} {c['from'] or '(absent)'} \u2192 {c['to']}" for c in changes
            )
            parts.append(f"{len(changes)} package(s) change ({listed})")
        if later:
            parts.append(f"removed, of a release the record does not hold: {', '.join(later)}")
        if restored:
            parts.append(f"venvs put back from their kept copies: {', '.join(restored)}")
        if rebuilt:
            parts.append(
                "venvs rebuilt from their recorded freeze (no kept copy to put back):"
                f" {', '.join(rebuilt)}"
            )
        if failing:
            parts.append(
                f"venvs that differ from the record with no kept copy to put back"
                f" (the rollback stops there): {', '.join(failing)}"
            )
        line = f"{head}: " + "; ".join(parts)
    if unlisted:
        line += f"; left as they are (not in the record): {', '.join(unlisted)}"
    if not_amd:
        line += f"; not AMD's, left as they are (an older record listed them): {', '.join(not_amd)}"
    return line


def dump(data: dict) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
