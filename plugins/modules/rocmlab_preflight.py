#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""What a lab rollout checks on a host before it changes anything: free space where ROCm, the
venvs and the datasets go, the host's clock, GPU compute processes, logged-in users and the ROCm
release installed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_preflight
short_description: Read what a lab rollout checks before it changes a host
description:
  - Free space. For each item of I(space), the file system that will hold its path (the
    nearest existing parent when the path does not exist yet). Items on one file system add up
    their needs, and each file system is compared with the sum.
  - The host's clock (seconds since the epoch), and its offset from I(controller_time), the
    controller's clock when the task was sent (the transfer time makes a host look slightly
    ahead).
  - GPU compute processes. The KFD driver lists each process that holds a compute context as a
    directory named by its PID under C(class/kfd/kfd/proc) of I(sysfs_root).
  - Logged-in users. The C(USER_PROCESS) records of I(utmp) whose process still runs (what
    C(who) lists on Debian 12), and the user sessions systemd-logind knows (C(loginctl); Debian
    13's C(who) reads those instead of utmp) when logind runs. The session this module runs in
    (any of its parent processes leads it) and the accounts in I(ignore_users) do not count.
  - AMD's installed ROCm release, read by module_utils rocm_installed from root's files alone
    (bounded, no link followed but AMD's C(/opt/rocm) chain, and that within the host's root) -
    dpkg's C(rocm-core) and C(amdrocm*) packages, the C(/opt/rocm/core-X.Y) directories of the
    ROCm Core SDK line and C(update-alternatives)' C(core) group (which core is selected, auto
    or manual), and the legacy line's C(/opt/rocm/.info/version).
  - Whether the host reaches each mirror it will use. Each of I(urls) is fetched with GET (not
    HEAD, which apt-cacher-ng serving an offline bundle answers with 503), at most 8 at once,
    through Ansible's own URL client (the environment's proxy, certificates checked), the first
    64 KiB read and the rest left. Each fetch (connection, headers and body) ends within
    I(url_deadline) and all of them within I(fetch_deadline), however slowly a server answers;
    a fetch still running then is answered with the URL and the deadline it reached.
  - With I(dpkg_audit), what C(dpkg --audit) says (packages half-installed or broken); with
    I(distro_rocminfo), dpkg's version of the C(rocminfo) package (the distribution's ROCm, read
    when AMD's is absent).
  - Read-only; changes nothing on the host.
options:
  space:
    description:
      - What must fit, each with C(name) (what goes there, for messages), C(path) (where it
        goes) and C(need_gib) (GiB it needs, 0 to only report).
    type: list
    elements: dict
    default: []
  controller_time:
    description:
      - The controller's clock (seconds since the epoch) when the task was sent; 0 skips the offset.
    type: float
    default: 0
  sysfs_root:
    description: Where sysfs is mounted (tests point it at a fixture tree).
    type: path
    default: /sys
  utmp:
    description: The utmp file to read.
    type: path
    default: /run/utmp
  ignore_users:
    description: Accounts whose sessions do not count (a kiosk's automatic login).
    type: list
    elements: str
    default: []
  urls:
    description: The URLs to fetch from the host (small files and index pages).
    type: list
    elements: str
    default: []
  url_timeout:
    description:
      - Seconds each fetch of I(urls) may wait for the network at a time (connecting, each read).
    type: int
    default: 20
  url_deadline:
    description: Seconds each fetch of I(urls) may take in all (connection, headers and body).
    type: int
    default: 60
  fetch_deadline:
    description: Seconds all the fetches of I(urls) may take together.
    type: int
    default: 180
  dpkg_audit:
    description: Run C(dpkg --audit) and return what it says as I(audit).
    type: bool
    default: false
  distro_rocminfo:
    description: Return dpkg's version of the C(rocminfo) package as I(rocminfo_version).
    type: bool
    default: false
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Read what the rollout checks
  rocmlab.rocmlab.rocmlab_preflight:
    space:
      - {name: ROCm, path: /opt/rocm, need_gib: 30}
      - {name: venvs, path: /opt/rocmlab/venvs, need_gib: 15}
    controller_time: "{{ now(utc=true).timestamp() }}"
  register: preflight
"""

RETURN = r"""
space:
  description: One item per file system, with the items of I(space) it holds.
  returned: always
  type: list
  elements: dict
  sample:
    - mount: /
      names: [ROCm, venvs]
      paths: [/opt/rocm, /opt/rocmlab/venvs]
      need_bytes: 48318382080
      free_bytes: 107374182400
      enough: true
clock:
  description: The host's clock, seconds since the epoch.
  returned: always
  type: float
clock_offset:
  description: The host's clock minus I(controller_time), in seconds (null without it).
  returned: always
  type: float
kfd_processes:
  description: The processes with a GPU compute context, with their command name when known.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "command": "python3"}]
