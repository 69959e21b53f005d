"""Writing a command's output file: whole or not at all. Standard library only.

Each output is written to a temporary file that ``tempfile.mkstemp`` creates exclusively beside it
(``O_CREAT | O_EXCL``, a random name, so nothing planted there beforehand is written through, and
several nodes writing one path on a shared file system never share a temporary file), then renamed
over it: a reader never sees half a file, and a write that fails leaves no temporary file behind.
fleet-report's three outputs, replaced all together or none, are rocmlab.fleet.outputs.
An output's directory is never created: :func:`writable_output` refuses, before any work, a path
that could not be written (exit 2).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rocmlab.common.errors import UsageError


def umask() -> int:
    """This process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def finite(value: Any) -> Any:
    """``value`` with every NaN and infinity (in dicts and lists too) as None: JSON has neither."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite(item) for item in value]
    return value


@contextmanager
def atomic_file(path: Path, mode: int | None = None) -> Iterator[Path]:
    """A temporary path in ``path``'s directory (which must exist: it is never created) to write;
    renamed over ``path`` when the block succeeds, removed when anything fails. ``mode``: the
    file's mode (default what ``open()`` would give under the umask, not mkstemp's 0600)."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~umask() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_file`."""
    with atomic_file(path, mode) as tmp:
        tmp.write_text(text, encoding="utf-8")


def probe_directory(directory: Path, name: str) -> None:
    """Create and remove a file in ``directory`` (named after ``name``), to learn before any work
    whether this account can write there: permissions, a read-only or full file system (for root
    too). OSError when it cannot."""
    handle, probe = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".probe")
    os.close(handle)
    os.unlink(probe)


def writable_output(option: str, path: Path) -> None:
    """Refuse (UsageError, exit 2), before any work, an output FILE that cannot be written: a
    directory, a missing or non-directory parent (never created: a typo must not leave
    directories behind), a directory this account cannot create files in (a probe file is
    created and removed there)."""
    if path.is_dir():
        raise UsageError(
            f"{option} {path}: is a directory; give a file name, e.g. {path / 'report.json'}"
        )
    parent = path.parent
    nearest = next(p for p in (parent, *parent.parents) if p.exists() or p == p.parent)
    if not nearest.is_dir():
        raise UsageError(f"{option} {path}: {nearest} is not a directory")
    if nearest != parent:
        raise UsageError(
            f"{option} {path}: the directory {parent} does not exist (it is not created); give "
            "a file in an existing directory"
        )
    try:
        probe_directory(parent, path.name)
    except OSError as exc:
        raise UsageError(
            f"{option} {path}: cannot write in the directory {parent} ({exc.strerror or exc})"
        ) from None


def staging_directory(option: str, path: Path) -> None:
    """Refuse (UsageError, exit 2), before any work, a directory to fill that could not be: a
    path that is something else, a missing one whose nearest existing ancestor is not a
    directory or cannot be written in (the directory itself is created later, when missing)."""
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"{option} {path}: not a directory (expected a directory, created when missing)"
        )
    nearest = next(p for p in (path, *path.parents) if p.exists() or p == p.parent)
    if not nearest.is_dir():
        raise UsageError(
            f"{option} {path}: {nearest} is not a directory (expected a directory, created when "
            "missing)"
        )
    try:
        probe_directory(nearest, path.name or "staging")
    except OSError as exc:
        raise UsageError(
            f"{option} {path}: cannot write in the directory {nearest} ({exc.strerror or exc})"
        ) from None
