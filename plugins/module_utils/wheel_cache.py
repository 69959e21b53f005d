# Copyright: rocmlab contributors
# Apache License 2.0
"""The rocmlab wheel, built once per content of the project and kept on the controller.

The smoke job's role installs rocmlab from a wheel built on the controller from the project's
pyproject.toml, README.md and src/ (reproducibly: SOURCE_DATE_EPOCH, no build isolation, no
dependencies). Every run of a playbook that installs it used to build it again, although the
same sources give the same wheel byte for byte. The wheel is kept in a private directory of the
controller's account (``$XDG_CACHE_HOME/rocmlab/wheels``, else ``~/.cache/rocmlab/wheels``),
under the SHA-256 of exactly the files the build reads, and is built only when no wheel of that
digest is there. The action plugin rocmlab_wheel (plugins/action/) calls ``ensure``.

The cache is the controller account's own: its directories must be real directories (not
links), owned by that account and writable by nobody else, or nothing is read from them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

# What the build reads, relative to the project: these files, and every regular file below src/
# except Python's caches and the build's own leftovers.
TOP_FILES = ("pyproject.toml", "README.md")
SOURCE_DIR = "src"
SKIPPED_DIRS = ("__pycache__",)
SKIPPED_SUFFIXES = (".egg-info", ".pyc")
# Wheels of other contents kept besides the newest (a checkout moving between branches).
KEEP = 4
# SOURCE_DATE_EPOCH of the build (1980-01-01, the earliest time a zip file can hold).
EPOCH = "315532800"


class WheelError(Exception):
    """The wheel cannot be built or the cache used; the message says why and what to do."""


def build_inputs(project: Path) -> list[str]:
    """The files the build reads, relative to PROJECT, sorted: TOP_FILES and src/'s regular files
    (links and Python's caches left out)."""
    missing = [name for name in (*TOP_FILES, SOURCE_DIR) if not (project / name).exists()]
    if missing:
        raise WheelError(
            f"{project} is not rocmlab's project: {', '.join(missing)} missing (the wheel is built "
            "from pyproject.toml, README.md and src/ of the collection or checkout)"
        )
    found = list(TOP_FILES)
    for root, dirs, files in os.walk(project / SOURCE_DIR):
        dirs[:] = sorted(
            d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(SKIPPED_SUFFIXES)
        )
        for name in files:
            path = Path(root) / name
            if name.endswith(SKIPPED_SUFFIXES) or not stat.S_ISREG(path.lstat().st_mode):
                continue
            found.append(path.relative_to(project).as_posix())
    return sorted(found)


def source_digest(project: Path, inputs: list[str]) -> str:
    """SHA-256 over the names and contents of INPUTS: it changes when a file is added, removed,
    renamed or edited, and only then."""
    digest = hashlib.sha256()
    for name in inputs:
        content = hashlib.sha256((project / name).read_bytes()).hexdigest()
        digest.update(f"{name}\0{content}\n".encode())
    return digest.hexdigest()


def private_dir(path: Path) -> Path:
    """PATH as a directory of this account only (made with mode 0700 where missing), or WheelError
    naming what is wrong with it."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as err:
        raise WheelError(f"the wheel cache {path} cannot be made: {err.strerror}") from err
    if not stat.S_ISDIR(info.st_mode):
        raise WheelError(f"the wheel cache {path} is not a directory (a link?): remove it")
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise WheelError(
            f"the wheel cache {path} is not this account's own (owner uid {info.st_uid}, mode "
            f"{stat.S_IMODE(info.st_mode):04o}): remove it, or `chmod go-w {path}` if it is yours"
        )
    return path


def cached_wheel(cache: Path, digest: str) -> Path | None:
    """The wheel kept for DIGEST in CACHE, or None: exactly one rocmlab-*.whl, a regular file, in
    a directory of this account's."""
    entry = cache / digest
    try:
        info = entry.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    wheels = [p for p in entry.glob("rocmlab-*.whl") if stat.S_ISREG(p.lstat().st_mode)]
    return wheels[0] if len(wheels) == 1 else None


def build(project: Path, inputs: list[str], cache: Path, digest: str, python: str) -> Path:
    """Build the wheel of INPUTS with PYTHON's pip in a scratch directory of CACHE and move it to
    CACHE/DIGEST (another run that got there first wins; its wheel is the same)."""
    scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        copy = scratch / "project"
        for name in inputs:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(project / name, copy / name)
        out = scratch / "wheel"
        argv = [python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        run = subprocess.run(
            [*argv, "--wheel-dir", str(out), str(copy)],
            capture_output=True,
            text=True,
            env={**os.environ, "SOURCE_DATE_EPOCH": EPOCH},
            check=False,
        )
        wheels = sorted(out.glob("rocmlab-*.whl")) if out.is_dir() else []
        if run.returncode != 0 or len(wheels) != 1:
            tail = (run.stderr or run.stdout).strip()[-1500:]
            raise WheelError(
                f"building the rocmlab wheel with `{python} -m pip wheel` failed (exit "
                f"{run.returncode}): {tail or 'no wheel was written'}. The controller's Python "
                "needs pip and setuptools (the project's build backend)."
            )
        for leftover in out.iterdir():
            if leftover != wheels[0]:
                leftover.unlink()
        try:
            out.rename(cache / digest)
        except OSError as err:
            if cached_wheel(cache, digest) is None:
                raise WheelError(
                    f"the wheel built for {digest[:12]}... cannot be kept as {cache / digest}: "
                    f"{err.strerror} (something else is there, not a wheel of this account's): "
                    f"remove {cache / digest}"
                ) from err
        found = cached_wheel(cache, digest)
        if found is None:
            raise WheelError(f"the wheel built for {digest} is not in {cache / digest}")
        return found
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def prune(cache: Path, keep_digest: str, keep: int = KEEP) -> list[str]:
    """Remove the wheels of other contents but the KEEP newest; returns the digests removed."""
    entries = []
    for entry in cache.iterdir():
        if entry.name == keep_digest or entry.name.startswith("."):
            continue
        info = entry.lstat()
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            entries.append((info.st_mtime, entry))
    removed = []
    for _mtime, entry in sorted(entries, reverse=True)[keep:]:
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    return removed


def default_cache() -> Path:
    """$XDG_CACHE_HOME/rocmlab/wheels, else ~/.cache/rocmlab/wheels."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rocmlab" / "wheels"


def ensure(project: Path, cache: Path, python: str) -> dict:
    """The wheel of PROJECT's current contents: from CACHE when it holds one, else built there.
    Returns wheel (its path), digest, built (whether this call built it) and pruned."""
    inputs = build_inputs(project)
    digest = source_digest(project, inputs)
    cache = private_dir(cache)
    found = cached_wheel(cache, digest)
    built = found is None
    if found is None:
        found = build(project, inputs, cache, digest, python)
    os.utime(found.parent)
    return {"wheel": str(found), "digest": digest, "built": built, "pruned": prune(cache, digest)}
