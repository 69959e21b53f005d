"""Reading a file a host or another account provides: bounded, never blocking, regular files
only, links followed or not as the caller says. Standard library only. docs/security.md lists
who reads what through it.

A path under /sys, /proc or /etc normally names a regular file, but a tree handed to a command
(``rocmlab doctor --sysfs-root``, a copied machine, a container's mounts) or a directory other
accounts write (fleet-report's REPORTS_DIR) may put a FIFO there, which blocks a reader forever,
``/dev/zero``, which never ends, or a link to a file the reader should not read. The size in
``stat`` cannot bound the read: sysfs attributes say 4096 whatever they hold, /proc files say 0.
So :func:`read_regular`, the one reader:

- refuses anything that is not a regular file, checked with ``stat`` before opening (no device is
  ever opened) and with ``fstat`` on what was opened, opened with ``O_NONBLOCK`` so that a FIFO
  swapped in between cannot block;
- with ``follow_links=False``, looks at the name itself (``lstat``) and opens it with
  ``O_NOFOLLOW``, so a symbolic link is refused, also one made between the look and the open;
- refuses a file replaced by another between the ``stat`` and the open (device and inode differ);
- reads at most ``limit`` + 1 bytes whatever the file claims, so the caller knows whether there
  was more; with ``refuse_larger`` a file whose ``stat`` size is over ``limit`` is not opened;
- with ``single_link``, refuses a file with more than one name (``st_nlink``, on what was
  opened): a hard link planted in a directory others write can name a file they cannot read.

:func:`read_bounded` is that reader for the doctor and the store's port (``HostRead``: the data or
why not, and whether it was cut at the bound); fleet-report's record reader
(rocmlab.fleet.bounded) words the same refusals for its records.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

KIB = 1024
MIB = 1024 * KIB
_CHUNK = 64 * KIB
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int, named_pipe: bool = False) -> str:
    """``a FIFO``, ``a character device``, ``a symbolic link``... for a mode that is not a
    regular file's; ``named_pipe``: ``a FIFO (named pipe)``, for readers who may not know FIFO."""
    for test, name in _KINDS:
        if test(mode):
            return f"{name} (named pipe)" if named_pipe and name == "a FIFO" else name
    return "not a regular file"


class NotRegularFile(Exception):
    """The path exists but is not a regular file; ``mode`` says what it is (a link's own mode
    when links are not followed)."""

    def __init__(self, mode: int) -> None:
        super().__init__(f"{file_kind(mode)}, not a regular file")
        self.mode = mode


class FileTooLarge(Exception):
    """``stat`` says the file holds more than the bound (``size`` bytes)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


class FileReplaced(Exception):
    """What was opened is not the file that was looked at: it was replaced in between."""


class HardLinked(Exception):
    """The file has other names than the one read (``links`` in all): a hard link."""

    def __init__(self, links: int) -> None:
        super().__init__(f"a hard link ({links} names for one file)")
        self.links = links


def read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of ``fd`` (one more than allowed tells a file that is too big),
    read until the end of the file or the bound, never trusting a size the file claims."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        try:
            chunk = os.read(fd, min(left, _CHUNK))
        except BlockingIOError:  # nothing to read now: not a file that ends
            break
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_regular(
    path: Path | str,
    limit: int,
    *,
    dir_fd: int | None = None,
    follow_links: bool = True,
    refuse_larger: bool = False,
    single_link: bool = False,
) -> bytes:
    """At most ``limit`` + 1 bytes of the regular file ``path`` (relative to ``dir_fd`` when
    given). Raises NotRegularFile, FileReplaced, FileTooLarge (only with ``refuse_larger``),
    HardLinked (only with ``single_link``) and the OSError the system gives (FileNotFoundError
    when there is no such name)."""
    before = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow_links)
    if not stat.S_ISREG(before.st_mode):
        raise NotRegularFile(before.st_mode)
    if refuse_larger and before.st_size > limit:
        raise FileTooLarge(before.st_size)
    try:
        fd = os.open(path, _FLAGS if follow_links else _FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:  # made a link after it was looked at
            raise NotRegularFile(stat.S_IFLNK) from None
        raise
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode):
            raise NotRegularFile(now.st_mode)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise FileReplaced("replaced by another file while it was read")
        if single_link and now.st_nlink > 1:
            raise HardLinked(now.st_nlink)
        return read_at_most(fd, limit)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class HostRead:
    """What reading a host file gave: ``data`` (None when it was not read) and why not."""

    path: Path
    data: bytes | None
    truncated: bool = False
    error: str = ""
    refused: bool = False  # it exists but is not a regular file (or was replaced)

    def text(self) -> str | None:
        """The bytes as text (undecodable bytes become U+FFFD); None when not read."""
        return None if self.data is None else self.data.decode("utf-8", errors="replace")


def read_bounded(path: Path, limit: int) -> HostRead:
    """At most ``limit`` bytes of the regular file ``path`` (links followed), the rest cut
    (``truncated``); never blocks on a FIFO, never opens a device."""
    try:
        data = read_regular(path, limit)
    except (NotRegularFile, FileReplaced) as exc:
        return HostRead(path, None, error=str(exc), refused=True)
    except OSError as exc:
        return HostRead(path, None, error=exc.strerror or str(exc))
    if len(data) > limit:
        return HostRead(path, data[:limit], truncated=True)
    return HostRead(path, data)


def describe_limit(limit: int) -> str:
    """``1 MiB``, ``64 KiB``, ``512 B``."""
    for unit, size in (("MiB", MIB), ("KiB", KIB)):
        if limit >= size and limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit} B"