in_use:
  description:
    - One sentence per kind of use found (GPU compute processes, logged-in users); empty when
      the host is free.
  returned: always
  type: list
  elements: str
  sample:
    - "GPU compute process running: PID 4242 (python3)"
    - "user logged in: alice on pts/0 from 10.0.0.5 since 2025-01-06T09:12:00+00:00"
rocm_version:
  description:
    - AMD's installed ROCm release - on the Core SDK line the selected core's release
      (C(10.0.0)), on the legacy line the text of C(/opt/rocm/.info/version) (C(6.4.2-120)) -
      null when there is none or a file it reads is refused (not a regular file of root's).
  returned: always
  type: str
  sample: 6.4.2-120
rocm:
  description:
    - What the probe found - C(line) (C(core), C(legacy) or null), C(release) (X.Y.Z),
      C(selected) (the selected core's series), C(mode) (C(auto) or C(manual)), C(cores) (each
      installed core - C(series), C(release), C(package), C(version), C(state), C(path),
      C(selected)), C(legacy) (the legacy release, also on a host that has both lines),
      C(problems) (sentences - both lines installed, a core half-configured, a file refused).
  returned: always
  type: dict
  sample:
    line: core
    release: 10.0.0
    selected: "10.0"
    mode: auto
    cores:
      - {series: "7.14", release: 7.14.0, package: amdrocm-core7.14, version: 7.14.0-1,
         state: installed, path: /opt/rocm/core-7.14, selected: false}
      - {series: "10.0", release: 10.0.0, package: amdrocm-core10.0, version: 10.0.0-1,
         state: installed, path: /opt/rocm/core-10.0, selected: true}
    legacy: null
    problems: []
fetched:
  description:
    - One item per URL of I(urls), in their order, as a loop of M(ansible.builtin.uri) registers
      them - C(item) (the URL), C(status) (the HTTP status; -1 when no answer came) and C(msg).
  returned: always
  type: list
  elements: dict
  sample:
    - {"item": "https://mirror.example/rocm/apt/6.4.2/dists/noble/Release", "status": 200,
       "msg": "OK (312 bytes)"}
audit:
  description:
    - What C(dpkg --audit) said (C(rc), C(stdout_lines), C(stderr_lines)), as a command task
      registers it; null without I(dpkg_audit).
  returned: always
  type: dict
rocminfo_version:
  description:
    - dpkg's version of the installed C(rocminfo) package (C(5.2.3-3)), an empty string when it
      is not installed; null without I(distro_rocminfo).
  returned: always
  type: str
sessions:
  description: The users logged in, as utmp records them.
  returned: always
  type: list
  elements: dict
  sample:
    - {"user": "alice", "line": "pts/0", "host": "10.0.0.5", "pid": 812,
       "since": "2025-01-06T09:12:00+00:00"}
"""

import collections
import datetime
import os
import queue
import struct
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import rocm_installed
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.known_good import rocm_version_of

GIB = 1024**3
# glibc's struct utmp on Linux (bits/utmp.h; 64-bit systems keep the 32-bit layout for
# compatibility): ut_type (short, padded), ut_pid, ut_line[32], ut_id[4], ut_user[32],
# ut_host[256], ut_exit (2 shorts), ut_session, ut_tv (2 int32), ut_addr_v6[4], 20 reserved.
UTMP = struct.Struct("<hxxi32s4s32s256shhiii16s20x")
USER_PROCESS = 7


def existing_parent(path):
    """PATH, or its nearest parent that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and path != "/":
        path = os.path.dirname(path)
    return path


def mount_point(path):
    """The mount point of the file system PATH (which exists) lies on."""
    device = os.stat(path).st_dev
    while path != "/":
        parent = os.path.dirname(path)
        if os.stat(parent).st_dev != device:
            break
        path = parent
    return path


def space_report(items):
    """The file systems the ITEMS' paths lie on, each with what it holds, needs and has free."""
    found = {}
    for item in items:
        where = existing_parent(item["path"])
        device = os.stat(where).st_dev
        if device not in found:
            stats = os.statvfs(where)
            found[device] = {
                "mount": mount_point(where),
                "names": [],
                "paths": [],
                "need_bytes": 0,
                "free_bytes": stats.f_bavail * stats.f_frsize,
            }
        entry = found[device]
        entry["names"].append(item["name"])
        entry["paths"].append(item["path"])
        entry["need_bytes"] += int(float(item.get("need_gib") or 0) * GIB)
    for entry in found.values():
        entry["enough"] = entry["free_bytes"] >= entry["need_bytes"]
    return list(found.values())


def kfd_processes(sysfs_root, proc_root="/proc"):
    """The PIDs listed under class/kfd/kfd/proc, with their command names where readable."""
    directory = os.path.join(sysfs_root, "class", "kfd", "kfd", "proc")
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in sorted(names, key=lambda n: (len(n), n)):
        if not name.isdigit():
            continue
        try:
            with open(
                os.path.join(proc_root, name, "comm"), encoding="utf-8", errors="replace"
            ) as f:
                command = f.read().strip() or None
        except OSError:
            command = None
        found.append({"pid": int(name), "command": command})
    return found


def text(field):
    """A NUL-padded utmp string field as text."""
    return field.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def utmp_sessions(data):
    """Every USER_PROCESS record in the bytes of a utmp file."""
    sessions = []
    for offset in range(0, len(data) - UTMP.size + 1, UTMP.size):
        kind, pid, line, _id, user, host, _term, _exit, _session, seconds, _usec, _addr = (
            UTMP.unpack_from(data, offset)
        )
        if kind != USER_PROCESS or not text(user):
            continue
        since = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat()
        sessions.append(
            {"user": text(user), "line": text(line), "host": text(host), "pid": pid, "since": since}
        )
    return sessions


def ancestors(proc_root="/proc"):
    """This process and its parents, up to init."""
    found, pid = set(), os.getpid()
    while pid > 0 and pid not in found:
        found.add(pid)
        try:
            with open(os.path.join(proc_root, str(pid), "stat"), encoding="utf-8") as f:
                # The command name (2nd field) is in parentheses and may hold spaces.
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return found


def logged_in(utmp, ignore_users, own, proc_root="/proc"):
    """The sessions of UTMP whose process runs, other than OWN (PIDs) and IGNORE_USERS."""
    try:
        with open(utmp, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [
        session
        for session in utmp_sessions(data)
        if session["user"] not in ignore_users
        and session["pid"] not in own
        and os.path.exists(os.path.join(proc_root, str(session["pid"])))
    ]


def in_use(processes, sessions):
    """One sentence per kind of use found: the compute processes, the logged-in users."""
    found = []
    if processes:
        found.append(
            "GPU compute process running: "
            + ", ".join(f"PID {p['pid']} ({p['command'] or 'command unknown'})" for p in processes)
        )
    if sessions:
        found.append(
            "user logged in: "
            + ", ".join(
                f"{s['user']} on {s['line'] or 'no terminal'}"
                + (f" from {s['host']}" if s["host"] else "")
                + f" since {s['since']}"
                for s in sessions
            )
        )
    return found


# The properties of a logind session that say who and where (stable across systemd releases,
# unlike the columns of `loginctl list-sessions`).
LOGIND_PROPERTIES = ("Name", "TTY", "RemoteHost", "Leader", "Class", "State", "Timestamp")


def logind_sessions(run, ignore_users, own):
    """The user sessions logind knows, other than OWN (leader PIDs) and IGNORE_USERS. RUN(argv)
    returns (rc, stdout); an absent or silent logind means none."""
    rc, out = run(["loginctl", "list-sessions", "--no-legend", "--no-pager"])
    if rc != 0:
        return []
    found = []
    for line in out.splitlines():
        session = line.split()[0] if line.split() else ""
        if not session:
            continue
        args = ["loginctl", "show-session", session, "--no-pager"]
        rc, props = run(args + [f"--property={name}" for name in LOGIND_PROPERTIES])
        if rc != 0:
            continue
        info = dict(item.split("=", 1) for item in props.splitlines() if "=" in item)
        leader = int(info.get("Leader") or 0)
        if (
            info.get("Class") != "user"
            or info.get("State") not in ("active", "online")
            or info.get("Name", "") in ignore_users
            or leader in own
        ):
            continue
        found.append(
            {
                "user": info.get("Name", ""),
                "line": info.get("TTY", ""),
                "host": info.get("RemoteHost", ""),
                "pid": leader,
                "since": info.get("Timestamp", ""),
            }
        )
    return found


FETCH_BYTES = 64 * 1024
FETCH_AT_ONCE = 8


def out_of_time(url, deadline, per_host=False, started=True):
    """The answer of a fetch that ran out of time, naming the URL and the deadline."""
    if not per_host:
        msg = f"{url} did not answer in full within {deadline:g} s (url_deadline)"
    else:
        what = "did not answer in full" if started else "was not fetched"
        msg = f"{url} {what}: this host's fetches reached their deadline, {deadline:g} s"
        msg += " (fetch_deadline)"
    return {"item": url, "status": -1, "msg": f"Request failed: {msg}"}


def fetch(url, timeout, deadline):
    """GET URL: {item, status, msg}, as a loop of ansible.builtin.uri registers it (status -1
    when no answer came). Reads at most FETCH_BYTES of the body, and stops reading when DEADLINE
    seconds (the whole fetch: connection, headers and body) have passed; TIMEOUT bounds each
    wait for the network within that."""
    expires = time.monotonic() + deadline
    try:
        with open_url(
            url, method="GET", timeout=min(timeout, deadline), follow_redirects="safe"
        ) as answer:
            status, size = answer.getcode(), 0
            while size < FETCH_BYTES:
                if time.monotonic() >= expires:
                    return out_of_time(url, deadline)
                chunk = answer.read1(FETCH_BYTES - size)  # what one read of the network gives
                if not chunk:
                    break
                size += len(chunk)
            return {"item": url, "status": status, "msg": f"OK ({size} bytes)"}
    except Exception as exc:  # every failure is the answer, never the module's
        status = getattr(exc, "code", None)
        if isinstance(status, int):  # urllib's HTTPError: "HTTP Error 404: Not Found"
            return {"item": url, "status": status, "msg": str(exc)}
        reason = getattr(exc, "reason", None) or exc
        return {"item": url, "status": -1, "msg": f"Request failed: {reason}"}


def fetch_all(urls, timeout, url_deadline, deadline):
    """Each URL fetched, at most FETCH_AT_ONCE at once; the answers in the order of URLS.

    Each fetch must end within URL_DEADLINE seconds, and all of them within DEADLINE: a fetch
    still running then is answered as such (the URL and the deadline named) and left to its
    thread, a daemon that the module's exit ends; a URL not started by then is answered the
    same way. A server that trickles its answer (a byte a second, each within TIMEOUT) holds
    the module no longer than the deadlines.
    """
    answers = [None] * len(urls)
    done = queue.Queue()
    waiting = collections.deque(range(len(urls)))
    running = {}  # index -> when its url_deadline expires
    host_expires = time.monotonic() + deadline

    def run(index):
        done.put((index, fetch(urls[index], timeout, url_deadline)))

    while waiting or running:
        now = time.monotonic()
        while waiting and len(running) < FETCH_AT_ONCE and now < host_expires:
            index = waiting.popleft()
            running[index] = now + url_deadline
            threading.Thread(target=run, args=(index,), daemon=True).start()
        if not running:
            break
        try:
            index, answer = done.get(timeout=max(0.0, min(*running.values(), host_expires) - now))
        except queue.Empty:
            now = time.monotonic()
            for index, expires in list(running.items()):
                if now >= host_expires and host_expires < expires:
                    answers[index] = out_of_time(urls[index], deadline, per_host=True)
                elif now >= expires:
                    answers[index] = out_of_time(urls[index], url_deadline)
                else:
                    continue
                del running[index]
            continue
        if index in running:  # not answered already as expired
            del running[index]
            answers[index] = answer
    for index in waiting:
        answers[index] = out_of_time(urls[index], deadline, per_host=True, started=False)
    return answers


def installed_rocm(root: str = "/") -> tuple[dict, str | None]:
    """(what rocm_installed.probe finds under ROOT, every file root's, as the RETURN's rocm;
    the release as rocm_version reports it, None when a file was refused or nothing is
    installed)."""
    found = rocm_installed.probe(root, owner=0)
    version = None if found["refused"] else rocm_version_of(found)
    return rocm_installed.summary(found), version


def main():
    module = AnsibleModule(
        argument_spec={
            "space": {"type": "list", "elements": "dict", "default": []},
            "controller_time": {"type": "float", "default": 0},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "utmp": {"type": "path", "default": "/run/utmp"},
            "ignore_users": {"type": "list", "elements": "str", "default": []},
            "urls": {"type": "list", "elements": "str", "default": []},
            "url_timeout": {"type": "int", "default": 20},
            "url_deadline": {"type": "int", "default": 60},
            "fetch_deadline": {"type": "int", "default": 180},
            "dpkg_audit": {"type": "bool", "default": False},
            "distro_rocminfo": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    clock = time.time()
    params = module.params
    for name in ("url_timeout", "url_deadline", "fetch_deadline"):
        if params[name] < 1:
            module.fail_json(msg=f"{name}: {params[name]!r}: expected a number of seconds from 1")
    processes = kfd_processes(params["sysfs_root"])
    own, ignore = ancestors(), set(params["ignore_users"])

    def run(argv):
        if module.get_bin_path(argv[0]) is None:
            return 127, ""
        rc, out, _err = module.run_command(argv)
        return rc, out

    sessions = logged_in(params["utmp"], ignore, own)
    seen = {(s["user"], s["line"]) for s in sessions}
    sessions += [s for s in logind_sessions(run, ignore, own) if (s["user"], s["line"]) not in seen]
    for item in params["space"]:
        if not str(item.get("path", "")).startswith("/") or not item.get("name"):
            module.fail_json(msg=f"space: {item!r} needs a name and an absolute path")
    rocm, rocm_version = installed_rocm()
    audit = rocminfo = None
    if params["dpkg_audit"]:
        if module.get_bin_path("dpkg") is None:
            audit = {"rc": 127, "stdout_lines": [], "stderr_lines": ["dpkg: command not found"]}
        else:
            rc, out, err = module.run_command(["dpkg", "--audit"])
            audit = {"rc": rc, "stdout_lines": out.splitlines(), "stderr_lines": err.splitlines()}
    if params["distro_rocminfo"]:
        rc, out = run(["dpkg-query", "--show", "--showformat=${Version}", "rocminfo"])
        rocminfo = out.strip() if rc == 0 else ""
    module.exit_json(
        changed=False,
        clock=clock,
        rocm_version=rocm_version,
        rocm=rocm,
        clock_offset=clock - params["controller_time"] if params["controller_time"] else None,
        space=space_report(params["space"]),
        kfd_processes=processes,
        sessions=sessions,
        in_use=in_use(processes, sessions),
        fetched=fetch_all(
            params["urls"], params["url_timeout"], params["url_deadline"], params["fetch_deadline"]
        ),
        audit=audit,
        rocminfo_version=rocminfo,
    )


if __name__ == "__main__":
    main()
