"""The kernel driver, the device nodes, the account's groups and the GPU count."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from rocmlab.doctor.context import ACCOUNTS_LIMIT, Context, group_name
from rocmlab.doctor.gpus import detect, kfd_present, pci_gpus
from rocmlab.doctor.model import Result, failed, passed, skipped, warned

# Kernel command-line words that keep amdgpu from loading.
BLOCKING_CMDLINE = ("nomodeset", "amdgpu.modeset=0")

GROUP_FIX = (
    "user_groups_users (role user_groups) adds the account to render and video; "
    "then log out and in again (or `newgrp {group}`)"
)


def _no_gpu_expected(ctx: Context) -> bool:
    return ctx.expect_gpus == 0


def check_amdgpu_driver(ctx: Context) -> Result:
    """amdgpu loaded (``/sys/module/amdgpu``), or why not."""
    module = ctx.sys("module", "amdgpu")
    on_bus = pci_gpus(ctx.sysfs_root, ctx.read_path)
    cmdline = (ctx.read("/proc/cmdline") or "").split()
    blocking = [word for word in cmdline if word in BLOCKING_CMDLINE]
    blocking += [w for w in cmdline if w.startswith("modprobe.blacklist=") and "amdgpu" in w]
    if module.is_dir():
        state = (ctx.read_sys("module/amdgpu/initstate") or "live").strip()
        version = (ctx.read_sys("module/amdgpu/version") or "").strip()
        origin = f"AMD's amdgpu-dkms {version}" if version else "the kernel's own amdgpu"
        if state != "live":
            return warned(
                f"amdgpu ({origin}) is {state!r}, not live",
                "wait for it to finish loading or unloading, then rerun; if it stays, "
                "reboot and read this doctor's kernel_log check",
            )
        if not on_bus and not _no_gpu_expected(ctx):
            return warned(
                f"amdgpu is loaded ({origin}) but no AMD GPU is on the PCI bus",
                "reseat the card and check its power cables (`lspci -nn | grep -i amd` lists "
                "it when the slot sees it); with --expect-gpus 0 this is expected",
            )
        note = ""
        if not version and ctx.rocm().get("line") == "core":
            note = "; AMD's Core SDK ships no kernel driver: the kernel's own amdgpu serves it"
        return passed(f"amdgpu loaded ({origin}); {len(on_bus)} AMD GPU(s) on the PCI bus{note}")
    if on_bus:
        addresses = ", ".join(dev.address for dev in on_bus)
        if blocking:
            return failed(
                f"amdgpu is not loaded: the kernel command line has {' '.join(blocking)} "
                f"(AMD GPU at {addresses})",
                "remove it from GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, run "
                "`sudo update-grub` and reboot",
            )
        return failed(
            f"amdgpu is not loaded although an AMD GPU is on the PCI bus ({addresses})",
            "`sudo modprobe amdgpu`, and if it fails read the kernel_log check; "
            "rocm_packages_driver: dkms (role rocm_packages) installs AMD's driver",
        )
    if _no_gpu_expected(ctx):
        return skipped("no AMD GPU on the PCI bus and none expected (--expect-gpus 0)")
    return failed(
        "amdgpu is not loaded and no AMD GPU is on the PCI bus",
        "seat the card (or pass it through to this VM/container); on a host without a GPU "
        "on purpose, run with --expect-gpus 0",
    )


@dataclass(frozen=True)
class Node:
    """A device node: its path, mode bits and group id."""

    path: Path
    mode: int
    gid: int
    uid: int

    def usable_by_others(self) -> bool:
        return self.mode & 0o006 == 0o006

    def usable_by_group(self) -> bool:
        return self.mode & 0o060 == 0o060


def _nodes(ctx: Context) -> tuple[Node | None, list[Node]]:
    def node(path: Path) -> Node | None:
        try:
            info = path.stat()
        except OSError:
            return None
        return Node(path, stat.S_IMODE(info.st_mode), info.st_gid, info.st_uid)

    kfd = node(ctx.dev("kfd"))
    try:
        render = sorted(ctx.dev("dri").glob("renderD*"))
    except OSError:
        render = []
    return kfd, [found for found in (node(path) for path in render) if found]


def _describe_node(node: Node, groups: dict) -> str:
    mode = stat.filemode(node.mode | stat.S_IFCHR)[1:]
    return f"{node.path.name} {mode} group {group_name(groups, node.gid)}"


def check_device_nodes(ctx: Context) -> Result:
    """/dev/kfd and /dev/dri/renderD* present, and their group and mode."""
    if _no_gpu_expected(ctx):
        return skipped("no GPU expected (--expect-gpus 0)")
    kfd, render = _nodes(ctx)
    groups = ctx.groups()
    missing = [name for name, ok in (("/dev/kfd", kfd), ("/dev/dri/renderD*", render)) if not ok]
    if missing:
        return failed(
            f"{' and '.join(missing)} missing under {ctx.dev_root}",
            "load amdgpu (see amdgpu_driver); in a container pass "
            "`--device=/dev/kfd --device=/dev/dri`",
        )
    nodes = [kfd, *render] if kfd else render
    described = "; ".join(_describe_node(node, groups) for node in nodes)
    closed = [n for n in nodes if not (n.usable_by_group() or n.usable_by_others())]
    if closed:
        return warned(
            f"only root can open {', '.join(n.path.name for n in closed)} ({described})",
            "user_groups_udev_rules: true (role user_groups) installs udev rules giving the "
            "render group rw (MODE=0660); then `sudo udevadm trigger`",
        )
    return passed(described)


def _required_groups(ctx: Context) -> list[str]:
    """The groups whose membership opens the compute nodes (render when none are present)."""
    kfd, render = _nodes(ctx)
    groups = ctx.groups()
    needed = []
    for node in [n for n in (kfd, *render) if n]:
        if not node.usable_by_others():
            name = group_name(groups, node.gid)
            if name not in needed:
                needed.append(name)
    if not (kfd or render):
        needed = ["render"]
    return needed


def check_gpu_groups(ctx: Context) -> Result:
    """The account's groups in this login against /etc/group and the nodes' group."""
    if _no_gpu_expected(ctx):
        return skipped("no GPU expected (--expect-gpus 0)")
    user = ctx.user
    if user.uid == 0:
        return skipped("running as root: run the doctor as the account that trains")
    groups = ctx.groups()
    passwd_gid = _passwd_gid(ctx, user.name)
    needed = _required_groups(ctx)
    if not needed:
        return passed("the GPU nodes are open to every account (mode o+rw)")
    problems_listed, problems_login, outside = [], [], []
    for name in needed:
        group = groups.get(name)
        gid = group.gid if group else None
        in_login = gid is not None and gid in user.groups
        listed = group is not None and (user.name in group.members or gid == passwd_gid)
        if in_login and not listed:
            outside.append(name)
        elif listed and not in_login:
            problems_login.append(name)
        elif not listed:
            problems_listed.append(name)
    who = f"{user.name} (uid {user.uid})"
    if problems_listed:
        return failed(
            f"{who} is not in {', '.join(problems_listed)}, which /dev/kfd and the render "
            "nodes need",
            GROUP_FIX.format(group=problems_listed[0]),
        )
    if problems_login:
        return failed(
            f"{who} was added to {', '.join(problems_login)} in /etc/group, but this login "
            "started before that and does not have it",
            f"log out and in again (or `newgrp {problems_login[0]}`); user_groups "
            "already did its part",
        )
    if outside:
        return warned(
            f"{who} has {', '.join(outside)} in this login but /etc/group does not list the "
            "account (a directory service, newgrp or sg gave it)",
            GROUP_FIX.format(group=outside[0]),
        )
    return passed(f"{who} has {', '.join(needed)} in this login and in /etc/group")


def _passwd_gid(ctx: Context, name: str) -> int | None:
    for line in (ctx.read("/etc/passwd", ACCOUNTS_LIMIT) or "").splitlines():
        parts = line.split(":")
        if len(parts) >= 4 and parts[0] == name and parts[3].isdigit():
            return int(parts[3])
    return None


def check_gpu_count(ctx: Context) -> Result:
    """GPUs in the KFD topology against --expect-gpus, each with its gfx target."""
    source, gpus = detect(ctx.sysfs_root, ctx.read_path)
    found = gpus if source == "kfd" else []
    listing = "; ".join(
        f"GPU {gpu.index}: {gpu.label()}{', integrated' if gpu.igpu else ''}" for gpu in found
    )
    on_bus = pci_gpus(ctx.sysfs_root, ctx.read_path)
    expect = ctx.expect_gpus
    if not found:
        if expect == 0:
            return passed("no GPU in the KFD topology, as expected (--expect-gpus 0)")
        if on_bus:
            why = "no KFD topology" if not kfd_present(ctx.sysfs_root) else "KFD lists no GPU"
            return failed(
                f"{why}, though {len(on_bus)} AMD GPU(s) are on the PCI bus: ROCm sees none",
                "fix amdgpu_driver and kernel_log first; the KFD topology appears when amdgpu "
                "initialises the GPU",
            )
        return failed(
            "no AMD GPU in the KFD topology or on the PCI bus",
            "run with --expect-gpus 0 on a host without a GPU on purpose",
        )
    count = len(found)
    if expect is not None and count < expect:
        return failed(
            f"{count} GPU(s) in the KFD topology, {expect} expected: {listing}",
            "read kernel_log for the missing card's failure; reseat it or check its power "
            "cables; lspci shows whether it is on the bus at all",
        )
    if expect is not None and count > expect:
        return warned(
            f"{count} GPU(s) in the KFD topology, {expect} expected: {listing}",
            f"update --expect-gpus to {count} if the extra GPU is meant to be there",
        )
    if len(on_bus) > count:
        return warned(
            f"{count} GPU(s) in the KFD topology but {len(on_bus)} AMD GPU(s) on the PCI bus: "
            f"{listing}",
            "read kernel_log for the card that failed to initialise",
        )
    return passed(f"{count} GPU(s): {listing}")
