"""The kernel: amdgpu failures in its log, Secure Boot and the DKMS module, headers, and the
running kernel against what the installed ROCm release supports."""

from __future__ import annotations

import os
import re
from typing import Any

from rocmlab.common import support_catalog
from rocmlab.doctor.checks_software import installed_rocm
from rocmlab.doctor.context import KERNEL_LOG_LIMIT, Context, limit_text
from rocmlab.doctor.model import FAIL, WARN, Result, failed, passed, skipped, warned

# (status, what it means, pattern). Patterns match the messages amdgpu prints
# (drivers/gpu/drm/amd/amdgpu: amdgpu_device.c, amdgpu_psp.c, amdgpu_job.c, amdgpu_ucode.c).
KERNEL_LOG_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (status, what, re.compile(pattern))
    for status, what, pattern in (
        (FAIL, "IP block init failed", r"(?:hw|sw)_init of IP block <[^>]+> failed"),
        (FAIL, "GPU init failed", r"Fatal error during GPU init|amdgpu_device_ip_init failed"),
        (FAIL, "PSP failure", r"\bPSP\b[^\n]*\bfail|Failed to load psp firmware"),
        (FAIL, "firmware missing", r"Direct firmware load for amdgpu/\S+ failed"),
        (FAIL, "firmware rejected", r"fail to request/validate \S+ microcode"),
        # Every reset of the whole GPU that failed (amdgpu_device.c: amdgpu_device_gpu_recover,
        # amdgpu_do_asic_reset, the XGMI hive's reset, a reset at init, the mode-1 and mode-2
        # resets; the SMU's own "Mode2 reset failed!", "Failed to mode reset!"): the GPU is
        # unusable until a reboot.
        (
            FAIL,
            "GPU reset failed",
            r"GPU reset\(\d+\) failed|GPU Recovery Failed|ASIC reset failed|asic reset on init "
            r"failed|pre asic reset failed|[Mm]ode ?[12] reset failed|Failed to mode reset",
        ),
        # A step the driver follows with a full reset when it fails (amdgpu_job.c's per-ring
        # reset, the IP blocks' soft reset): the full reset's own line says how it ended.
        (WARN, "ring reset failed", r"Ring \S+ reset failed|soft reset failed, will fallback"),
        # Any other reset failure amdgpu reports (bounded: host lines are hostile input).
        (
            FAIL,
            "GPU reset failed",
            r"\bamdgpu\b[^\n]{0,200}?(?:\breset\b[^\n]{0,80}?\b[Ff]ail|\b[Ff]ail(?:ed)? to "
            r"(?:\w+ )?reset\b)",
        ),
        (
            FAIL,
            "unsigned module refused",
            r"Loading of unsigned module is rejected|unsigned module loading is restricted",
        ),
        (WARN, "ring timeout", r"ring \S+ timeout"),
        (WARN, "GPU reset", r"GPU reset begin!|GPU reset\(\d+\) succeeded|GPU reset succeeded"),
        (WARN, "VRAM lost", r"VRAM is lost due to GPU reset"),
        (WARN, "GPU page fault", r"\[(?:gfxhub|mmhub)\d*\] (?:retry |no-retry )?page fault"),
    )
)
# Matched lines quoted per check (the first ones: the cause comes before the cascade).
MAX_EVIDENCE = 20


