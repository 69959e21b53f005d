# Copyright: rocmlab contributors
# Apache License 2.0
"""What the lab cache's modules share (lab_cache_fill, lab_cache_bundle, lab_cache_stats,
lab_cache_rocm_wheels).

Root reads and writes in directories that service accounts own (apt-cacher-ng's cache and logs,
nginx's logs) and in bundles carried in from elsewhere: every byte there is hostile. So a path
is walked one component at a time through directory file descriptors, each opened without
following a link (O_NOFOLLOW), files are opened without blocking (a FIFO) and checked to be
regular files on the descriptor that is then read, and files are written under a fresh
temporary name (O_EXCL) in the opened directory and renamed over the final name, which replaces
a planted link instead of writing through it. Ownership is only ever changed on a descriptor
this code opened on something it created (fchown), never by path.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import gzip
import hashlib
import os
import secrets
import stat
import zlib

BLOCK = 1 << 20
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# How deep a tree is walked: apt-cacher-ng's deepest paths are about ten directories down.
MAX_DEPTH = 64
TEMP_PREFIX = ".rocmlab-tmp."


class NotPlain(Exception):
    """A path that is a link, a special file, or another kind than the one asked for; the
    message says what it is ("is a symbolic link, not a regular file")."""


def kind_of(mode):
    """What a file of MODE is, for messages."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "a special file"


def _kind_at(name, dir_fd):
    try:
        return kind_of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return "not what it was a moment ago"


