#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Report (and optionally wait out) what stops apt: the dpkg lock, an interrupted dpkg, and
packages left unpacked or half-configured."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_dpkg
short_description: Tell whether dpkg can install now, and why not
description:
  - Reads who holds dpkg's and apt's locks (from C(/proc/locks), with the holder's PID and
    command line), whether a dpkg run was interrupted (files left in C(/var/lib/dpkg/updates),
    the state C(dpkg --configure -a) finishes), and which packages are not fully installed
    (the states C(dpkg --audit) lists - half-installed, unpacked, half-configured,
    triggers-awaited, triggers-pending).
  - With I(wait) greater than 0, waits up to that many seconds for the locks to be released and
    fails naming the holder when they are not.
  - Read-only; changes nothing on the host.
options:
  wait:
    description: Seconds to wait for the locks; 0 reports at once.
    type: int
    default: 0
  replaced:
    description: >-
      Packages the caller replaces or removes itself in its one apt run (a rollback, a release
      move): left half-done by a failed run, they do not count as I(stuck).
    type: list
    elements: str
    default: []
  replaced_amd:
    description: >-
      AMD's packages (those rocmlab's ledger I(ledger) holds at their version) do not count as
      I(stuck) either: a later role of the same run replaces them and checks them again.
    type: bool
    default: false
  ledger:
    description: rocmlab's ledger of the packages it saw come from AMD's sources (below I(root)).
    type: path
    default: /var/lib/rocmlab/amd-packages.json
  root:
    description: The file system root to read (tests point it at a copied tree).
    type: path
    default: /
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Tell whether dpkg can install now, waiting up to a minute for its lock
  rocmlab.rocmlab.rocmlab_dpkg:
    wait: 60
  register: dpkg

- name: Stop on a half-done dpkg
  ansible.builtin.fail:
    msg: "dpkg was interrupted: run dpkg --configure -a"
  when: dpkg.interrupted
"""

RETURN = r"""
lock_holders:
  description: The processes holding a dpkg or apt lock.
  returned: always
  type: list
  elements: dict
  sample:
    - lock: /var/lib/dpkg/lock-frontend
      pid: 812
      command: /usr/bin/python3 /usr/bin/unattended-upgrade
interrupted:
  description: Whether a dpkg run was interrupted (dpkg refuses to work until dpkg --configure -a).
  returned: always
  type: bool
unconfigured:
  description: >-
    Packages dpkg --audit would list, with their state, version and whether the caller replaces
    them (I(replaced), I(replaced_amd)).
  returned: always
  type: list
  elements: dict
  sample:
    - {"package": "rocminfo", "state": "unpacked", "version": "1.0.0.70102-1", "replaced": false}
stuck:
  description: The packages of I(unconfigured) the caller does not replace.
  returned: always
  type: list
  elements: dict
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import amd_packages

LOCKS = (
    "var/lib/dpkg/lock-frontend",
    "var/lib/dpkg/lock",
    "var/lib/apt/lists/lock",
    "var/cache/apt/archives/lock",
)
# dpkg's package states (the third word of Status:) that dpkg --audit reports.
BROKEN_STATES = (
    "half-installed",
    "unpacked",
    "half-configured",
    "triggers-awaited",
    "triggers-pending",
)
POLL_SECONDS = 2


def locked_inodes(proc_locks):
    """{(major, minor, inode): pid} of the write locks in a /proc/locks text."""
    held = {}
    for line in proc_locks.splitlines():
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 812 08:01:1234 0 EOF"; blocked waiters start with "->".
        if len(fields) < 6 or fields[1] == "->":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            held[(int(major, 16), int(minor, 16), int(inode))] = int(fields[4])
        except ValueError:
            continue
    return held


def command_of(root, pid):
    """The command line of PID, or a note that it cannot be read."""
    try:
        with open(os.path.join(root, "proc", str(pid), "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return "(its command line cannot be read)"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip() or "(a kernel thread)"


def lock_holders(root):
    """Who holds each of apt's and dpkg's locks."""
    try:
        with open(os.path.join(root, "proc", "locks")) as handle:
            held = locked_inodes(handle.read())
    except OSError:
        return []
    holders = []
    for lock in LOCKS:
        try:
            st = os.stat(os.path.join(root, lock))
        except OSError:
            continue
        pid = held.get((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
        if pid is not None and pid != os.getpid():
            holders.append({"lock": "/" + lock, "pid": pid, "command": command_of(root, pid)})
    return holders


def interrupted(root):
    """Whether dpkg left journal files in updates/ (what makes it demand --configure -a)."""
    try:
        names = os.listdir(os.path.join(root, "var/lib/dpkg/updates"))
    except OSError:
        return False
    return any(name.isdigit() for name in names)


def unconfigured(status_text):
    """Packages in a dpkg status file whose state dpkg --audit reports."""
    found = []
    for stanza in status_text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                key, _unused, value = line.partition(":")
                fields[key] = value.strip()
        words = fields.get("Status", "").split()
        if len(words) == 3 and words[2] in BROKEN_STATES:
            found.append(
                {
                    "package": fields.get("Package", "?"),
                    "state": words[2],
                    "version": fields.get("Version", ""),
                }
            )
    return found


def sort_out(found, replaced, ledger):
    """FOUND (unconfigured()) with each entry's "replaced": in REPLACED, or AMD's by LEDGER
    (None: AMD's do not count); and the entries not replaced, the stuck ones."""
    for entry in found:
        entry["replaced"] = entry["package"] in replaced or (
            ledger is not None and amd_packages.is_amd(ledger, entry["package"], entry["version"])
        )
    return found, [entry for entry in found if not entry["replaced"]]


def read_state(root, replaced=(), ledger=None):
    """Everything the module reports (REPLACED and LEDGER: sort_out())."""
    try:
        with open(
            os.path.join(root, "var/lib/dpkg/status"), encoding="utf-8", errors="replace"
        ) as handle:
            status = handle.read()
    except OSError:
        status = ""
    found, stuck = sort_out(unconfigured(status), set(replaced), ledger)
    return {
        "lock_holders": lock_holders(root),
        "interrupted": interrupted(root),
        "unconfigured": found,
        "stuck": stuck,
    }


def describe(holders):
    """The holders in one phrase."""
    return "; ".join(f"{h['lock']} by PID {h['pid']} ({h['command']})" for h in holders)


def main():
    module = AnsibleModule(
        argument_spec={
            "wait": {"type": "int", "default": 0},
            "replaced": {"type": "list", "elements": "str", "default": []},
            "replaced_amd": {"type": "bool", "default": False},
            "ledger": {"type": "path", "default": amd_packages.PATH},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    params = module.params
    root, deadline = params["root"], time.monotonic() + max(0, params["wait"])
    ledger = None
    if params["replaced_amd"]:
        try:
            ledger = amd_packages.read(os.path.join(root, params["ledger"].lstrip("/")))
        except (ValueError, OSError):
            ledger = {}  # unreadable: no package counts as AMD's, the guard stays strict
    state = read_state(root, params["replaced"], ledger)
    while state["lock_holders"] and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        state = read_state(root, params["replaced"], ledger)
    if state["lock_holders"] and module.params["wait"] > 0:
        module.fail_json(
            msg=(
                f"The dpkg lock is still held after {module.params['wait']} s: "
                f"{describe(state['lock_holders'])}. Wait for it to finish (unattended-upgrades "
                "can take several minutes), or raise rocmlab_dpkg_lock_timeout. Nothing on this "
                "host was changed."
            ),
            **state,
        )
    module.exit_json(changed=False, **state)


if __name__ == "__main__":
    main()
