# Copyright: rocmlab contributors
# Apache License 2.0
"""The kernel guard: may this host take another kernel, and may it reboot?

AMD's amdgpu-dkms is a module DKMS builds for each kernel, and only for a kernel whose headers
are installed. GRUB (Debian, Ubuntu) boots the newest installed kernel by default, so a kernel
update that DKMS did not build amdgpu for (no headers, a failed build, an unsigned module under
Secure Boot) leaves the host without its GPU at the next reboot; a /boot too full for another
initramfs leaves dpkg half-configured instead. When any of that is so, the kernel meta packages
(the ones that bring new kernels: linux-image-amd64, linux-generic, ...) are held, the running
kernel is kept (no reboot), and each cause is named with the command that fixes it. When all is
well again, the packages rocmlab held (and only those) are released.

Pure functions: the module rocmlab_kernel_guard feeds them what it read on the host (dpkg's
status, ``dkms status``, /boot, the EFI variables, /var/run/reboot-required); tests feed them
tables. The doctor (src/rocmlab/doctor/checks_kernel.py) reads ``dkms status`` and orders kernel
releases the same way; that package never imports the collection, and tests/python checks that
both read the same outputs alike.
"""

from __future__ import annotations

import re

# Kernel packages named after one kernel release: linux-image-6.1.0-28-amd64,
# linux-image-unsigned-6.8.0-31-generic, linux-headers-6.8.0-31-generic, linux-modules-...
_VERSIONED = re.compile(
    r"^linux-(?P<kind>image|image-unsigned|signed-image|headers|modules|modules-extra)"
    r"-(?P<release>\d+\.\d+\S*)$"
)
# The packages that bring new kernels (and their headers) as they are upgraded: Debian's
# linux-image-amd64 / linux-headers-amd64 (-cloud-, -rt-), Ubuntu's linux-generic,
# linux-image-generic, linux-headers-generic, their -hwe-24.04 variants, linux-virtual, ...
_META = re.compile(
    r"^linux-(?:image|headers|signed-image|modules-extra|generic|virtual|signed-generic"
    r"|lowlatency|oem|aws|azure|gcp|kvm)(?:-[a-z0-9][a-z0-9.+-]*)?$"
)
_IMAGE_KINDS = ("image", "image-unsigned", "signed-image")

MOK_KEY = "/var/lib/dkms/mok.pub"
MOK_FIX = (
    "enrol the DKMS signing key (`sudo mokutil --import /var/lib/dkms/mok.pub`, reboot, confirm "
    "in the blue MOK screen) and set rocm_packages_dkms_signing_configured: true"
)


