# Copyright: rocmlab contributors
# Apache License 2.0
"""The host's known-good record, /var/lib/rocmlab/known-good.json: the state it was in when it
last passed the health gate, complete enough to go back to it.

It holds the exact versions of the AMD packages rocmlab manages (their versions carry the ROCm
release, see rocm_release.release_of), the installed ROCm release, the apt files rocm_repo wrote
(apt_files.Record: bytes, mode, owner, their SHA-256), each framework venv's `pip freeze`, the GPU
override file gfx_override wrote, the running kernel and the rocmlab version; `since` says when
the host was first seen good in exactly this state (a later pass in the same state keeps it, so
a converged host's record does not change). The record is written by root into a root-owned
directory, and read back bounded like any other file a host holds.
"""

from __future__ import annotations

import json
import re

from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_release import release_of

FORMAT = 1
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


def managed_packages(installed: dict[str, str]) -> dict[str, str]:
    """The installed packages that are AMD's (their version names a ROCm release)."""
    return {name: installed[name] for name in sorted(installed) if release_of(installed[name])}


def parse_dpkg(text: str) -> dict[str, str]:
    """`dpkg-query -W -f '${db:Status-Abbrev}\\t${Package}\\t${Version}\\n'` -> installed name ->
    version (half-installed and removed-but-configured packages left out)."""
    found = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0].strip() == "ii":
            found[fields[1]] = fields[2]
    return found


def parse_freeze(text: str) -> list[str]:
    """`pip freeze` output as sorted requirement lines (comments and blank lines dropped)."""
    return sorted(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


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
    installed: dict[str, str],
    rocm_version: str | None,
    apt_files: list[dict],
    venvs: dict[str, list[str]],
    gfx_override: str | None,
    kernel: str,
    rocmlab_version: str | None,
) -> dict:
    """The state to record (JSON-ready; apt_files are apt_files.Record.to_dict() forms)."""
    return {
        "rocm_version": rocm_version,
        "packages": managed_packages(installed),
        "apt_files": sorted(apt_files, key=lambda record: record["path"]),
        "venvs": {path: venvs[path] for path in sorted(venvs)},
        "gfx_override": gfx_override,
        "kernel": kernel,
        "rocmlab_version": rocmlab_version,
    }


def same_state(previous: dict | None, current: dict) -> bool:
    return previous is not None and all(
        previous.get(name) == current[name] for name in STATE_FIELDS
    )


def record(previous: dict | None, current: dict, now: str) -> tuple[dict, bool]:
    """(the record to keep, whether it changed): the previous one when the state is the same."""
    if same_state(previous, current):
        return previous, False
    return {"format": FORMAT, "since": now, **current}, True


def load(content: bytes) -> dict:
    """A record read back from the host (bounded by the caller); ValueError saying what is wrong."""
    if len(content) > MAX_BYTES:
        raise ValueError(f"it is over {MAX_BYTES} bytes")
    try:
        data = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"it is not JSON ({err})") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"it is not a known-good record of format {FORMAT}")
    missing = [name for name in ("since", *STATE_FIELDS) if name not in data]
    if missing:
        raise ValueError(f"it lacks {', '.join(missing)}")
    if not isinstance(data["packages"], dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data["packages"].items()
    ):
        raise ValueError("its packages are not a map of names to versions")
    if not isinstance(data["apt_files"], list) or not isinstance(data["venvs"], dict):
        raise ValueError("its apt_files or venvs have the wrong type")
    return data


def dump(data: dict) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
