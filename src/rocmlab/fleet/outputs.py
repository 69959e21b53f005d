"""Writing the fleet report's outputs all together or not at all.

Each output is given as its bytes or as pieces of them, made as they are written (fleet.json
and the JUnit XML of 10,000 hosts are over 100 MB together: they are not held whole). Each is
written to a temporary file that
``tempfile.mkstemp`` creates exclusively (``O_CREAT | O_EXCL``, a random name, mode 0600 until it
is complete), so nothing planted in REPORTS_DIR beforehand (a link named like a temporary file) is
written through. Only when all of them are written and flushed are they renamed over the outputs,
each rename atomic; a rename that fails puts back the outputs already replaced (from hard links
made beforehand). Whatever fails, the temporary files are removed and the previous outputs are
left as they were, and OutputError says what failed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from rocmlab.common.outputs import probe_directory, umask

# An output's content: its bytes, or pieces of them made as they are written.
Output = bytes | Iterable[bytes]


class OutputError(Exception):
    """The outputs could not be written; the previous ones are as they were."""


def _check_destination(directory: Path, name: str) -> None:
    """A destination that a rename cannot replace (a directory) is refused before any write."""
    try:
        mode = os.lstat(directory / name).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "a directory, which the report cannot replace")


def check_destinations(directory: Path, names: Iterable[str]) -> None:
    """Refuse (OutputError), before the report is made, outputs that could not be written: a
    destination a rename cannot replace, a directory this account cannot create files in (a probe
    file is created and removed)."""
    names = list(names)
    for name in names:
        try:
            _check_destination(directory, name)
        except OSError as exc:
            raise OutputError(f"{name}: {exc.strerror or exc}") from None
    try:
        probe_directory(directory, names[0])
    except OSError as exc:
        raise OutputError(f"cannot create files in it ({exc.strerror or exc})") from None


def _write_temporary(directory: Path, name: str, data: Output, mode: int) -> Path:
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    path = Path(temporary)
    try:
        with os.fdopen(fd, "wb") as out:
            if isinstance(data, bytes):
                out.write(data)
            else:
                for piece in data:  # a fault while they are made: no output is replaced
                    out.write(piece)
            out.flush()
            os.fsync(out.fileno())
            os.fchmod(out.fileno(), mode)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def _keep_aside(directory: Path, name: str) -> Path | None:
    """A hard link to the current ``name`` (a file or a link, not followed) under a new random
    name (os.link never overwrites), to put back if a later rename fails; None when the
    filesystem makes no hard links."""
    for _unused in range(8):
        aside = directory / f".{name}.{secrets.token_hex(8)}.old"
        try:
            os.link(directory / name, aside, follow_symlinks=False)
            return aside
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


def write_all(directory: Path, outputs: dict[str, Output]) -> None:
    """Write ``outputs`` (file name: content, or its pieces) into ``directory``: all of them or
    none."""
    mode = 0o666 & ~umask()
    temporaries: dict[str, Path] = {}
    aside: dict[str, Path | None] = {}  # the previous output, where there is one
    replaced: list[str] = []
    failing = ""
    try:
        for name in outputs:
            failing = name
            _check_destination(directory, name)
        for name, data in outputs.items():
            failing = name
            temporaries[name] = _write_temporary(directory, name, data, mode)
        for name in outputs:
            if os.path.lexists(directory / name):
                aside[name] = _keep_aside(directory, name)
        for name in outputs:
            failing = name
            os.replace(temporaries[name], directory / name)
            del temporaries[name]
            replaced.append(name)
        # The renames are done; a directory that cannot be synced changes nothing.
        with contextlib.suppress(OSError):
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except OSError as exc:
        unrestored = _put_back(directory, replaced, aside)
        state = (
            "no output was replaced: the previous ones are as they were"
            if not unrestored
            else f"{', '.join(unrestored)} could not be put back as they were"
        )
        raise OutputError(f"{failing}: {exc.strerror or exc}; {state}") from None
    except BaseException:  # interrupted: the previous outputs back, then stop
        _put_back(directory, replaced, aside)
        raise
    finally:
        for path in [*temporaries.values(), *(p for p in aside.values() if p is not None)]:
            with contextlib.suppress(OSError):
                path.unlink()


def _put_back(directory: Path, replaced: list[str], aside: dict[str, Path | None]) -> list[str]:
    """Undo the renames done: the previous output back, or none where there was none. Returns
    the names that could not be put back (a previous output without a hard link to it)."""
    failed = []
    for name in replaced:
        try:
            if name not in aside:
                os.unlink(directory / name)
            elif aside[name] is not None:
                os.replace(aside.pop(name), directory / name)
            else:
                failed.append(name)
        except OSError:
            failed.append(name)
    return failed
