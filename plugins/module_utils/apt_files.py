# Copyright: rocmlab contributors
# Apache License 2.0
"""Whole apt configuration files: read a file's exact state (bytes, mode, owner, or absence) into
a record, write a file atomically, put a set of files back byte-identical from their records, and
run `apt-get update` and read apt's own error lines.

The module rocmlab_apt_files builds its write -> update -> restore transaction from these; a
record is plain data (Record.to_dict / Record.from_dict), so a rollback to a known-good state can
restore files recorded by another run.

Symbolic links are never followed: a link is recorded as a link (its target text, never what it
points to) only where the caller allows it, and refused otherwise, as is anything that is not a
regular file; a write renames a new file over the path (replacing whatever entry is there, never
writing through it), and a removal unlinks the entry itself.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
import re
import secrets
import signal
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field

# apt's configuration files, keyrings included, are a few kB; a larger file is not one.
MAX_BYTES = 16 * 1024 * 1024
# apt-get update's default command; tests run a script in its place.
APT_UPDATE = ("apt-get", "update", "-q")
# Lines of apt-get update that mean a source could not be used. apt prints "Err:N URL" with the
# reason on the indented line after it; "W: Failed to fetch" (a source that did not answer) and
# "W: GPG error" (a bad signature) leave apt-get's exit status at 0.
APT_FAILURE = re.compile(
    r"^(E:|Err:|W: (Failed to fetch|GPG error|Some index files failed to download"
    r"|The repository .* (is not signed|does not have a Release file)))"
)
MAX_ERROR_LINES = 20
MAX_ERROR_CHARS = 400


class FileRefused(Exception):
    """A path the transaction does not touch: a link, not a regular file, or too big."""


class Interrupted(Exception):
    """A termination signal arrived while files were being changed."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


