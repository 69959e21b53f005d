"""The machine's AMD GPUs, read the way the gfx_override role's ``gfx_detect`` module reads them.

The rules must agree with plugins/modules/gfx_detect.py (an Ansible module that runs
on hosts without rocmlab, so it cannot share this code): GPU nodes of the KFD topology in node
order (``simd_count > 0``, AMD or unset ``vendor_id``), ``gfx_target_version`` decoded with minor
and stepping in hex, integrated when the node carries CPU cores or the table marks the target
``igpu``, and an unknown target taken as native. tests/python/test_doctor_gpus.py checks that both
give the same answers on every fixture tree. The tables are the support catalog's
(rocmlab/data/catalog.json), which the role's vars are generated from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlab.common import support_catalog
from rocmlab.doctor.context import read_text

# How a sysfs file is read: hostread's bounded read (Context.read_path also notes what it
# refused, for the host_files check).
Reader = Callable[[Path], "str | None"]

AMD_VENDOR_ID = 0x1002
# PCI base class + subclass of devices that can be compute GPUs (VGA, 3D, other display,
# processing accelerator), as gfx_detect lists them.
GPU_PCI_CLASSES = frozenset({0x0300, 0x0302, 0x0380, 0x1200})
KFD_NODES = ("class", "kfd", "kfd", "topology", "nodes")
GFX_NAME_RE = re.compile(r"^gfx(\d+)([0-9a-f])([0-9a-f])$")
OVERRIDE_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


def gfx_tables() -> dict[str, Any]:
    """The catalog's tables: {"targets": {gfx: {override, usable, igpu, note}}, "pci_ids": ...}."""
    return support_catalog.shipped().gfx()


@dataclass(frozen=True)
class Gpu:
    """One AMD GPU as ROCm enumerates it (``index``: its number in ROCR_VISIBLE_DEVICES)."""

    index: int
    node_id: int | None
    pci_address: str
    device_id: str
    gfx: str
    name: str
    known: bool
    override: str
    usable: bool
    igpu: bool
    unique_id: str

    @property
    def native(self) -> str:
        """The override value that names this GPU's own target."""
        return gfx_native_version(self.gfx)

    @property
    def needs(self) -> str:
        """What HSA_OVERRIDE_GFX_VERSION must be for this GPU to run: its override or itself."""
        return self.override or self.native

    def label(self) -> str:
        """``0000:03:00.0 Navi 22 [...] (gfx1031)``."""
        where = self.pci_address or f"KFD node {self.node_id}"
        name = f" {self.name}" if self.name else ""
        return f"{where}{name} ({self.gfx or 'unknown target'})"


def _gfx_name(major: int, minor: int, stepping: int) -> str:
    """gfxNNN with minor and stepping one hex digit each; "" when they do not fit one."""
    if minor > 15 or stepping > 15:
        return ""
    return f"gfx{major}{minor:x}{stepping:x}"


