"""Tier 0 checks of a running node that the doctor does not make: the device nodes' group, the
accounts that train, what the kernel log and the error counters gained since the last run, and
free space. Passive: sysfs, /dev, /etc and the kernel log are read, nothing runs on a GPU."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

from rocmlab.doctor import checks_driver
from rocmlab.doctor.checks_kernel import KERNEL_LOG_PATTERNS, MAX_EVIDENCE
from rocmlab.doctor.context import (
    ACCOUNTS_LIMIT,
    KERNEL_LOG_LIMIT,
    UserInfo,
    group_name,
    limit_text,
)
from rocmlab.doctor.gpus import pci_gpus
from rocmlab.doctor.model import (
    ERROR,
    FAIL,
    PASS,
    SKIP,
    WARN,
    Result,
    failed,
    passed,
    skipped,
    warned,
)
from rocmlab.health.context import (
    BOOT_DIR,
    ROCM_DIR,
    VENVS_DIR,
    HealthContext,
    Outcome,
)

UDEV_FIX = (
    "user_groups_udev_rules: true (role user_groups) installs udev rules giving {group} rw on "
    "/dev/kfd and the render nodes; then `sudo udevadm trigger`"
)
# The worst status first: how per-account and per-GPU findings combine into one result.
SEVERITY = (FAIL, ERROR, WARN, PASS, SKIP)


def worst(results: list[Result]) -> str:
    """The most severe status among ``results``."""
    statuses = {result.status for result in results}
    return next((status for status in SEVERITY if status in statuses), SKIP)


# ---------------------------------------------------------------- device nodes and accounts


def check_node_group(h: HealthContext) -> Outcome:
    """/dev/kfd and every render node belong to the render group with read and write for it (or
    are open to everyone): a udev rule that changed, or a node recreated by hand (another group,
    or mode 0600), locks the users out."""
    ctx, wanted = h.doctor, h.options.render_group
    if ctx.expect_gpus == 0:
        return Outcome(skipped("no GPU expected (--expect-gpus 0)"))
    paths = [ctx.dev("kfd")]
    with contextlib.suppress(OSError):
        paths += sorted(ctx.dev("dri").glob("renderD*"))
    groups = ctx.groups()
    seen, wrong = [], []
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            continue
        mode = stat.S_IMODE(info.st_mode)
        group = group_name(groups, info.st_gid)
        shown = stat.filemode(mode | stat.S_IFCHR)[1:]
        seen.append(f"{path.name} group {group} {shown}")
        if mode & 0o006 == 0o006:  # open to every account
            continue
        if group != wanted:
            wrong.append(f"{path.name} belongs to group {group}, not {wanted}")
        elif mode & 0o060 != 0o060:
            wrong.append(f"{path.name} is {shown}: group {wanted} may not read and write it")
    if wrong and wanted not in groups:
        return Outcome(
            failed(
                f"/etc/group has no group {wanted!r}, and {'; '.join(wrong)}: nobody can be "
                "given the GPU nodes",
                "user_groups_groups (role user_groups) creates render and video; or pass "
                "--render-group with the group this distribution uses",
                seen,
            )
        )
    if not seen:
        return Outcome(skipped("no /dev/kfd or render node (device_nodes says why)"))
    if wrong:
        return Outcome(
            failed(
                f"{'; '.join(wrong)}: members of {wanted} cannot open it",
                UDEV_FIX.format(group=wanted),
                seen,
            )
        )
    return Outcome(passed(f"members of {wanted} can open the GPU nodes: {'; '.join(seen)}"))


def account(h: HealthContext, name: str) -> UserInfo | None:
    """An account as /etc/passwd and /etc/group give it: its groups are those it is listed in
    (what its next login gets), not those of a running login."""
    for line in (h.doctor.read("/etc/passwd", ACCOUNTS_LIMIT) or "").splitlines():
        parts = line.split(":")
        if len(parts) >= 4 and parts[0] == name and parts[2].isdigit() and parts[3].isdigit():
            uid, gid = int(parts[2]), int(parts[3])
            listed = {g.gid for g in h.doctor.groups().values() if name in g.members}
            return UserInfo(name, uid, gid, frozenset(listed | {gid}))
    return None


def check_gpu_groups(h: HealthContext) -> Outcome:
    """The doctor's gpu_groups check for each account that trains (--account), read from
    /etc/passwd and /etc/group; without --account, for the account running the check."""
    ctx = h.doctor
    if not h.options.accounts:
        if ctx.user.uid == 0 and ctx.expect_gpus != 0:
            return Outcome(
                skipped(
                    "running as root without --account: name the accounts that train "
                    "(the timer and Slurm roles pass them)"
                )
            )
        return Outcome(checks_driver.check_gpu_groups(ctx))
    results = []
    for name in h.options.accounts:
        user = account(h, name)
        if user is None:
            results.append(
                failed(
                    f"the account {name} does not exist (/etc/passwd)",
                    "user_groups_users (role user_groups) lists the accounts that train; "
                    "remove it from --account if it was retired",
                )
            )
            continue
        results.append(checks_driver.check_gpu_groups(replace(ctx, user=user)))
    status = worst(results)
    saw = "; ".join(r.saw for r in results)
    fixes = [r.fix for r in results if r.status == status and r.fix]
    evidence = [line for r in results for line in r.evidence]
    return Outcome(Result(status, saw, fixes[0] if fixes else None, evidence))


# ---------------------------------------------------------------- the kernel log


def _digest(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8", "surrogatepass")).hexdigest()[:16]


MAX_SEEN = 2000  # matched lines remembered per boot


def check_kernel_log(h: HealthContext) -> Outcome:
    """amdgpu failures the kernel logged since the last run (the doctor's patterns). A failure
    that leaves the GPU broken until a reboot (init, PSP, firmware, a failed reset) keeps the
    check failing for the rest of the boot; hangs and resets warn once, when they are new."""
    log = h.kernel_log()
    if log.text is None:
        return Outcome(
            warned(
                f"could not read the kernel log ({log.error})",
                "run as root (the timer and Slurm roles do), or pass --kernel-log FILE",
            )
        )
    before = h.before("kernel_log")
    seen = set(before.get("seen", [])) if before else set()
    matched: list[tuple[str, str, str]] = []  # (status, kind, line)
    for line in log.text.splitlines():
        for status, what, pattern in KERNEL_LOG_PATTERNS:
            if pattern.search(line):
                matched.append((status, what, line.strip()))
                break
    digests = [_digest(line) for _unused, _unused2, line in matched]
    new = [m for m, d in zip(matched, digests, strict=True) if d not in seen]
    failures = [m for m in matched if m[0] == FAIL]
    state = {"seen": list(dict.fromkeys(digests))[-MAX_SEEN:]}
    source = log.source
    if log.truncated:
        source += f" ({limit_text(KERNEL_LOG_LIMIT)}; the rest was not read)"
    since = "since the last run" if before is not None else "this boot (no earlier run)"
    new_fail = [m for m in new if m[0] == FAIL]
    evidence = [line for _unused, _unused2, line in (new_fail or failures or new)][:MAX_EVIDENCE]
    if failures:
        kinds = ", ".join(dict.fromkeys(kind for _unused, kind, _unused2 in failures))
        when = f"{len(new_fail)} new {since}" if new_fail else "earlier this boot"
        return Outcome(
            failed(
                f"amdgpu failures in {source} ({when}): {kinds}; the GPU stays broken until "
                "a reboot",
                "reboot; if it repeats, read `rocmlab doctor`'s kernel_log check for the "
                "firmware or driver fix; drain the node meanwhile",
                evidence,
            ),
            state,
        )
    if new:
        kinds = ", ".join(dict.fromkeys(kind for _unused, kind, _unused2 in new))
        return Outcome(
            warned(
                f"{len(new)} new amdgpu line(s) {since} in {source}: {kinds}: jobs running on "
                "the GPU were killed",
                "if it repeats, note the process the log names, update the kernel and firmware "
                "(rocm_packages_driver: dkms brings AMD's driver), and check power and cooling",
                evidence,
            ),
            state,
        )
    old = f"; {len(matched)} seen before" if matched else ""
    return Outcome(passed(f"no new amdgpu failure {since} in {source}{old}"), state)


# ---------------------------------------------------------------- error counters

# amdgpu's RAS error counters: /sys/class/drm/cardN/device/ras/<block>_err_count, one
# "<kind>: <count>" line per kind: "ue" (uncorrectable), "ce" (corrected), and on newer kernels
# "de" (deferred, UMC only). drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c, amdgpu_ras_sysfs_read.
RAS_LINE = re.compile(r"^(ue|ce|de):\s*(\d+)\s*$")
# Uncorrected kinds: "de" errors were detected but not corrected (their data is poisoned).
UNCORRECTED = ("ue", "de")
RAS_FIX = (
    "uncorrectable errors: drain the node and reboot it (amdgpu retires the bad VRAM pages); "
    "if they come back, the card needs service (`rocm-smi --showrasinfo all`, the vendor's RMA)"
)


def parse_ras(text: str) -> dict[str, int] | None:
    """{"ue": n, "ce": n[, "de": n]} of one _err_count file; None when it says something else."""
    counts = {}
    for line in text.splitlines():
        match = RAS_LINE.match(line.strip())
        if match:
            counts[match[1]] = int(match[2])
        elif line.strip():
            return None
    return counts if "ue" in counts and "ce" in counts else None


def _counters(h: HealthContext) -> list[tuple[str, Path]]:
    """(PCI address, sysfs device directory) of the AMD GPUs on the bus."""
    return [(dev.address, dev.path) for dev in pci_gpus(h.doctor.sysfs_root, h.doctor.read_path)]


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in path.iterdir())
    except OSError:
        return []


def _counted(before: dict[str, Any] | None) -> dict[str, Any]:
    """The counters of the last run's record (a record of another shape counts as none)."""
    counters = (before or {}).get("counters")
    if not isinstance(counters, dict):
        return {}
    return {k: v for k, v in counters.items() if isinstance(v, (dict, int))}


def check_ras_errors(h: HealthContext) -> Outcome:
    """Uncorrected (FAIL) or corrected (WARN) ECC/RAS errors counted since the last run."""
    before = h.before("ras_errors")
    counted = _counted(before)
    now: dict[str, dict[str, dict[str, int]]] = {}
    lines, rose_ue, rose_ce, odd, earlier = [], [], [], [], []
    for address, path in _counters(h):
        names = [n for n in _listdir(path / "ras") if n.endswith("_err_count")]
        for name in names:
            block = name.removesuffix("_err_count")
            text = h.doctor.read_path(path / "ras" / name)
            if text is None:
                continue
            counts = parse_ras(text)
            if counts is None:
                odd.append(f"{address} {block}: {text.strip()[:80]!r}")
                continue
            now.setdefault(address, {})[block] = counts
            blocks = counted.get(address)
            old = blocks.get(block) if isinstance(blocks, dict) else None
            old = old if isinstance(old, dict) else {}
            for kind, value in counts.items():
                base = old.get(kind, 0) if isinstance(old.get(kind), int) else 0
                delta = value - base if value >= base else value  # a reset counter starts over
                if delta > 0:
                    where = f"{address} {block}: {kind} +{delta} (now {value})"
                    (rose_ue if kind in UNCORRECTED else rose_ce).append(where)
                elif value and before is None and kind in UNCORRECTED:
                    earlier.append(f"{address} {block}: {kind} {value}")
            lines.append(f"{address} {block}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    state = {"counters": now}
    if not now and not odd:
        return Outcome(skipped("no RAS error counters in sysfs (cards without ECC have none)"))
    since = "since the last run" if before is not None else "since the driver loaded"
    if rose_ue:
        return Outcome(
            failed(f"uncorrectable GPU memory/RAS errors {since}: {'; '.join(rose_ue)}", RAS_FIX,
                   lines),
            state,
        )  # fmt: skip
    if odd:
        return Outcome(
            warned(
                f"RAS counters not readable: {'; '.join(odd)} (amdgpu says so after a RAS "
                "interrupt, an uncorrectable error, until the GPU is reset)",
                "read the kernel log for the RAS event; drain and reboot the node if it stays",
                lines,
            ),
            state,
        )
    if rose_ce:
        return Outcome(
            warned(
                f"corrected GPU memory/RAS errors {since}: {'; '.join(rose_ce)}",
                "corrected errors do no harm by themselves; many, or rising fast, announce a "
                "failing card: watch this counter and plan its service",
                lines,
            ),
            state,
        )
    if earlier:
        return Outcome(
            warned(
                f"uncorrectable errors counted before this check first ran: {'; '.join(earlier)}",
                RAS_FIX,
                lines,
            ),
            state,
        )
    return Outcome(passed(f"no RAS error {since}: {'; '.join(lines)}"), state)


def check_pcie_replays(h: HealthContext) -> Outcome:
    """PCIe replays (NAKs sent and received, amdgpu's pcie_replay_count) since the last run: a
    link that has to repeat transfers is a marginal slot, riser or cable."""
    before = h.before("pcie_replays")
    now: dict[str, int] = {}
    rose, lines = [], []
    for address, path in _counters(h):
        text = h.doctor.read_path(path / "pcie_replay_count")
        if text is None or not text.strip().isdigit():
            continue
        value = int(text.strip())
        now[address] = value
        lines.append(f"{address}: {value}")
        if before is not None:
            old = _counted(before).get(address)
            base = old if isinstance(old, int) and old <= value else 0
            if value > base:
                rose.append(f"{address} +{value - base} (now {value})")
    state = {"counters": now}
    if not now:
        return Outcome(skipped("no pcie_replay_count in sysfs (amdgpu not loaded, or a VF)"))
    if before is None:
        return Outcome(passed(f"first reading (compared from the next run on): {'; '.join(lines)}"),
                       state)  # fmt: skip
    if rose:
        return Outcome(
            warned(
                f"PCIe replays since the last run: {'; '.join(rose)}: the link repeats transfers",
                "reseat the card, avoid risers and extension cables, check the slot's "
                "generation setting in the BIOS (Gen4/Gen3 instead of Auto when it keeps "
                "rising)",
                lines,
            ),
            state,
        )
    return Outcome(passed(f"no PCIe replay since the last run: {'; '.join(lines)}"), state)


# ---------------------------------------------------------------- free space


def _size(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def check_disk_space(h: HealthContext) -> Outcome:
    """Free space where ROCm, the venvs and /boot live: WARN below the threshold, FAIL below a
    quarter of it."""
    options = h.options
    wanted = (
        (ROCM_DIR, options.min_free),
        (VENVS_DIR, options.min_free),
        (BOOT_DIR, options.min_free_boot),
    )
    by_fs: dict[int, dict[str, Any]] = {}
    missing = []
    for absolute, threshold in wanted:
        path = h.doctor.path(absolute)
        try:
            info = os.statvfs(path)
            device = os.stat(path).st_dev
        except OSError:
            missing.append(absolute)
            continue
        entry = by_fs.setdefault(
            device, {"paths": [], "free": info.f_bavail * info.f_frsize, "threshold": 0}
        )
        entry["paths"].append(absolute)
        entry["threshold"] = max(entry["threshold"], threshold)
    if not by_fs:
        return Outcome(skipped(f"none of {', '.join(p for p, _unused in wanted)} exists here"))
    lines, low, full = [], [], []
    for entry in by_fs.values():
        where = " and ".join(entry["paths"])
        line = f"{where}: {_size(entry['free'])} free (threshold {_size(entry['threshold'])})"
        lines.append(line)
        if entry["free"] < entry["threshold"] // 4:
            full.append(line)
        elif entry["free"] < entry["threshold"]:
            low.append(line)
    if missing:
        lines.append(f"not present: {', '.join(missing)}")
    fix = (
        "free space there (`sudo apt-get clean`, old kernels: `sudo apt autoremove --purge`, "
        "old ROCm releases under /opt); the thresholds are --min-free and --min-free-boot"
    )
    if full:
        return Outcome(failed(f"almost no space left: {'; '.join(full)}", fix, lines))
    if low:
        return Outcome(
            warned(
                f"low on space: {'; '.join(low)}: the next upgrade or kernel may not fit",
                fix,
                lines,
            )
        )
    return Outcome(passed("; ".join(lines)))
