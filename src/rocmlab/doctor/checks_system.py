"""The PCIe link of each GPU, and /dev/shm."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rocmlab.doctor.context import MOUNTS_LIMIT, Context, limit_text, read_text
from rocmlab.doctor.gpus import AMD_VENDOR_ID, Reader, gfx_tables, pci_gpus
from rocmlab.doctor.model import Result, failed, passed, skipped, warned

_SPEED_RE = re.compile(r"([\d.]+)\s*GT/s")
_BDF_RE = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PCI_BRIDGE_CLASS = 0x0604


@dataclass(frozen=True)
class Link:
    """A PCIe link as sysfs reports it (Documentation/ABI/testing/sysfs-bus-pci)."""

    device: str
    speed: float | None
    max_speed: float | None
    width: int | None
    max_width: int | None
    speed_text: str
    max_speed_text: str


def _speed(text: str | None) -> float | None:
    match = _SPEED_RE.search(text or "")
    return float(match[1]) if match else None


def _width(text: str | None) -> int | None:
    value = (text or "").strip().lstrip("x")
    return int(value) if value.isdigit() else None


def read_link(path: Path, read: Reader = read_text) -> Link | None:
    """current/max link speed and width of a PCI function; None when sysfs has none."""
    speed_text = read(path / "current_link_speed")
    if speed_text is None:
        return None
    max_text = read(path / "max_link_speed") or ""
    return Link(
        device=path.name,
        speed=_speed(speed_text),
        max_speed=_speed(max_text),
        width=_width(read(path / "current_link_width")),
        max_width=_width(read(path / "max_link_width")),
        speed_text=speed_text.strip(),
        max_speed_text=max_text.strip(),
    )


def _is_amd_bridge(path: Path, read: Reader) -> bool:
    try:
        vendor = int((read(path / "vendor") or "").strip(), 16)
        pci_class = int((read(path / "class") or "").strip(), 16)
    except ValueError:
        return False
    return vendor == AMD_VENDOR_ID and pci_class >> 8 == PCI_BRIDGE_CLASS


def card_link(gpu_path: Path, read: Reader = read_text) -> tuple[Path, Path | None]:
    """The function whose link is the card's slot link, and the port above it.

    Discrete Radeons put a PCIe switch on the card (upstream and downstream port, both AMD
    bridges): the GPU function's own link is the internal one. Walk up through the card's AMD
    bridges in the real sysfs hierarchy; in a flat tree the GPU function is all there is.
    """
    here = gpu_path.resolve()
    while _BDF_RE.match(here.parent.name) and _is_amd_bridge(here.parent, read):
        here = here.parent
    port = here.parent if _BDF_RE.match(here.parent.name) else None
    return here, port


def check_pcie_link(ctx: Context) -> Result:
    """Each discrete GPU's PCIe link: down, narrower than it can run, or in a slower slot."""
    igpu_ids = {
        pci_id
        for pci_id, entry in gfx_tables()["pci_ids"].items()
        if gfx_tables()["targets"].get(entry["gfx"], {}).get("igpu")
    }
    on_bus = pci_gpus(ctx.sysfs_root, ctx.read_path)
    cards = [dev for dev in on_bus if dev.device_id not in igpu_ids]
    if not cards:
        return skipped("no discrete AMD GPU on the PCI bus")
    lines, down, narrow, slow = [], [], [], []
    for dev in cards:
        where, port = card_link(dev.path, ctx.read_path)
        link = read_link(where, ctx.read_path)
        if link is None:
            lines.append(f"{dev.address}: no link attributes in sysfs")
            continue
        via = "" if where.name == dev.address else f" (card link at {where.name})"
        lines.append(
            f"{dev.address}{via}: {link.speed_text} x{link.width} of "
            f"{link.max_speed_text} x{link.max_width}"
        )
        if link.speed is None or not link.width:
            down.append(dev.address)
            continue
        if link.max_width and link.width < link.max_width:
            narrow.append(f"{dev.address} x{link.width} of x{link.max_width}")
        port_link = read_link(port, ctx.read_path) if port else None
        port_speed = port_link.max_speed if port_link else None
        if port_speed and link.max_speed and port_speed < link.max_speed:
            slow.append(
                f"{dev.address} can run {link.max_speed:g} GT/s, its slot "
                f"{port_link.device if port_link else '?'} only {port_speed:g} GT/s"
            )
    if all("no link attributes" in line for line in lines):
        return skipped("sysfs has no link attributes for the GPUs (virtual machine?)")
    if down:
        return failed(
            f"PCIe link down for {', '.join(down)}: the GPU has dropped off the bus",
            "reboot; if it repeats, reseat the card and its power cables, and check the "
            "kernel_log check for the moment it fell off",
            lines,
        )
    if narrow or slow:
        return warned(
            f"PCIe link below what the card can run: {'; '.join(narrow + slow)}",
            "move the card to a full x16 slot wired to the CPU (the motherboard manual names "
            "it), without a riser; set the slot to Gen4/Auto in the BIOS",
            lines,
        )
    return passed("; ".join(lines))


