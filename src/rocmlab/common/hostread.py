"""Reading a file a host provides: bounded, never blocking, regular files only. Standard library.

A path under /sys, /proc or /etc normally names a regular file, but a tree handed to a command
(``rocmlab doctor --sysfs-root``, a copied machine, a container's mounts) may put a FIFO there,
which blocks a reader forever, or ``/dev/zero``, which never ends. The size in ``stat`` cannot
bound the read: sysfs attributes say 4096 whatever they hold, /proc files say 0. So
:func:`read_bounded` refuses anything that is not a regular file (checked with ``stat`` before
opening, so no device is ever opened, and with ``fstat`` on what was opened, opened with
``O_NONBLOCK`` so that a FIFO swapped in between cannot block), reads at most ``limit`` bytes
and says whether there was more.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class HostRead:
    """What reading a host file gave: ``data`` (None when it was not read) and why not."""

    path: Path
    data: bytes | None
    truncated: bool = False
    error: str = ""
    refused: bool = False  # it exists but is not a regular file

    def text(self) -> str | None:
        """The bytes as text (undecodable bytes become U+FFFD); None when not read."""
        return None if self.data is None else self.data.decode("utf-8", errors="replace")


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def file_kind(mode: int) -> str:
    """``a FIFO``, ``a character device``, ... for a non-regular file's mode."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bounded(path: Path, limit: int) -> HostRead:
    """At most ``limit`` bytes of the regular file ``path`` (links followed).

    Never blocks on a FIFO, never opens a device, never reads more than ``limit`` + 1 bytes.
    """
    try:
        before = os.stat(path)
    except OSError as exc:
        return HostRead(path, None, error=exc.strerror or str(exc))
    if not stat.S_ISREG(before.st_mode):
        why = f"{file_kind(before.st_mode)}, not a regular file"
        return HostRead(path, None, error=why, refused=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        return HostRead(path, None, error=exc.strerror or str(exc))
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            why = f"{file_kind(opened.st_mode)}, not a regular file"
            return HostRead(path, None, error=why, refused=True)
        chunks: list[bytes] = []
        left = limit + 1  # one byte more than the bound says whether there was more
        while left > 0:
            try:
                chunk = os.read(fd, min(left, 64 * KIB))
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                return HostRead(path, None, error=exc.strerror or str(exc))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        return HostRead(path, data[:limit], truncated=True)
    return HostRead(path, data)


def describe_limit(limit: int) -> str:
    """``1 MiB``, ``64 KiB``, ``512 B``."""
    for unit, size in (("MiB", MIB), ("KiB", KIB)):
        if limit >= size and limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit} B"