def release_order(release: str) -> tuple:
    """A kernel release ordered as Debian's and Ubuntu's GRUB order them (version numbers
    compared as numbers): 6.14.0-33-generic after 6.14.0-9-generic."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.findall(r"\d+|[^\d.\-+~]+", release)
    )


def parse_dkms_status(text: str) -> dict[str, str]:
    """``dkms status``'s amdgpu lines as {kernel release: state ("installed", "built", ...)}.
    dkms 3 prints ``amdgpu/6.14.14-2222715.24.04, 6.14.0-32-generic, x86_64: installed``, older
    dkms ``amdgpu, 6.14.14-2222715.24.04, 6.14.0-32-generic, x86_64: installed``. A state may
    carry a note (``installed (WARNING! Diff between built and installed module!)``)."""
    states = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("amdgpu"):
            continue
        head, colon, state = line.rpartition(":")
        if not colon:
            continue
        fields = [field.strip() for field in head.split(",")]
        kernel = 1 if "/" in fields[0] else 2
        if len(fields) > kernel and fields[kernel]:
            states[fields[kernel]] = state.strip()
    return states


def kernel_packages(installed: dict[str, str]) -> dict[str, list[str]]:
    """From {installed package: its dpkg selection}: "images" {release: package}, "meta" the
    packages that bring new kernels, "held" the kernel packages whose selection is hold."""
    images: dict[str, str] = {}
    meta, held = [], []
    for name in sorted(installed):
        versioned = _VERSIONED.match(name)
        if versioned:
            # Debian's linux-image-RELEASE-unsigned is RELEASE; -dbg packages hold symbols only.
            release = versioned["release"].removesuffix("-unsigned")
            if versioned["kind"] in _IMAGE_KINDS and not release.endswith(("-dbg", "-dbgsym")):
                images.setdefault(release, name)
        elif _META.match(name):
            meta.append(name)
        else:
            continue
        if installed[name] == "hold":
            held.append(name)
    return {"images": images, "meta": meta, "held": held}


def parse_dpkg_status(text: str) -> dict[str, str]:
    """/var/lib/dpkg/status: {installed package: its selection (install, hold, ...)}; packages
    not fully installed (half-installed, config-files) are left out."""
    installed = {}
    for stanza in text.split("\n\n"):
        name = status = ""
        for line in stanza.splitlines():
            if line.startswith("Package:"):
                name = line.partition(":")[2].strip()
            elif line.startswith("Status:"):
                status = line.partition(":")[2].strip()
        words = status.split()
        if name and len(words) == 3 and words[2] == "installed":
            installed[name] = words[0]
    return installed


def _size(count: int) -> str:
    return f"{count / (1 << 20):.0f} MiB"


def plan(facts: dict) -> dict:
    """What to hold and release, and whether to reboot, from FACTS:

    - running: the running kernel's release (``uname -r``);
    - kernels: the installed kernel releases (dpkg's images and /boot/vmlinuz-*);
    - packages: kernel_packages()'s answer;
    - driver_installed: amdgpu-dkms is installed (DKMS should have built it for each kernel);
    - dkms: parse_dkms_status()'s answer, or None when the dkms command is missing;
    - headers: the releases whose headers are installed (/lib/modules/RELEASE/build);
    - boot_free, boot_needed: bytes free on /boot, bytes another kernel takes there (its
      largest initramfs and image), either None when unknown (no /boot: a container);
    - secure_boot: True, False, or None (not an EFI boot);
    - signing_configured: rocm_packages_dkms_signing_configured;
    - mok_enrolled: True/False from ``mokutil --test-key``, None when not asked or unknown;
    - ours: the kernel packages rocmlab held earlier (its record);
    - reboot_required: /var/run/reboot-required exists; reboot_packages: its .pkgs lines;
    - allow_reboot: rocm_packages_allow_reboot.

    Returns causes (one line each: the cause, then the command that fixes it), notes, hold and
    unhold (package names), record (the packages rocmlab holds after this), next (the kernels
    that could boot next), reboot (bool) and reboot_why (one line)."""
    running = facts["running"]
    packages = facts["packages"]
    kernels = sorted(set(facts["kernels"]) | {running}, key=release_order)
    # GRUB boots the newest by default; the running one boots if the newest is removed or held
    # back in GRUB: every kernel from the running one up could boot next.
    upcoming = [k for k in kernels if release_order(k) >= release_order(running)]
    headers = set(facts["headers"])
    dkms = facts["dkms"]
    causes = []
    for kernel in upcoming:
        which = "the running kernel" if kernel == running else f"kernel {kernel}"
        if kernel not in headers:
            causes.append(
                f"{which} has no headers (linux-headers-{kernel}): DKMS cannot build amdgpu for "
                f"it; fix: `sudo apt install linux-headers-{kernel}` then "
                f"`sudo dkms autoinstall -k {kernel}`"
            )
            continue
        if not facts["driver_installed"]:
            continue  # amdgpu-dkms is about to be installed: DKMS builds it then
        if dkms is None:
            causes.append(
                f"amdgpu-dkms is installed but the dkms command is missing: amdgpu cannot be "
                f"built for {which}; fix: `sudo apt install --reinstall amdgpu-dkms dkms`"
            )
            break
        state = dkms.get(kernel, "")
        if not state.startswith("installed"):
            causes.append(
                f"amdgpu is not installed by DKMS for {which} ({state or 'not built'}): after a "
                f"reboot into it this host has no GPU; fix: `sudo dkms autoinstall -k {kernel}` "
                "and read its make.log if it fails"
            )
    free, needed = facts.get("boot_free"), facts.get("boot_needed")
    if free is not None and needed is not None and free < needed:
        causes.append(
            f"/boot has {_size(free)} free and another kernel needs about {_size(needed)} "
            "(its initramfs and image): the next kernel update would fail in update-initramfs; "
            "fix: `sudo apt autoremove --purge` to remove old kernels, or enlarge /boot"
        )
    if facts.get("secure_boot"):
        enrolled = facts.get("mok_enrolled")
        if enrolled is False:
            causes.append(
                f"Secure Boot is on and the DKMS signing key ({MOK_KEY}) is not enrolled: the "
                f"kernel refuses amdgpu built for a new kernel; fix: {MOK_FIX}"
            )
        elif not facts.get("signing_configured") and not enrolled:
            causes.append(
                "Secure Boot is on and DKMS module signing is not configured: the kernel "
                f"refuses an unsigned amdgpu; fix: {MOK_FIX}"
            )
    held = set(packages["held"])
    ours = set(facts.get("ours", [])) & held
    if causes:
        hold = [name for name in packages["meta"] if name not in held]
        unhold: list[str] = []
        record = sorted(ours | set(hold))
    else:
        hold, unhold, record = [], sorted(ours), []
    notes = []
    if causes and not packages["meta"]:
        notes.append(
            "no kernel meta package is installed (linux-image-amd64, linux-generic, ...): "
            "nothing to hold; a new kernel comes only when installed by name"
        )
    if not facts.get("reboot_required"):
        reboot, why = False, "no reboot: /var/run/reboot-required does not exist"
    else:
        said = ", ".join(facts.get("reboot_packages") or []) or "no package named"
        if causes:
            reboot = False
            why = (
                f"not rebooting although /var/run/reboot-required asks for it ({said}): the "
                f"kernel that boots next may have no GPU; running {running} is kept"
            )
        elif not facts.get("allow_reboot"):
            reboot = False
            why = (
                f"/var/run/reboot-required asks for a reboot ({said}); rocm_packages_allow_reboot "
                "is false: reboot this host when convenient"
            )
        else:
            reboot, why = True, f"rebooting: /var/run/reboot-required asks for it ({said})"
    return {
        "causes": causes,
        "notes": notes,
        "hold": hold,
        "unhold": unhold,
        "record": record,
        "next": upcoming,
        "reboot": reboot,
        "reboot_why": why,
    }