# PyTorch's DataLoader workers hand every batch to the main process through /dev/shm. Docker's
# default is 64 MiB, which crashes them ("This might be caused by insufficient shared memory");
# 4 workers x prefetch_factor 2 x a batch of 256 RGB 224x224 float32 images is 1.2 GB.
SHM_MIN_BYTES = 1 << 30


def _shm_mount_size(ctx: Context) -> tuple[int | None, str]:
    """size= of the /dev/shm tmpfs in /proc/mounts (Docker's: ``size=65536k``), and a note
    when /proc/mounts was refused or cut at MOUNTS_LIMIT (it is read no further)."""
    read = ctx.read_file(ctx.path("/proc/mounts"), MOUNTS_LIMIT)
    note = ""
    if read.refused:
        note = f"; /proc/mounts not read: {read.error}"
    elif read.truncated:
        note = f"; only {limit_text(MOUNTS_LIMIT)} of /proc/mounts read, the rest was not"
    for line in (read.text() or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "/dev/shm":
            for option in parts[3].split(","):
                if option.startswith("size="):
                    return _bytes(option[5:]), note
    return None, note


def _bytes(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([kmgKMG]?)", text)
    if not match:
        return None
    return int(match[1]) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match[2].lower()]


def check_dev_shm(ctx: Context) -> Result:
    """/dev/shm present, writable, and large enough for DataLoader workers."""
    shm = ctx.dev("shm")
    if not shm.is_dir():
        return failed(
            f"{shm} is missing: Python multiprocessing and DataLoader workers cannot start",
            "mount a tmpfs there (`mount -t tmpfs -o size=8g tmpfs /dev/shm`; in Docker, "
            "--shm-size=8g or --ipc=host)",
        )
    if not os.access(shm, os.W_OK):
        return failed(
            f"{shm} is not writable by {ctx.user.name}",
            "`sudo chmod 1777 /dev/shm`",
        )
    size, note = _shm_mount_size(ctx)
    source = "/proc/mounts"
    if size is None:
        info = os.statvfs(shm)
        size, source = info.f_blocks * info.f_frsize, "statvfs"
    source += note
    mib = size / (1 << 20)
    if size < SHM_MIN_BYTES:
        return warned(
            f"/dev/shm is {mib:.0f} MiB ({source}): too small for DataLoader workers "
            '("Unexpected bus error encountered in worker. This might be caused by '
            'insufficient shared memory (shm)")',
            "in Docker run with --shm-size=8g or --ipc=host; on a host, "
            "`mount -o remount,size=8g /dev/shm`; or use DataLoader(num_workers=0)",
        )
    return passed(f"/dev/shm is {mib:.0f} MiB ({source})")


def check_host_files(ctx: Context) -> Result:
    """The host files the other checks could not read whole: refused (a FIFO, a device, a
    directory where a regular file belongs) or cut at their bound. Runs last."""
    refused = [read for read in ctx.unread.values() if read.refused]
    cut = [read for read in ctx.unread.values() if read.truncated]
    if not refused and not cut:
        return passed("every host file the checks read was a regular file, read whole")
    parts = [f"{read.path} not read: {read.error}" for read in refused]
    parts += [f"{read.path}: only {limit_text(len(read.data or b''))} read" for read in cut]
    fixes = []
    if refused:
        fixes.append(
            "a FIFO, device or directory where the kernel or the distribution keeps a regular "
            "file is not a working system: find what put it there (`ls -l PATH`, "
            "`findmnt --target PATH`) and restore the file; the checks above judged without it"
        )
    if cut:
        fixes.append(
            "the checks above judged from the part read; a file that large is unusual there: "
            "look at what fills it"
        )
    return warned("; ".join(parts), "; ".join(fixes), [str(read.path) for read in refused + cut])
