#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Read, as root, a file that an unprivileged account wrote into its own directory - without
following its links, blocking on its FIFOs or reading past a bound."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_read_report
short_description: Read a file an unprivileged account wrote, refusing links and special files
description:
  - Reads I(path) for a role that runs as root - the smoke job's report and Chrome trace, the
    doctor's findings, the cluster check's reports - where I(path) lies in a directory that the
    unprivileged account I(owner) owns and so controls - it can put a symbolic link, a FIFO, a
    hard link to another file or a huge file where the report belongs.
  - Every directory from C(/) down is opened without following a symbolic link (O_NOFOLLOW,
    relative to the directory before it), and must be owned by root - the one holding the file
    may also be owned by I(owner). The file is opened with O_NOFOLLOW and O_NONBLOCK (a FIFO
    neither blocks nor is read), then checked on the open descriptor - a regular file, owned by
    I(owner), at most I(max_bytes) long - and read to at most I(max_bytes), so a file that grows
    while it is read is refused too.
  - A refusal fails the task, naming the file and why (a link and where it points, a FIFO, a
    file of another owner, its size against the bound); the content of a refused file is never
    returned. A missing file fails too, unless I(missing_ok).
  - Reads only; changes nothing, and runs the same in check mode.
options:
  path:
    description: The file, an absolute path without C(.) or C(..) parts.
    type: str
    required: true
  owner:
    description:
      - The account that wrote the file and may own its directory (a name).
      - C(root) for a report root wrote (the health timer's tier 0) - then the directories and
        the file must all be root's.
    type: str
    required: true
  max_bytes:
    description: The largest file accepted, in bytes.
    type: int
    default: 4194304
  missing_ok:
    description: A missing file is no failure - C(found) is false.
    type: bool
    default: false
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Read the smoke job's report, written by the account that ran it
  rocmlab.rocmlab.rocmlab_read_report:
    path: /var/lib/rocmlab/smoke/report.json
    owner: researcher
    max_bytes: 4194304
    missing_ok: true
  register: report

- name: Keep it on the controller
  rocmlab.rocmlab.rocmlab_write_report:
    dir: "{{ playbook_dir }}/../reports"
    name: "{{ inventory_hostname }}.json"
    content: "{{ report.content }}"
  delegate_to: localhost
  become: false
  when: report.found
"""

RETURN = r"""
found:
  description: Whether the file exists (false only with I(missing_ok)).
  returned: always
  type: bool
content:
  description: The file's content in base64 (empty when it was not found).
  returned: always
  type: str
size:
  description: The file's size in bytes.
  returned: always
  type: int
sha256:
  description: The SHA-256 of the content (empty when it was not found).
  returned: always
  type: str
refused:
  description: Why the file was refused, when it was (the task fails then).
  returned: on refusal
  type: str
"""

import base64
import errno
import hashlib
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

# Reads this much at a time.
CHUNK = 1 << 20
# Kept of a symbolic link's target in a message (the account chose it).
LINK_SHOWN = 200


class Refused(Exception):
    """The file is not the account's own regular file within bounds; the message says why."""


class Missing(Exception):
    """The file, or a directory on its way, does not exist."""


def kind_of(mode: int) -> str:
    """What a file of MODE is, in words."""
    for test, words in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def account_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def shown(text: str) -> str:
    """A value the account chose (a link's target), quoted and bounded for a message."""
    text = text if len(text) <= LINK_SHOWN else text[:LINK_SHOWN] + "..."
    return ascii(text)


def parts_of(path: str) -> list[str]:
    """The names of PATH from / down; refuses a path that is not absolute and normalised."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        raise Refused(f"{path!r} is not an absolute path")
    parts = path.split("/")[1:]
    if not parts or any(part in ("", ".", "..") for part in parts):
        raise Refused(f"{path!r} is not a normalised absolute path (no '.', '..' or '//')")
    return parts


def why_not_opened(exc: OSError, name: str, dir_fd: int) -> Exception:
    """A Refused or Missing for an open of NAME (beneath DIR_FD) that failed with EXC."""
    if exc.errno == errno.ENOENT:
        return Missing("does not exist")
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return Refused(f"cannot be opened ({os.strerror(exc.errno or 0)})")
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            target = "?"
        return Refused(f"is a symbolic link (to {shown(target)}), which root does not follow")
    if exc.errno in (errno.ENXIO, errno.ENOTDIR, errno.ELOOP) or not stat.S_ISREG(st.st_mode):
        return Refused(f"is {kind_of(st.st_mode)}, not a regular file")
    return Refused(f"cannot be opened ({os.strerror(exc.errno or 0)})")


def open_dirs(parts: list[str], owner_uid: int, where: list[str], root_uid: int = 0) -> int:
    """A descriptor of the directory holding the file (PARTS[:-1] beneath /), each step opened
    without following a link and checked: owned by root (or ROOT_UID, the account the tests run
    as), the last one may also be OWNER_UID's. WHERE collects the path walked so far."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts[:-1]):
            where.append(part)
            try:
                nxt = os.open(
                    part,
                    os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                    dir_fd=fd,
                )
            except OSError as exc:
                raise why_not_opened(exc, part, fd) from None
            os.close(fd)
            fd = nxt
            st = os.fstat(fd)
            last = index == len(parts) - 2
            allowed = {0, root_uid, owner_uid} if last else {0, root_uid}
            if st.st_uid not in allowed:
                raise Refused(
                    f"is owned by {account_name(st.st_uid)}, not by root"
                    + (
                        f" or {account_name(owner_uid)}"
                        if last and owner_uid not in (0, root_uid)
                        else ""
                    )
                )
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str, owner_uid: int, max_bytes: int, root_uid: int = 0) -> bytes:
    """The content of PATH, owner OWNER_UID's regular file of at most MAX_BYTES, read without
    following a link anywhere on its path. Raises Refused or Missing, whose message starts with
    the part of the path it is about."""
    where: list[str] = []
    try:
        parts = parts_of(path)
        dir_fd = open_dirs(parts, owner_uid, where, root_uid)
    except (Refused, Missing) as exc:
        raise type(exc)(f"/{'/'.join(where)} {exc}" if where else str(exc)) from None
    try:
        name = parts[-1]
        try:
            fd = os.open(
                name,
                os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            why = why_not_opened(exc, name, dir_fd)
            raise type(why)(f"{path} {why}") from None
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{path} is {kind_of(st.st_mode)}, not a regular file")
        if st.st_uid != owner_uid:
            raise Refused(
                f"{path} belongs to {account_name(st.st_uid)}, not to {account_name(owner_uid)} "
                "who writes it (a hard link to another file?)"
            )
        if st.st_size > max_bytes:
            raise Refused(f"{path} is {st.st_size} bytes, more than the limit of {max_bytes}")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise Refused(f"{path} grew past the limit of {max_bytes} bytes while it was read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "str", "required": True},
            "owner": {"type": "str", "required": True},
            "max_bytes": {"type": "int", "default": 4 * 1024 * 1024},
            "missing_ok": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    result = {"changed": False, "found": False, "content": "", "size": 0, "sha256": ""}
    try:
        account = pwd.getpwnam(params["owner"])
    except KeyError:
        module.fail_json(msg=f"owner: {params['owner']!r} is no account on this host", **result)
    if not 0 < params["max_bytes"] <= 1 << 30:
        module.fail_json(msg=f"max_bytes: {params['max_bytes']} is not from 1 to 1 GiB", **result)
    try:
        content = read_file(params["path"], account.pw_uid, params["max_bytes"])
    except Missing as exc:
        if params["missing_ok"]:
            module.exit_json(**result)
        module.fail_json(msg=f"{exc}.", **result)
    except Refused as exc:
        module.fail_json(
            msg=(
                f"Refused to read {params['path']}, which {params['owner']} writes: {exc}. "
                "Nothing of it was read."
            ),
            refused=str(exc),
            **result,
        )
    module.exit_json(
        **{
            **result,
            "found": True,
            "content": base64.b64encode(content).decode("ascii"),
            "size": len(content),
            "sha256": hashlib.sha256(content).hexdigest(),
        }
    )


if __name__ == "__main__":
    main()