def check_kernel_log(ctx: Context) -> Result:
    """The kernel log of this boot, for amdgpu failures."""
    log = ctx.kernel_log
    if log is None or log.text is None:
        why = log.error if log else "not read"
        return warned(
            f"could not read the kernel log ({why})",
            "run as a member of adm or systemd-journal, or save `sudo dmesg` to a file and "
            "pass it with --kernel-log FILE",
        )
    lines = log.text.splitlines()
    found: dict[str, str] = {}
    evidence = []
    for line in lines:
        for status, what, pattern in KERNEL_LOG_PATTERNS:
            if pattern.search(line):
                found.setdefault(what, status)
                if len(evidence) < MAX_EVIDENCE:
                    evidence.append(line.strip())
                break
    if not lines:
        return warned(
            f"the kernel log from {log.source} is empty",
            "rerun as root, or pass --kernel-log FILE with the output of `sudo dmesg`",
        )
    source = log.source
    if log.truncated:
        source += f" ({limit_text(KERNEL_LOG_LIMIT)}; the rest was not read)"
    if not found:
        return passed(f"{len(lines)} lines from {source}: no amdgpu failure")
    kinds = ", ".join(found)
    if FAIL in found.values():
        return failed(
            f"amdgpu failures in {source}: {kinds}",
            "firmware: `sudo apt install firmware-amd-graphics` (Debian) or "
            "linux-firmware (Ubuntu), or AMD's amdgpu-dkms (rocm_packages_driver: dkms); "
            "PSP/init failures: update the system BIOS and the kernel, reseat the card",
            evidence,
        )
    return warned(
        f"the GPU hung and was reset this boot ({kinds}): running jobs were killed",
        "if it repeats, note the process the log names, update the kernel and firmware "
        "(rocm_packages_driver: dkms brings AMD's driver), and check power and cooling",
        evidence,
    )


EFI_SECURE_BOOT = "firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
DKMS_MOK = "/var/lib/dkms/mok.pub"


def secure_boot_state(ctx: Context) -> bool | None:
    """True/False from the SecureBoot EFI variable (4 attribute bytes, then 1 = on); None
    when the machine did not boot through EFI (or efivarfs is not mounted)."""
    data = ctx.read_file(ctx.sys(EFI_SECURE_BOOT)).data
    if data is None:
        return None
    return bool(data) and data[-1] == 1


def amdgpu_dkms_installed(ctx: Context) -> bool:
    """Whether AMD's amdgpu-dkms package is installed (or DKMS knows an amdgpu module)."""
    fields = ctx.dpkg_packages().get("amdgpu-dkms", {})
    installed = fields.get("Status", "").endswith(" installed")
    return installed or ctx.path("/var/lib/dkms/amdgpu").is_dir()


MOK_FIX = (
    "enrol the DKMS signing key (`sudo mokutil --import /var/lib/dkms/mok.pub`, reboot, confirm "
    "in the blue MOK screen) and set rocm_packages_dkms_signing_configured: true (role "
    "rocm_packages), or rocm_packages_driver: none to use the kernel's own signed amdgpu"
)


def check_secure_boot(ctx: Context) -> Result:
    """Secure Boot on with an unsigned or unenrolled amdgpu-dkms module."""
    state = secure_boot_state(ctx)
    if state is None:
        efi = ctx.sys("firmware", "efi").is_dir()
        return passed(
            "EFI boot without a SecureBoot variable: Secure Boot is off"
            if efi
            else "not an EFI boot (or efivarfs not visible): no Secure Boot"
        )
    if not state:
        return passed("Secure Boot is off")
    if not amdgpu_dkms_installed(ctx):
        return passed("Secure Boot is on; amdgpu is the kernel's own module, signed with it")
    signer = ctx.run(["modinfo", "-F", "signer", "amdgpu"])
    evidence = []
    log = ctx.kernel_log.text if ctx.kernel_log and ctx.kernel_log.text else ""
    evidence += [line.strip() for line in log.splitlines() if "unsigned module" in line][:5]
    if signer is None or signer.returncode != 0:
        return warned(
            "Secure Boot is on with amdgpu-dkms installed, and modinfo cannot say whether "
            "the module is signed",
            "`modinfo -F signer amdgpu` must name a key; " + MOK_FIX,
            evidence,
        )
    name = signer.stdout.strip()
    if not name:
        return failed(
            "Secure Boot is on and the amdgpu-dkms module is unsigned: the kernel refuses it "
            '("Key was rejected by service")',
            MOK_FIX,
            evidence,
        )
    evidence.append(f"modinfo -F signer amdgpu: {name}")
    if not ctx.path(DKMS_MOK).is_file():
        return passed(f"Secure Boot is on; amdgpu-dkms is signed by {name}", evidence)
    test = ctx.run(["mokutil", "--test-key", str(ctx.path(DKMS_MOK))])
    if test is None:
        return warned(
            f"Secure Boot is on; amdgpu-dkms is signed by {name}, and mokutil is not "
            "installed to confirm the key is enrolled",
            "`sudo apt install mokutil` and rerun; " + MOK_FIX,
            evidence,
        )
    answer = (test.stdout + test.stderr).strip()
    evidence.append(f"mokutil --test-key {DKMS_MOK}: {answer}")
    if "is not enrolled" in answer:
        return failed(
            f"Secure Boot is on and amdgpu-dkms is signed by {name}, whose key "
            f"({DKMS_MOK}) is not enrolled: the kernel refuses the module",
            MOK_FIX,
            evidence,
        )
    return passed(f"Secure Boot is on; amdgpu-dkms is signed by {name}, key enrolled", evidence)