def decode_gfx_target_version(value: int) -> str:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) as gfxNNN: 100301 ->
    gfx1031, 90010 -> gfx90a; "" for 0 or out of range."""
    if value <= 0:
        return ""
    major, rest = divmod(value, 10000)
    return _gfx_name(major, *divmod(rest, 100))


def gfx_native_version(gfx: str) -> str:
    """The major.minor.stepping of a gfx target: gfx1030 -> 10.3.0, gfx90a -> 9.0.10."""
    match = GFX_NAME_RE.match(gfx)
    if not match:
        return ""
    return f"{int(match[1])}.{int(match[2], 16)}.{int(match[3], 16)}"


def _override_parts(value: str) -> tuple[int, int, int] | None:
    match = OVERRIDE_RE.match(value.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def override_target(value: str) -> str:
    """The gfx target an HSA_OVERRIDE_GFX_VERSION value makes the runtime load: 10.3.0 ->
    gfx1030; "" when the value is not major.minor.stepping with one-hex-digit minor/stepping."""
    parts = _override_parts(value)
    return _gfx_name(*parts) if parts else ""


def valid_override(value: str) -> bool:
    """Whether libhsakmt accepts the value: %u.%u.%u, major <= 63, minor and stepping <= 255."""
    parts = _override_parts(value)
    return parts is not None and parts[0] <= 63 and parts[1] <= 255 and parts[2] <= 255


def parse_properties(text: str) -> dict[str, int | str]:
    """A KFD properties file: one ``name value`` per line."""
    props: dict[str, int | str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            props[parts[0]] = int(parts[1]) if parts[1].lstrip("-").isdigit() else parts[1]
    return props


def _int(props: dict[str, int | str], name: str) -> int:
    value = props.get(name, 0)
    return value if isinstance(value, int) else 0


def kfd_present(sysfs_root: Path) -> bool:
    """Whether the KFD topology exists (amdgpu loaded with compute support)."""
    return sysfs_root.joinpath(*KFD_NODES).is_dir()


def _describe(gfx: str, device_id: str, apu_node: bool) -> dict[str, Any]:
    tables = gfx_tables()
    pci_entry = tables["pci_ids"].get(device_id, {})
    gfx = gfx or pci_entry.get("gfx", "")
    entry = tables["targets"].get(gfx) if gfx else None
    known = entry is not None
    return {
        "gfx": gfx,
        "name": pci_entry.get("name", ""),
        "known": known,
        "override": (entry or {}).get("override", "") or "",
        # A target missing from the table is taken as supported natively, as the role does.
        "usable": bool(entry.get("usable", False)) if entry else bool(gfx),
        "igpu": apu_node or bool((entry or {}).get("igpu", False)),
    }


def kfd_gpus(sysfs_root: Path, read: Reader = read_text) -> list[Gpu]:
    """The GPU nodes of the KFD topology, in ROCm's order (empty without a topology)."""
    nodes_dir = sysfs_root.joinpath(*KFD_NODES)
    if not nodes_dir.is_dir():
        return []
    gpus = []
    for node_id in sorted(int(name) for name in _listdir(nodes_dir) if name.isdigit()):
        text = read(nodes_dir / str(node_id) / "properties")
        if text is None:
            continue
        props = parse_properties(text)
        if _int(props, "simd_count") <= 0 or _int(props, "vendor_id") not in (0, AMD_VENDOR_ID):
            continue
        location = props.get("location_id")
        address = ""
        if isinstance(location, int):
            bus, devfn = divmod(location, 256)
            address = f"{_int(props, 'domain'):04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7:x}"
        device_id = f"{_int(props, 'device_id'):04x}"
        gfx = decode_gfx_target_version(_int(props, "gfx_target_version"))
        info = _describe(gfx, device_id, _int(props, "cpu_cores_count") > 0)
        unique = _int(props, "unique_id")
        gpus.append(
            Gpu(
                index=len(gpus),
                node_id=node_id,
                pci_address=address,
                device_id=device_id,
                unique_id=f"{unique:016x}" if unique else "",
                **info,
            )
        )
    return gpus


@dataclass(frozen=True)
class PciDevice:
    """An AMD display or accelerator function on the PCI bus."""

    address: str
    path: Path
    device_id: str
    pci_class: int


def pci_gpus(sysfs_root: Path, read: Reader = read_text) -> list[PciDevice]:
    """AMD display/accelerator functions under ``bus/pci/devices`` (bridges and audio skipped)."""
    devices_dir = sysfs_root / "bus" / "pci" / "devices"
    found = []
    for address in sorted(_listdir(devices_dir)):
        path = devices_dir / address
        try:
            vendor = int((read(path / "vendor") or "").strip(), 16)
            pci_class = int((read(path / "class") or "").strip(), 16)
            device = int((read(path / "device") or "").strip(), 16)
        except ValueError:
            continue
        if vendor == AMD_VENDOR_ID and (pci_class >> 8) in GPU_PCI_CLASSES:
            found.append(PciDevice(address, path, f"{device:04x}", pci_class))
    return found