@dataclass(frozen=True)
class Record:
    """What one path was: absent, a regular file with these bytes, mode and owner, or a
    symbolic link (LINK, its target as written, and its owner)."""

    path: str
    exists: bool
    content: bytes = b""
    mode: int = 0
    uid: int = 0
    gid: int = 0
    link: str | None = None

    def same_as(self, other: Record) -> bool:
        if self.exists != other.exists:
            return False
        return not self.exists or (
            (self.content, self.mode, self.uid, self.gid, self.link)
            == (other.content, other.mode, other.uid, other.gid, other.link)
        )

    def describe(self) -> str:
        if not self.exists:
            return "absent"
        if self.link is not None:
            return f"a symbolic link to {self.link!r}"
        return (
            f"{len(self.content)} bytes, sha256 {hashlib.sha256(self.content).hexdigest()}, "
            f"mode {self.mode:04o}, owner {self.uid}:{self.gid}"
        )

    def to_dict(self) -> dict:
        """JSON-ready: the content in base64, with its SHA-256."""
        data = {"path": self.path, "exists": self.exists}
        if self.link is not None:
            data.update(link=self.link, uid=self.uid, gid=self.gid)
        elif self.exists:
            data.update(
                content=base64.b64encode(self.content).decode("ascii"),
                sha256=hashlib.sha256(self.content).hexdigest(),
                mode=f"{self.mode:04o}",
                uid=self.uid,
                gid=self.gid,
            )
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Record:
        """A record from to_dict's form; ValueError naming the field when it does not hold."""
        path = data.get("path")
        if not isinstance(path, str) or not is_clean_path(path):
            raise ValueError(f"record path {path!r} is not an absolute, normalised path")
        if not data.get("exists"):
            return cls(path, False)
        if data.get("link") is not None:
            link = data["link"]
            if not isinstance(link, str) or not link or "\0" in link:
                raise ValueError(f"record of {path}: link {link!r} is not a link target")
            try:
                return cls(path, True, uid=int(data["uid"]), gid=int(data["gid"]), link=link)
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"record of {path}: {err}") from err
        try:
            content = base64.b64decode(data["content"], validate=True)
            mode = int(data["mode"], 8)
            uid, gid = int(data["uid"]), int(data["gid"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"record of {path}: {err}") from err
        if hashlib.sha256(content).hexdigest() != data.get("sha256"):
            raise ValueError(f"record of {path}: the content does not match its sha256")
        if not 0 <= mode <= 0o7777:
            raise ValueError(f"record of {path}: mode {data['mode']!r} is not a file mode")
        return cls(path, True, content, mode, uid, gid)


def is_clean_path(path: str) -> bool:
    """Absolute, normalised (no ., .., //, trailing /), not the root, no NUL."""
    return (
        path.startswith("/")
        and path != "/"
        and "\0" not in path
        and os.path.normpath(path) == path
        and not path.startswith("//")
    )


def read_record(path: str, links: bool = False) -> Record:
    """The state of PATH, without following a link; FileRefused for a directory, a device or
    FIFO, a file over MAX_BYTES, and a link unless LINKS (then the link itself is recorded)."""
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        return Record(path, False)
    if stat.S_ISLNK(before.st_mode) and links:
        return Record(path, True, uid=before.st_uid, gid=before.st_gid, link=os.readlink(path))
    if stat.S_ISLNK(before.st_mode):
        raise FileRefused(
            f"{path} is a symbolic link (to {os.readlink(path)!r}), not a regular file; links "
            "are neither followed nor replaced"
        )
    if not stat.S_ISREG(before.st_mode):
        raise FileRefused(f"{path} is not a regular file ({kind(before.st_mode)})")
    if before.st_size > MAX_BYTES:
        raise FileRefused(f"{path} holds {before.st_size} bytes, more than an apt file does")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise FileRefused(f"{path} was replaced while it was read")
        content = handle.read(MAX_BYTES + 1)
    if len(content) > MAX_BYTES:
        raise FileRefused(f"{path} grew beyond {MAX_BYTES} bytes while it was read")
    return Record(path, True, content, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


def kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str, content: bytes, mode: int, uid: int, gid: int) -> None:
    """PATH becomes a regular file with CONTENT, MODE and owner UID:GID, or stays as it was.

    The bytes go to a new file created exclusively beside PATH (O_EXCL, mode 0600), owned and
    moded before its content is synced to disk, then renamed over PATH: a crash at any point
    leaves PATH whole, old or new. A link at PATH is replaced, never written through."""
    directory, name = os.path.split(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".rocmlab-new", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
            out.flush()
            os.fchown(out.fileno(), uid, gid)  # before fchmod: chown clears set-id bits
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.rename(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    sync_directory(directory)


def write_link(path: str, target: str, uid: int, gid: int) -> None:
    """PATH becomes a symbolic link to TARGET (owned UID:GID): made beside it under a new name,
    then renamed over it."""
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.rocmlab-new")
    os.symlink(target, temporary)  # fails, rather than following, if the name was taken
    try:
        os.lchown(temporary, uid, gid)
        os.rename(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    sync_directory(directory)


def remove_file(path: str) -> bool:
    """Unlink PATH itself (a link is removed, not its target); False when it was not there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    sync_directory(os.path.dirname(path))
    return True


@dataclass
class Restored:
    """What restore() did: paths back as recorded, paths removed, paths it could not fix."""

    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)


def restore(records: list[Record]) -> Restored:
    """Put every path back as its record says, byte-identical (content, mode, owner), removing
    what was absent; each path is read back and checked against its record. A path that cannot
    be put back is reported with the error and its record, and the others are still restored."""
    done = Restored()
    for record in records:
        try:
            try:
                now = read_record(record.path, links=True)
            except FileRefused:
                now = None  # something else is there now: replace it
            if record.exists:
                if (now is None or not now.same_as(record)) and record.link is not None:
                    write_link(record.path, record.link, record.uid, record.gid)
                elif now is None or not now.same_as(record):
                    write_file(record.path, record.content, record.mode, record.uid, record.gid)
                if not read_record(record.path, links=True).same_as(record):
                    raise OSError(errno.EIO, "it reads back different from its record")
                done.restored.append(record.path)
            elif os.path.lexists(record.path):
                remove_file(record.path)
                done.removed.append(record.path)
        except (OSError, FileRefused) as err:
            done.failed.append({"path": record.path, "error": str(err), "record": record.to_dict()})
    return done


def remove_directories(directories: list[str]) -> tuple[list[str], list[dict]]:
    """rmdir each directory (deepest first) that is still empty: ([removed], [failed])."""
    removed, failed = [], []
    for directory in sorted(directories, key=len, reverse=True):
        try:
            os.rmdir(directory)
            removed.append(directory)
        except FileNotFoundError:
            continue
        except OSError as err:
            failed.append({"path": directory, "error": str(err)})
    return removed, failed


@contextlib.contextmanager
def interruptible():
    """SIGTERM and SIGHUP raise Interrupted inside the block (SIGINT raises KeyboardInterrupt),
    so that a run that is stopped while it changes files can put them back."""

    def stop(signum, _frame):
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def uninterrupted():
    """Termination signals wait until the block (a restore) has finished."""
    sigs = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@dataclass(frozen=True)
class AptRun:
    """One apt-get update: its exit status, its failure lines, whether it ran out of time."""

    rc: int | None
    errors: list[str]
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.errors and not self.timed_out


def apt_errors(*outputs: bytes | str) -> list[str]:
    """apt's lines that say a source cannot be used, from its stdout and stderr in turn; an
    Err: line with its indented reason."""
    lines = [
        line
        for output in outputs
        for line in (
            output.decode("utf-8", "replace") if isinstance(output, bytes) else output
        ).splitlines()
    ]
    found: list[str] = []
    for number, line in enumerate(lines):
        if not APT_FAILURE.match(line):
            continue
        if line.startswith("Err:"):
            for detail in lines[number + 1 :]:
                if not detail[:1].isspace():
                    break
                line = f"{line} {detail.strip()}"
        line = " ".join(line.split())[:MAX_ERROR_CHARS]
        if line not in found:  # apt repeats an Err: line for each try
            found.append(line)
    if len(found) > MAX_ERROR_LINES:
        found = [*found[: MAX_ERROR_LINES - 1], f"(and {len(found) - MAX_ERROR_LINES + 1} more)"]
    return found


def run_apt_update(argv: tuple[str, ...] | list[str], timeout: float) -> AptRun:
    """Run ARGV (apt-get update) without a shell, in the C locale so that its lines parse, in a
    process group of its own that is killed whole when it runs past TIMEOUT seconds or this
    process is interrupted. stdout (the Err: lines) and stderr (E: and W:) are read apart: apt
    writes "Reading package lists..." to stdout without a newline, so merged, its first E: line
    would not start a line."""
    env = dict(os.environ, LC_ALL="C", LANG="C", LANGUAGE="C")
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as err:
        return AptRun(None, [f"E: cannot run {' '.join(argv)}: {err.strerror}"])
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return AptRun(
            proc.returncode,
            [*apt_errors(out, err), f"E: {argv[0]} did not finish within {timeout:g} s"],
            timed_out=True,
        )
    except BaseException:
        kill_group(proc)
        proc.wait()
        raise
    return AptRun(proc.returncode, apt_errors(out, err))


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