def dkms_amdgpu(ctx: Context) -> tuple[dict[str, str], list[str]] | None:
    """`dkms status`'s amdgpu lines: {kernel release: state ("installed", "built", ...)} and the
    lines themselves; None when the dkms command is missing. Its lines read
    ``amdgpu/6.14.14-2222715.24.04, 6.14.0-32-generic, x86_64: installed`` (dkms 3) or
    ``amdgpu, 6.14.14-2222715.24.04, 6.14.0-32-generic, x86_64: installed`` (older)."""
    result = ctx.run(["dkms", "status"])
    if result is None:
        return None
    lines = [line.strip() for line in result.stdout.splitlines() if line.startswith("amdgpu")]
    states = {}
    for line in lines:
        head, colon, state = line.rpartition(":")
        if not colon:
            continue
        fields = [field.strip() for field in head.split(",")]
        # dkms 3: "amdgpu/VERSION, KERNEL, ARCH"; dkms 2: "amdgpu, VERSION, KERNEL, ARCH".
        kernel = 1 if "/" in fields[0] else 2
        if len(fields) > kernel:
            states[fields[kernel]] = state.strip()
    return states, lines


def check_dkms_headers(ctx: Context) -> Result:
    """The running kernel's headers, and amdgpu-dkms built for it."""
    if not amdgpu_dkms_installed(ctx):
        return skipped("amdgpu-dkms is not installed: the kernel's own amdgpu needs no headers")
    release = ctx.kernel_release()
    if release is None:
        return skipped("cannot read the running kernel's release (/proc/sys/kernel/osrelease)")
    if not ctx.path(f"/lib/modules/{release}/build").exists():
        return failed(
            f"no headers for the running kernel {release}: DKMS cannot build amdgpu for it",
            f"`sudo apt install linux-headers-{release}` then `sudo dkms autoinstall` "
            "(rocm_packages_driver: dkms checks this, role rocm_packages)",
        )
    found = dkms_amdgpu(ctx)
    if found is None:
        return warned(
            f"headers for {release} present, but the dkms command is missing",
            "`sudo apt install --reinstall amdgpu-dkms` (it depends on dkms)",
        )
    states, lines = found
    mine = [line for line in lines if f", {release}," in line or f", {release}:" in line]
    state = states.get(release, "")
    if state.startswith("installed"):
        return passed(f"headers for {release} present; amdgpu-dkms installed for it", mine)
    return warned(
        f"headers for {release} present, but dkms has not installed amdgpu for this kernel "
        f"({state or 'not built'})",
        "`sudo dkms autoinstall`, then reboot",
        lines,
    )