def gpus_from_pci(sysfs_root: Path, read: Reader = read_text) -> list[Gpu]:
    """The AMD GPUs the PCI id table knows, numbered in PCI order (no KFD yet)."""
    gpus = []
    for dev in pci_gpus(sysfs_root, read):
        info = _describe("", dev.device_id, False)
        if not info["gfx"]:
            continue
        gpus.append(
            Gpu(
                index=len(gpus),
                node_id=None,
                pci_address=dev.address,
                device_id=dev.device_id,
                unique_id="",
                **info,
            )
        )
    return gpus


def detect(sysfs_root: Path, read: Reader = read_text) -> tuple[str, list[Gpu]]:
    """("kfd", GPUs) from the topology, else ("pci", GPUs) from the PCI id table, else
    ("none", [])."""
    gpus = kfd_gpus(sysfs_root, read)
    if gpus:
        return "kfd", gpus
    gpus = gpus_from_pci(sysfs_root, read)
    return ("pci" if gpus else "none"), gpus


def _listdir(path: Path) -> list[str]:
    try:
        return [entry.name for entry in path.iterdir()]
    except OSError:
        return []


# ---------------------------------------------------------------- what the process sees


def _select(gpus: list[Gpu], spec: str, by_uuid: bool) -> tuple[list[Gpu], list[str]]:
    """The GPUs a ``*_VISIBLE_DEVICES`` list names, in its order, and the tokens it ignored."""
    chosen: list[Gpu] = []
    ignored = []
    for token in (part.strip() for part in spec.split(",")):
        if not token:
            continue
        match = None
        if token.isdigit() and int(token) < len(gpus):
            match = gpus[int(token)]
        elif by_uuid and token.upper().startswith("GPU-"):
            wanted = token[4:].lower()
            match = next((g for g in gpus if g.unique_id and g.unique_id == wanted), None)
        if match is None or match in chosen:
            ignored.append(token)
        else:
            chosen.append(match)
    return chosen, ignored


def visible(gpus: list[Gpu], env: dict[str, str] | Any) -> tuple[list[Gpu], list[str]]:
    """The GPUs a process started with ``env`` uses, and notes on what it ignored.

    ROCR_VISIBLE_DEVICES picks among the KFD GPU nodes (indices or ``GPU-<uuid>``); the HIP
    runtime's HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES) then picks among those.
    """
    notes = []
    seen = list(gpus)
    rocr = env.get("ROCR_VISIBLE_DEVICES")
    if rocr is not None:
        seen, ignored = _select(seen, rocr, by_uuid=True)
        if ignored:
            notes.append(f"ROCR_VISIBLE_DEVICES ignores {','.join(ignored)}")
    for name in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        spec = env.get(name)
        if spec is not None:
            seen, ignored = _select(seen, spec, by_uuid=False)
            if ignored:
                notes.append(f"{name} ignores {','.join(ignored)}")
            break
    return seen, notes


def wanted_environment(gpus: list[Gpu]) -> tuple[dict[str, str], bool]:
    """What gfx_override_mode: auto (hide_igpu true) writes for these GPUs, and whether it
    refuses because the visible GPUs need different overrides."""
    usable = [gpu for gpu in gpus if gpu.usable]
    discrete = [gpu for gpu in usable if not gpu.igpu]
    shown = discrete or usable
    env = {}
    if shown and len(shown) < len(gpus):
        env["ROCR_VISIBLE_DEVICES"] = ",".join(str(gpu.index) for gpu in shown)
    if not any(gpu.override for gpu in shown):
        return env, False
    values = {gpu.needs for gpu in shown}
    if len(values) > 1:
        return {}, True
    env["HSA_OVERRIDE_GFX_VERSION"] = values.pop()
    return env, False
