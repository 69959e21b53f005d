"""Writing a command's output file: whole or not at all. Standard library only.

Each output is written to a temporary file that ``tempfile.mkstemp`` creates exclusively beside it
(``O_CREAT | O_EXCL``, a random name, so nothing planted there beforehand is written through, and
several nodes writing one path on a shared file system never share a temporary file), then renamed
over it: a reader never sees half a file, and a write that fails leaves no temporary file behind.
fleet-report's three outputs, replaced all together or none, are rocmlab.fleet.outputs.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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
def atomic_file(path: Path, mode: int | None = None, make_parents: bool = False) -> Iterator[Path]:
    """A temporary path in ``path``'s directory to write; renamed over ``path`` when the block
    succeeds, removed when anything fails. ``mode``: the file's mode (default what ``open()``
    would give under the umask, not mkstemp's 0600). ``make_parents``: create the directory
    when it is missing (else it must exist)."""
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
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


def write_atomic(
    path: Path, text: str, mode: int | None = None, make_parents: bool = False
) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_file`."""
    with atomic_file(path, mode, make_parents) as tmp:
        tmp.write_text(text, encoding="utf-8")


def probe_directory(directory: Path, name: str) -> None:
    """Create and remove a file in ``directory`` (named after ``name``), to learn before any work
    whether this account can write there: permissions, a read-only or full file system (for root
    too). OSError when it cannot."""
    handle, probe = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".probe")
    os.close(handle)
    os.unlink(probe)
