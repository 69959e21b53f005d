"""ROCm from wheels in a Python environment: which release, and which GPU targets it can run.

AMD's multi-arch ROCm wheels put the SDK in the venv: ``rocm-sdk-core`` (the release), one
``rocm-sdk-device-<gfx>`` per GPU target whose device code is installed (and, with torch's
``device-<gfx>`` extras, ``amd-torch-device-<gfx>``). ``rocm-sdk targets`` lists the release's
whole build list, not these, so what a venv can run is read from its distributions' metadata
(importlib.metadata): nothing is run here, and only names and versions are kept, bounded.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

CORE = "rocm-sdk-core"
DEVICE_PREFIXES = ("rocm-sdk-device-", "amd-torch-device-")
# A gfx target as a device package names it (gfx90a, gfx1100, gfx942).
GFX_RE = re.compile(r"^gfx[0-9]{2,4}[0-9a-f]?$")
# A release as AMD numbers its wheels: 7.14.0, 7.14.0rc1, 7.14.0a20260101, 7.14.0.dev0+abc.
VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+(?:\.[0-9]+)?[0-9A-Za-z.+_-]{0,40}$")
# How many distributions are looked at, at most (a venv with torch holds a few dozen).
MAX_DISTRIBUTIONS = 10_000


@dataclass(frozen=True)
class RocmWheels:
    """The ROCm wheels of one environment: the release (``rocm-sdk-core``'s version) and the
    GPU targets of its device packages."""

    version: str
    devices: tuple[str, ...]  # gfx of the installed rocm-sdk-device-<gfx>
    torch_devices: tuple[str, ...]  # gfx of the installed amd-torch-device-<gfx>

    def packages(self) -> list[str]:
        """The device packages, as pip names them."""
        return [f"rocm-sdk-device-{g}" for g in self.devices] + [
            f"amd-torch-device-{g}" for g in self.torch_devices
        ]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(path: list[str] | None = None) -> RocmWheels | None:
    """The ROCm wheels of the environment whose ``sys.path`` is ``path`` (default: this
    interpreter's), None without ``rocm-sdk-core``. Names that are not a gfx target and a
    version that is not a release are left out."""
    version = None
    found: dict[str, set[str]] = {prefix: set() for prefix in DEVICE_PREFIXES}
    dists = (
        importlib.metadata.distributions(path=path)
        if path is not None
        else (importlib.metadata.distributions())
    )
    for count, dist in enumerate(dists):
        if count >= MAX_DISTRIBUTIONS:
            break
        try:
            name = _normalized(dist.metadata["Name"] or "")
            dist_version = str(dist.version or "")
        except (OSError, UnicodeDecodeError, TypeError):
            continue
        if name == CORE and VERSION_RE.match(dist_version):
            version = dist_version
            continue
        for prefix in DEVICE_PREFIXES:
            gfx = name.removeprefix(prefix)
            if gfx != name and GFX_RE.match(gfx):
                found[prefix].add(gfx)
    if version is None:
        return None
    ordered = {prefix: tuple(sorted(found[prefix])) for prefix in DEVICE_PREFIXES}
    return RocmWheels(version, *ordered.values())


def site_packages(venv: Path) -> list[str]:
    """The site-packages folders of a venv (``lib/pythonX.Y/site-packages``), for
    ``installed(path=...)``."""
    return [str(p) for p in sorted(venv.glob("lib/python3*/site-packages")) if p.is_dir()]


def device_extra(gfx: str) -> str:
    """What to install for a target missing from a venv: ``rocm[device-gfx1100]`` (or
    ``torch[device-gfx1100]`` with torch's wheels)."""
    return (
        f"the extra device-{gfx}: `pip install 'torch[device-{gfx}]'` (with torch from the ROCm "
        f"wheels' index) or `pip install 'rocm[device-{gfx}]'` at the venv's release"
    )
