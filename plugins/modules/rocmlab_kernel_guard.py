#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""May this host take another kernel, and may it reboot? (the kernel guard)"""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_kernel_guard
short_description: Decide whether the kernel packages are held and whether the host may reboot
description:
  - Reads, under I(root), the installed kernels (dpkg's status and C(/boot/vmlinuz-*)), the
    running kernel (C(/proc/sys/kernel/osrelease)), whether amdgpu-dkms is installed (dpkg, or
    C(/var/lib/dkms/amdgpu)), C(dkms status), the headers of each kernel
    (C(/lib/modules/RELEASE/build)), the free space on C(/boot) against the largest initramfs
    and kernel image there, the Secure Boot EFI variable and C(mokutil --test-key
    /var/lib/dkms/mok.pub), and C(/var/run/reboot-required).
  - Returns which kernel meta packages to hold (so apt brings no kernel that amdgpu-dkms could
    not be loaded on), which packages rocmlab held earlier to release, each cause with the
    command that fixes it, and whether to reboot - only when C(/var/run/reboot-required) exists,
    I(allow_reboot) is true and nothing stands against it.
  - Changes nothing; the rules are in C(plugins/module_utils/kernel_guard.py) (plan).
options:
  root:
    description: The root of the host's files (a fixture tree in tests).
    type: path
    default: /
  commands_from:
    description:
      - A directory of recorded command outputs to use instead of running the commands, named as
        C(rocmlab doctor --commands-from) names them - C(dkms-status.txt) and
        C(mokutil-test-key.txt); a missing file means the command is not installed.
      - Empty runs C(dkms status) and C(mokutil) on the host.
    type: path
  record:
    description: The list of the kernel packages rocmlab holds (JSON, written by the role).
    type: path
    default: /var/lib/rocmlab/kernel-hold.json
  signing_configured:
    description: DKMS module signing is set up (rocm_packages_dkms_signing_configured).
    type: bool
    default: false
  allow_reboot:
    description: rocmlab may reboot the host (rocm_packages_allow_reboot).
    type: bool
    default: false
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Check that every kernel that could boot next can load amdgpu
  rocmlab.rocmlab.rocmlab_kernel_guard:
    allow_reboot: false
  register: guard

- name: Hold the kernel meta packages
  ansible.builtin.dpkg_selections:
    name: "{{ item }}"
    selection: hold
  loop: "{{ guard.hold }}"
"""

RETURN = r"""
running:
  description: The running kernel.
  returned: success
  type: str
next:
  description: The installed kernels that could boot next (the running one and newer ones).
  returned: success
  type: list
  elements: str
causes:
  description: Why another kernel or a reboot is unsafe, each with the command that fixes it.
  returned: success
  type: list
  elements: str
notes:
  description: What else the guard has to say.
  returned: success
  type: list
  elements: str
hold:
  description: Kernel packages to hold now.
  returned: success
  type: list
  elements: str
unhold:
  description: >-
    Kernel packages rocmlab held earlier, to release now that nothing stands against a new
    kernel.
  returned: success
  type: list
  elements: str
held_by_rocmlab:
  description: The kernel packages rocmlab holds once hold and unhold are applied (for I(record)).
  returned: success
  type: list
  elements: str
reboot:
  description: Whether to reboot now.
  returned: success
  type: bool
reboot_why:
  description: Why the host reboots or not.
  returned: success
  type: str
boot_free:
  description: Bytes free on /boot, or null when there is no /boot.
  returned: success
  type: int
boot_needed:
  description: Bytes another kernel takes on /boot (its largest initramfs and image), or null.
  returned: success
  type: int
"""

import json
import os
import re
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import kernel_guard

SMALL = 64 * 1024
DPKG_STATUS_LIMIT = 32 * 1024 * 1024
OUTPUT_LIMIT = 4 * 1024 * 1024
SECURE_BOOT = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]{0,127}$")
RELEASE = re.compile(r"^[0-9][A-Za-z0-9.+~_-]{0,127}$")


def read_bounded(path: str, limit: int = SMALL) -> bytes | None:
    """At most LIMIT bytes of a regular file (not a link, FIFO or device); None when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise ValueError(f"{path}: {err.strerror}") from err
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        return handle.read(limit)


def text(path: str, limit: int = SMALL) -> str | None:
    data = read_bounded(path, limit)
    return None if data is None else data.decode("utf-8", errors="replace")


def under(root: str, absolute: str) -> str:
    return os.path.join(root, absolute.lstrip("/"))


def largest(folder: str, prefix: str) -> int:
    """The size of the largest regular file PREFIX* in FOLDER (0 when none)."""
    sizes = [0]
    for entry in os.scandir(folder):
        if entry.name.startswith(prefix) and entry.is_file(follow_symlinks=False):
            sizes.append(entry.stat(follow_symlinks=False).st_size)
    return max(sizes)


def command_output(module, argv: list[str], recorded: str | None, name: str) -> str | None:
    """What ARGV prints, from the recorded folder when given; None when not installed."""
    if recorded:
        return text(os.path.join(recorded, name), OUTPUT_LIMIT)
    path = module.get_bin_path(argv[0])
    if path is None:
        return None
    rc, out, err = module.run_command([path, *argv[1:]])
    return (out + err)[:OUTPUT_LIMIT] if argv[0] == "mokutil" or rc == 0 else None


def read_record(path: str) -> list[str]:
    """The packages rocmlab held earlier; a record that is not one is ignored (rewritten)."""
    try:
        data = json.loads(text(path) or "{}")
    except ValueError:
        return []
    held = data.get("held") if isinstance(data, dict) else None
    if not isinstance(held, list):
        return []
    return [name for name in held if isinstance(name, str) and PACKAGE.match(name)]


def gather(module) -> dict:
    params = module.params
    root = params["root"]
    recorded = params["commands_from"]
    running = (text(under(root, "/proc/sys/kernel/osrelease")) or "").strip()
    if not RELEASE.match(running):
        module.fail_json(
            msg="rocmlab_kernel_guard: cannot read the running kernel's release from "
            f"{under(root, '/proc/sys/kernel/osrelease')} (read {running[:80]!r})"
        )
    status = text(under(root, "/var/lib/dpkg/status"), DPKG_STATUS_LIMIT)
    installed = kernel_guard.parse_dpkg_status(status or "")
    packages = kernel_guard.kernel_packages(installed)
    boot = under(root, "/boot")
    kernels = set(packages["images"])
    boot_free = boot_needed = None
    if os.path.isdir(boot):
        kernels |= {
            entry.name.removeprefix("vmlinuz-")
            for entry in os.scandir(boot)
            if entry.name.startswith("vmlinuz-")
        }
        info = os.statvfs(boot)
        boot_free = info.f_bavail * info.f_frsize
        boot_needed = largest(boot, "initrd.img-") + largest(boot, "vmlinuz-")
    kernels = {kernel for kernel in kernels if RELEASE.match(kernel)}
    headers = [
        kernel
        for kernel in kernels | {running}
        if os.path.exists(under(root, f"/lib/modules/{kernel}/build"))
    ]
    dkms_text = command_output(module, ["dkms", "status"], recorded, "dkms-status.txt")
    secure = read_bounded(under(root, SECURE_BOOT))
    secure_boot = None if secure is None else (bool(secure) and secure[-1] == 1)
    mok_enrolled = None
    key = under(root, kernel_guard.MOK_KEY)
    if secure_boot and (recorded or os.path.isfile(key)):
        answer = command_output(
            module, ["mokutil", "--test-key", key], recorded, "mokutil-test-key.txt"
        )
        if answer and "is not enrolled" in answer:
            mok_enrolled = False
        elif answer and "is already enrolled" in answer:
            mok_enrolled = True
    required = under(root, "/var/run/reboot-required")
    pkgs = text(required + ".pkgs") if os.path.exists(required) else None
    reboot_packages = sorted(
        {line.strip() for line in (pkgs or "").splitlines() if PACKAGE.match(line.strip())}
    )
    return {
        "running": running,
        "kernels": sorted(kernels),
        "packages": packages,
        # As the doctor reads it: the package, or DKMS's amdgpu tree.
        "driver_installed": "amdgpu-dkms" in installed
        or os.path.isdir(under(root, "/var/lib/dkms/amdgpu")),
        "dkms": None if dkms_text is None else kernel_guard.parse_dkms_status(dkms_text),
        "headers": headers,
        "boot_free": boot_free,
        "boot_needed": boot_needed,
        "secure_boot": secure_boot,
        "signing_configured": params["signing_configured"],
        "mok_enrolled": mok_enrolled,
        "ours": read_record(params["record"]),
        "reboot_required": os.path.exists(required),
        "reboot_packages": reboot_packages,
        "allow_reboot": params["allow_reboot"],
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "commands_from": {"type": "path"},
            "record": {"type": "path", "default": "/var/lib/rocmlab/kernel-hold.json"},
            "signing_configured": {"type": "bool", "default": False},
            "allow_reboot": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        facts = gather(module)
    except (OSError, ValueError) as err:
        module.fail_json(msg=f"rocmlab_kernel_guard: {err}")
    decided = kernel_guard.plan(facts)
    module.exit_json(
        changed=False,
        running=facts["running"],
        next=decided["next"],
        causes=decided["causes"],
        notes=decided["notes"],
        hold=decided["hold"],
        unhold=decided["unhold"],
        held_by_rocmlab=decided["record"],
        reboot=decided["reboot"],
        reboot_why=decided["reboot_why"],
        boot_free=facts["boot_free"],
        boot_needed=facts["boot_needed"],
    )


if __name__ == "__main__":
    main()
