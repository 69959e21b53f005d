#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Write a report a lab machine sent into the controller's reports directory, all or nothing,
without following a link that stands where the report goes."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_write_report
short_description: Keep a host's report on the controller, without following links
description:
  - Writes I(content) (base64, as M(rocmlab.rocmlab.rocmlab_read_report) returns it) to
    I(dir)/I(name), on the controller (a task delegated to localhost).
  - I(dir) is the lab's reports directory, as the admin set it (created when missing). Below it,
    each directory of I(name) is created or opened without following a symbolic link, and the
    file is written to a new temporary file (created exclusively, never through a link) that
    then replaces I(name) in one step - a reader sees the old report or the new one, never half
    of one, and a symbolic link or file planted where the report goes is replaced, never written
    through. A directory standing there is refused.
  - In check mode nothing is written; C(changed) says whether the content would change.
options:
  dir:
    description: The reports directory on the controller (an absolute path).
    type: path
    required: true
  name:
    description:
      - The report's path below I(dir) - names separated by C(/) (an inventory name with a
        suffix), none of them empty, starting with C(.) or holding a control character.
    type: str
    required: true
  content:
    description: The content, base64-encoded.
    type: str
    required: true
  mode:
    description: The report's permissions.
    type: raw
    default: "0644"
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Keep the smoke job's report on the controller
  rocmlab.rocmlab.rocmlab_write_report:
    dir: "{{ rocmlab_reports_dir }}"
    name: "{{ inventory_hostname }}.json"
    content: "{{ report.content }}"
  delegate_to: localhost
  become: false
"""

RETURN = r"""
path:
  description: The report's path.
  returned: always
  type: str
size:
  description: Bytes written.
  returned: always
  type: int
"""

import base64
import binascii
import contextlib
import errno
import os
import re
import secrets
import stat

from ansible.module_utils.basic import AnsibleModule

# A file or directory name: no '/', no control characters, not starting with '.' (no '.', '..',
# and no name of the module's own temporary files).
_NAME = re.compile(r"[^./\x00-\x1f\x7f][^/\x00-\x1f\x7f]{0,254}")


class Refused(Exception):
    """The report cannot go where it was asked to; the message says why."""


def name_parts(name: str) -> list[str]:
    """The directories and file name of NAME, each checked (none empty, '.', '..', starting
    with '.' or holding a control character)."""
    parts = name.split("/") if isinstance(name, str) else []
    if not parts or not all(_NAME.fullmatch(part) for part in parts):
        raise Refused(
            f"name: {name!r} is not a relative path of names separated by '/' (none of them "
            "empty, starting with '.' or holding a control character)"
        )
    return parts


def open_beneath(dir_fd: int, part: str, shown: str) -> int:
    """A descriptor of the directory PART beneath DIR_FD, created (0755) when missing, never
    through a symbolic link."""
    for _attempt in range(2):
        try:
            return os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
            )
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=dir_fd)
        except OSError as exc:
            try:
                mode = os.lstat(part, dir_fd=dir_fd).st_mode
            except OSError:
                mode = 0
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a directory"
            raise Refused(f"{shown} is {what} ({os.strerror(exc.errno or 0)})") from None
    raise Refused(f"{shown} could not be created")


def current(dir_fd: int, leaf: str) -> bytes | None:
    """The content now at LEAF (a regular file, not followed through a link), else None."""
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(leaf, flags, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read()
    finally:
        os.close(fd)


def write_report(top: str, name: str, data: bytes, mode: int, check: bool) -> bool:
    """Put DATA at TOP/NAME as described in the module's documentation; True when it changed
    (or, in CHECK mode, would change)."""
    parts = name_parts(name)
    if not os.path.isabs(top):
        raise Refused(f"dir: {top!r} is not an absolute path")
    if check and not os.path.isdir(top):
        return True
    os.makedirs(top, mode=0o755, exist_ok=True)
    dir_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts[:-1]):
            shown = os.path.join(top, *parts[: index + 1])
            if check:
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
                except OSError:
                    return True
            else:
                nxt = open_beneath(dir_fd, part, shown)
            os.close(dir_fd)
            dir_fd = nxt
        leaf = parts[-1]
        if current(dir_fd, leaf) == data:
            return False
        if check:
            return True
        tmp = f".{leaf}.{secrets.token_hex(6)}.tmp"
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dir_fd,
        )
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fchmod(handle.fileno(), mode)
                os.fsync(handle.fileno())
            os.replace(tmp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            if isinstance(exc, OSError) and exc.errno in (errno.EISDIR, errno.ENOTEMPTY):
                raise Refused(
                    f"{os.path.join(top, name)} is a directory, not a report: move it away"
                ) from None
            raise
        return True
    finally:
        os.close(dir_fd)


def main():
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "content": {"type": "str", "required": True, "no_log": False},
            "mode": {"type": "raw", "default": "0644"},
        },
        supports_check_mode=True,
    )
    params = module.params
    path = os.path.join(params["dir"], params["name"])
    mode = params["mode"]
    if not isinstance(mode, int):
        try:
            mode = int(str(mode), 8)
        except ValueError:
            mode = -1
    if not 0 <= mode <= 0o777:
        module.fail_json(msg=f"mode: {params['mode']!r} is not an octal mode like 0644")
    try:
        data = base64.b64decode(params["content"], validate=True)
    except (binascii.Error, ValueError) as exc:
        module.fail_json(msg=f"content: not base64 ({exc})")
    try:
        changed = write_report(params["dir"], params["name"], data, mode, module.check_mode)
    except Refused as exc:
        module.fail_json(msg=f"The report was not written to {path}: {exc}.", path=path)
    except OSError as exc:
        module.fail_json(msg=f"The report was not written to {path}: {exc}.", path=path)
    module.exit_json(changed=changed, path=path, size=len(data))


if __name__ == "__main__":
    main()