def open_dir(path, dir_fd=None):
    """A descriptor of the directory PATH (relative to DIR_FD), never through a link at PATH
    itself. Raises NotPlain when PATH is a link or no directory, FileNotFoundError when missing."""
    try:
        return os.open(path, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotPlain(f"is {_kind_at(path, dir_fd)}, not a directory") from None
        raise


def open_file(path, dir_fd=None):
    """(descriptor, fstat) of the regular file PATH (relative to DIR_FD), opened without
    following a link and without blocking; NotPlain for anything but a regular file."""
    before = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(before.st_mode):
        raise NotPlain(f"is {kind_of(before.st_mode)}, not a regular file")
    try:
        fd = os.open(path, FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotPlain("is a symbolic link, not a regular file") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotPlain(f"is {kind_of(info.st_mode)}, not a regular file")
    return fd, info


def read_fd(fd, limit):
    """The bytes of FD, at most LIMIT of them; ValueError when there are more."""
    chunks, size = [], 0
    while True:
        chunk = os.read(fd, min(BLOCK, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ValueError(f"is larger than {limit} bytes")


def read_small(path, limit, dir_fd=None):
    """The bytes of the regular file PATH (no link followed), at most LIMIT of them."""
    fd, _unused = open_file(path, dir_fd)
    try:
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def hash_fd(fd):
    """(SHA-256, size) of what FD holds from where it is, read in 1 MiB blocks."""
    digest, size = hashlib.sha256(), 0
    for block in iter(lambda: os.read(fd, BLOCK), b""):
        digest.update(block)
        size += len(block)
    return digest.hexdigest(), size


def tree(dir_fd, skipped=(), prefix="", depth=0):
    """Every entry under the directory DIR_FD, sorted, depth first: (relative path, name, lstat,
    descriptor of its directory, valid while the entry is looked at). Directories are entered
    through descriptors opened without following links; links are reported, never entered.
    Top-level names in SKIPPED are left out. ValueError past MAX_DEPTH directories."""
    if depth > MAX_DEPTH:
        raise ValueError(f"{prefix} lies more than {MAX_DEPTH} directories deep")
    with os.scandir(dir_fd) as listing:
        names = sorted(entry.name for entry in listing)
    for name in names:
        if depth == 0 and name in skipped:
            continue
        rel = f"{prefix}/{name}" if prefix else name
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        yield rel, name, info, dir_fd
        if stat.S_ISDIR(info.st_mode):
            try:
                sub = open_dir(name, dir_fd)
            except (FileNotFoundError, NotPlain):
                # Replaced since it was listed: what it is now is not entered.
                continue
            try:
                yield from tree(sub, (), rel, depth + 1)
            finally:
                os.close(sub)


def open_subdir(top_fd, parts, create=False, owner=None):
    """A descriptor of the directory TOP_FD/PARTS..., walked one component at a time without
    following links; with CREATE, missing components are made (0755, OWNER's when given) and a
    link planted in their place is removed first."""
    fd = os.dup(top_fd)
    try:
        for part in parts:
            nxt = ensure_dir(fd, part, owner) if create else open_dir(part, fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def ensure_dir(dir_fd, name, owner=None):
    """A descriptor of the directory NAME in DIR_FD. Made (0755, and chowned to OWNER = (uid,
    gid) on its own descriptor) when missing; a symbolic link in its place is checked with
    lstat and removed first, never followed; anything else in its place raises NotPlain."""
    for _unused in range(5):
        try:
            return open_dir(name, dir_fd)
        except FileNotFoundError:
            pass
        except NotPlain:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISLNK(info.st_mode):
                raise NotPlain(f"is {kind_of(info.st_mode)} where a directory belongs") from None
            os.unlink(name, dir_fd=dir_fd)
        try:
            os.mkdir(name, 0o755, dir_fd=dir_fd)
        except FileExistsError:
            continue
        fd = open_dir(name, dir_fd)
        try:
            os.fchmod(fd, 0o755)
            if owner:
                os.fchown(fd, *owner)
        except BaseException:
            os.close(fd)
            raise
        return fd
    raise NotPlain("keeps being replaced while it is made")


def replace_with(dir_fd, name, write, owner=None, mode=0o644, mtime_ns=None):
    """Write the file NAME in DIR_FD: WRITE(fd) fills a new file made with O_EXCL under a
    temporary name in the same directory (nothing planted is written through), which is then
    chowned to OWNER on its descriptor and renamed over NAME (a link at NAME is replaced, not
    followed). WRITE may raise to give up: the temporary file is removed. Returns WRITE's value."""
    temp = TEMP_PREFIX + secrets.token_hex(8)
    fd = os.open(
        temp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=dir_fd,
    )
    try:
        try:
            result = write(fd)
            os.fchmod(fd, mode)
            if owner:
                os.fchown(fd, *owner)
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
        finally:
            os.close(fd)
        try:
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except IsADirectoryError:
            raise NotPlain("is a directory where a file belongs") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    return result


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_bytes(dir_fd, name, data, owner=None, mode=0o644):
    """Write DATA as the file NAME in DIR_FD (see replace_with)."""
    replace_with(dir_fd, name, lambda fd: write_all(fd, data), owner=owner, mode=mode)


def copy_fd(src_fd, dst_fd):
    """Copy SRC_FD to DST_FD; returns (SHA-256, size) of the bytes copied."""
    digest, size = hashlib.sha256(), 0
    for block in iter(lambda: os.read(src_fd, BLOCK), b""):
        digest.update(block)
        size += len(block)
        write_all(dst_fd, block)
    return digest.hexdigest(), size


# --- Reading the servers' logs (service accounts write them) ---


class Unreadable(Exception):
    """A log file that cannot be read whole, and why."""


def rotated_logs(path, max_rotated):
    """(PATH's rotated copies (logrotate's .N and .N.gz, the newest MAX_ROTATED, oldest first)
    and PATH, the older copies left out)."""
    if not path:
        return [], []
    rotated = []
    for name in glob.glob(glob.escape(path) + ".*"):
        suffix = name[len(path) + 1 :].removesuffix(".gz")
        if suffix.isascii() and suffix.isdigit():
            rotated.append((int(suffix), name))
    rotated.sort()
    kept = [name for _unused, name in reversed(rotated[:max_rotated])] + [path]
    return kept, [name for _unused, name in rotated[max_rotated:]]


def log_lines(name, max_line, max_bytes):
    """The lines of the log file NAME (gzip when it ends in .gz), each a str; opened without
    following a link or blocking, a regular file only, at most MAX_BYTES read (decompressed).
    Raises Unreadable, after the lines it gave, when the file cannot be read whole (the caller
    then discards them); a line longer than MAX_LINE is given as None, its rest skipped in
    bounded memory. Nothing when NAME does not exist."""
    try:
        fd, info = open_file(name)
    except FileNotFoundError:
        return
    except (NotPlain, OSError) as exc:
        raise Unreadable(str(exc)) from None
    with os.fdopen(fd, "rb") as raw:
        if info.st_size > max_bytes:
            raise Unreadable(f"is {info.st_size} bytes, more than the {max_bytes} read")
        handle = gzip.GzipFile(fileobj=raw, mode="rb") if name.endswith(".gz") else raw
        total = 0
        try:
            while True:
                line = handle.readline(max_line + 1)
                if not line:
                    return
                total += len(line)
                if total > max_bytes:
                    raise Unreadable(f"holds more than the {max_bytes} bytes read")
                if len(line) > max_line and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):
                        line = handle.readline(max_line + 1)
                        total += len(line)
                        if total > max_bytes:
                            raise Unreadable(f"holds more than the {max_bytes} bytes read")
                    yield None
                    continue
                yield line.decode("utf-8", errors="replace")
        except (OSError, EOFError, zlib.error) as exc:
            raise Unreadable(f"cannot be read to its end ({exc or type(exc).__name__})") from None