def release_order(release: str) -> tuple:
    """A kernel release ordered as Debian's and Ubuntu's GRUB order them (version numbers
    compared as numbers): 6.14.0-33-generic after 6.14.0-9-generic."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.findall(r"\d+|[^\d.\-+~]+", release)
    )


def check_dkms_next_kernel(ctx: Context) -> Result:
    """amdgpu-dkms built for each installed kernel newer than the running one: GRUB boots the
    newest by default, so a kernel update that DKMS could not build for (no headers, a build
    failure) leaves the host without its GPU at the next reboot."""
    if not amdgpu_dkms_installed(ctx):
        return skipped(
            "amdgpu-dkms is not installed: the kernel's own amdgpu comes with each kernel"
        )
    running = ctx.kernel_release()
    if running is None:
        return skipped("cannot read the running kernel's release (/proc/sys/kernel/osrelease)")
    boot = ctx.path("/boot")
    try:
        images = sorted(p.name.removeprefix("vmlinuz-") for p in boot.glob("vmlinuz-*"))
    except OSError as err:
        return skipped(f"cannot list /boot ({err.strerror})")
    newer = sorted(
        (release for release in images if release_order(release) > release_order(running)),
        key=release_order,
    )
    if not newer:
        return passed(f"no kernel newer than the running {running} is installed in /boot")
    found = dkms_amdgpu(ctx)
    if found is None:
        return warned(
            f"kernel(s) {', '.join(newer)} installed beside the running {running}, and the dkms "
            "command is missing: amdgpu cannot be built for them",
            "`sudo apt install --reinstall amdgpu-dkms` (it depends on dkms), then "
            "`sudo dkms autoinstall -k RELEASE` for each, before the next reboot",
        )
    states, lines = found
    missing = []
    for release in newer:
        state = states.get(release, "")
        if state.startswith("installed"):
            continue
        headers = ctx.path(f"/lib/modules/{release}/build").exists()
        why = (state or "not built") if headers else "no headers"
        missing.append({"release": release, "why": why, "headers": headers})
    if not missing:
        return passed(
            f"amdgpu-dkms is installed for the newer kernel(s) {', '.join(newer)} too", lines
        )
    said = ", ".join(f"{kernel['release']} ({kernel['why']})" for kernel in missing)
    fixes = [
        (
            f"`sudo apt install linux-headers-{kernel['release']}` then "
            if not kernel["headers"]
            else ""
        )
        + f"`sudo dkms autoinstall -k {kernel['release']}`"
        for kernel in missing
    ]
    return warned(
        f"the next boot takes the newest kernel, and amdgpu-dkms is not installed for {said}: "
        f"after a reboot this host would have no GPU (running {running}, where it is)",
        "; ".join(fixes)
        + f", before the next reboot; or keep booting {running} (GRUB_DEFAULT) until it is",
        lines,
    )


def _largest(boot, pattern: str) -> tuple[int, str]:
    """The size and name of the largest regular file PATTERN in /boot (0, "" when none)."""
    best = (0, "")
    for path in boot.glob(pattern):
        if path.is_file() and not path.is_symlink():
            best = max(best, (path.lstat().st_size, path.name))
    return best


def _mib(count: int) -> str:
    return f"{count / (1 << 20):.0f} MiB"


def check_boot_space(ctx: Context) -> Result:
    """Room on /boot for another kernel: its initramfs and image take about as much as the
    largest ones there now. A kernel update into a full /boot fails in update-initramfs ("No
    space left on device") and leaves dpkg half-configured (the kernel guard holds the kernel
    packages then, role rocm_packages)."""
    boot = ctx.path("/boot")
    if not boot.is_dir():
        return skipped("no /boot here (a container boots no kernel of its own)")
    try:
        initrd, initrd_name = _largest(boot, "initrd.img-*")
        image, image_name = _largest(boot, "vmlinuz-*")
        info = os.statvfs(boot)
    except OSError as err:
        return skipped(f"cannot read /boot ({err.strerror})")
    free = info.f_bavail * info.f_frsize
    needed = initrd + image
    if not needed:
        return passed(f"/boot has {_mib(free)} free; no initramfs or kernel image in it")
    largest = ((initrd, initrd_name), (image, image_name))
    evidence = [f"{name}: {_mib(size)}" for size, name in largest if name]
    if free < needed:
        return warned(
            f"/boot has {_mib(free)} free and another kernel needs about {_mib(needed)} (the "
            "largest initramfs and image there): the next kernel update fails in "
            "update-initramfs and leaves dpkg half-configured",
            "remove old kernels (`sudo apt autoremove --purge`; keep the running one), or "
            "enlarge /boot; with rocm_packages_driver: dkms rocmlab holds the kernel packages "
            "until then",
            evidence,
        )
    return passed(
        f"/boot has {_mib(free)} free; another kernel needs about {_mib(needed)}", evidence
    )


def kernel_table() -> dict[str, Any]:
    """The kernel series AMD supports per ROCm release and distribution (the support catalog)."""
    return support_catalog.shipped().kernel_table()


def distribution_key(ctx: Context) -> str:
    """``ubuntu 24.04`` / ``debian 12`` from os-release; an Ubuntu derivative as its base."""
    fields = ctx.os_release()
    ident = fields.get("ID", "").lower()
    version = fields.get("VERSION_ID", "")
    # Derivatives (Linux Mint, Pop!_OS) name their Ubuntu base in UBUNTU_CODENAME and run its
    # kernels.
    base = support_catalog.shipped().ubuntu_codenames().get(fields.get("UBUNTU_CODENAME", ""))
    if ident != "ubuntu" and base:
        return f"ubuntu {base}"
    if ident == "debian":
        version = version.split(".")[0]
    return f"{ident} {version}".strip()


def check_kernel_support(ctx: Context) -> Result:
    """The running kernel against the kernels AMD lists for the installed ROCm release."""
    rocm = installed_rocm(ctx)
    if rocm.amd is None:
        why = (
            "the distribution's ROCm is built for its own kernel"
            if rocm.distro
            else ("no ROCm installed")
        )
        return skipped(f"AMD's kernel table does not apply: {why}")
    release = rocm.release or ""
    row = kernel_table()["releases"].get(release)
    if row is None:
        return skipped(f"no kernel table for ROCm {release} in rocmlab's data")
    kernel = ctx.kernel_release()
    if kernel is None:
        return skipped("cannot read the running kernel's release (/proc/sys/kernel/osrelease)")
    match = re.match(r"^(\d+)\.(\d+)", kernel)
    series = f"{match[1]}.{match[2]}" if match else kernel
    distro = distribution_key(ctx)
    source = f"AMD's list for ROCm {release}" + ("" if row["verified"] else " (unverified row)")
    supported = row["kernels"].get(distro)
    if supported is None:
        listed = ", ".join(sorted(row["kernels"]))
        return warned(
            f"{distro or 'this distribution'} is not among the distributions {source} names "
            f"({listed})",
            "use a listed distribution for AMD's packages, or the distribution's own ROCm "
            "(rocm_repo_source: distro)",
        )
    if series in supported:
        return passed(f"kernel {kernel} on {distro}: in {source} ({', '.join(supported)})")
    saw = f"kernel {kernel} on {distro} is outside {source} ({', '.join(supported)})"
    if amdgpu_dkms_installed(ctx):
        return failed(
            f"{saw}: amdgpu-dkms fails to build or misbehaves on kernels AMD has not released "
            "it for",
            f"boot a {' or '.join(supported)} kernel (the distribution's GA/HWE kernel), or "
            "rocm_packages_driver: none to use the kernel's own amdgpu",
        )
    return warned(
        f"{saw}; the kernel's own amdgpu is used, which usually works but AMD does not test it",
        f"boot a {' or '.join(supported)} kernel for AMD's support",
    )
