# Copyright: rocmlab contributors
# Apache License 2.0
"""The frameworks' venvs in a rollback: a venv the known-good record froze is kept side by side
before a run alters it, until the health gate passes again, and a rollback puts that copy back.

The kept copy of VENV is its sibling ``.<name>.rocmlab-kept`` (same directory, so the same file
system): made as a hard-link copy (``cp -al``: new directories, owned and moded as before, whose
files are the venv's own inodes), so it costs no room until pip replaces a file - pip unlinks
every file before it writes it again (its wheel installer and distlib's script writer), so the
copy keeps the old bytes, and the venv stays where it is, working, while pip runs. A kept torch
venv costs what the replaced torch weighs (GBs) until the gate passes (the copy is then removed)
or a rollback puts it back.

Each step leaves the host with a working venv whenever it stops:
- keep: the copy is made under ``.<name>.rocmlab-keeping`` and renamed to the kept name once
  complete (a stopped copy is removed by the next step that finds it); the venv is not touched.
- restore: the venv and its kept copy are exchanged in one rename (renameat2 RENAME_EXCHANGE);
  the changed venv, now under the kept name, is renamed to ``.<name>.rocmlab-trash`` and removed.
  Where the file system cannot exchange, the venv is renamed to the trash name and the copy into
  its place: a host stopped in between has the copy under the kept name and no venv, and the
  next restore (or keep) renames the copy into place first.
- release (the gate passed): the copy is renamed to the trash name, then removed.

The policy - what to do with each venv given the record's freeze, the venv's freeze now and the
kept copy's - is pure (keep_decision, restore_plan) and tested over its cases; the modules
rocmlab_venv_keep and rocmlab_rollback_plan read the host and act on it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import shutil

KEPT, KEEPING, TRASH = ".rocmlab-kept", ".rocmlab-keeping", ".rocmlab-trash"
# A freeze read back from a host: at most this many lines of at most this many characters (a
# torch venv has about 30 lines; a lab venv a few hundred).
MAX_LINES = 5000
MAX_LINE = 1000
_PRINTABLE = re.compile(r"[\x20-\x7e]+")
# How many differing lines a message names.
SHOWN = 12


def kept_path(venv: str) -> str:
    return _sibling(venv, KEPT)


def keeping_path(venv: str) -> str:
    return _sibling(venv, KEEPING)


def trash_path(venv: str) -> str:
    return _sibling(venv, TRASH)


def _sibling(venv: str, suffix: str) -> str:
    check_venv_path(venv)
    parent, name = os.path.split(venv)
    return os.path.join(parent, f".{name}{suffix}")


def check_venv_path(venv) -> str:
    """VENV when it is an absolute, normalized path below / whose name is not one of ours;
    ValueError saying what is wrong."""
    if not isinstance(venv, str) or not venv.startswith("/") or "\0" in venv:
        raise ValueError(f"venv path {venv!r} is not an absolute path")
    if os.path.normpath(venv) != venv or venv == "/" or "\n" in venv:
        raise ValueError(f"venv path {venv!r} is not a normalized path below /")
    name = os.path.basename(venv)
    if name.startswith(".") and name.endswith((KEPT, KEEPING, TRASH)):
        raise ValueError(f"venv path {venv!r} is a kept copy's name, not a venv's")
    return venv


def parse_freeze(text: str, venv: str) -> list[str]:
    """`pip freeze --all` output read back from a host: sorted requirement lines, comments and
    blank lines dropped, bounded and printable; ValueError naming VENV and the line otherwise.
    The one reading of a freeze: the known-good record's (module rocmlab_known_good) and the
    rollback's comparisons both come through freeze() below."""
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > MAX_LINE:
            raise ValueError(
                f"pip freeze in {venv}: line {number} is over {MAX_LINE} characters"
                f" ({line[:60]!r}...)"
            )
        if not _PRINTABLE.fullmatch(line):
            raise ValueError(
                f"pip freeze in {venv}: line {number} holds characters outside printable ASCII"
                f" ({line[:60]!r})"
            )
        lines.append(line)
        if len(lines) > MAX_LINES:
            raise ValueError(f"pip freeze in {venv}: over {MAX_LINES} requirement lines")
    return sorted(lines)


def recorded_venvs(record: dict | None) -> dict[str, list[str]]:
    """The venvs a known-good record (known_good.load) froze: path -> its sorted freeze lines;
    ValueError naming what is wrong (a bad path, a freeze that is not a list of lines)."""
    venvs = (record or {}).get("venvs") or {}
    found = {}
    for venv in sorted(venvs):
        check_venv_path(venv)
        frozen = venvs[venv]
        if not isinstance(frozen, list) or not all(isinstance(line, str) for line in frozen):
            raise ValueError(f"the record's freeze of {venv} is not a list of lines")
        found[venv] = sorted(frozen)
    return found


def _listed(lines: list[str]) -> str:
    shown = ", ".join(lines[:SHOWN])
    return shown + (f" and {len(lines) - SHOWN} more" if len(lines) > SHOWN else "")


def differs(recorded: list[str], now: list[str] | None) -> str:
    """What differs between the record's freeze and the venv's now, in words."""
    if now is None:
        return "the venv is missing"
    gone = sorted(set(recorded) - set(now))
    new = sorted(set(now) - set(recorded))
    parts = []
    if gone:
        parts.append(f"the record has {_listed(gone)}")
    if new:
        parts.append(f"the venv has {_listed(new)} instead")
    return "; ".join(parts) or "the same lines"


def keep_decision(recorded: list[str] | None, now: list[str] | None, kept: list[str] | None):
    """What to do before a run alters a venv: (action, why).

    recorded: the venv's freeze in the known-good record (None: the record has not frozen it).
    now: its freeze now (None: there is no venv yet). kept: its kept copy's (None: none).

    keep: copy it aside (a kept copy of another freeze, left by an older change, is replaced);
    none: nothing to keep (not in the record, no venv, or a kept copy of the record's freeze is
    there already); stale: the venv already differs from the record and no kept copy has the
    record's freeze - nothing worth keeping; a rollback will have to rebuild it.
    """
    if recorded is None:
        return "none", "the known-good record has not frozen this venv"
    if kept is not None and kept == recorded:
        return "none", "its kept copy has the known-good freeze already"
    if now is None:
        return "none", "there is no venv to keep"
    if now == recorded:
        replaced = " (replacing an older kept copy of another freeze)" if kept is not None else ""
        return "keep", f"it has the known-good freeze{replaced}"
    return "stale", f"it differs from the known-good record already: {differs(recorded, now)}"


def pinned(lines: list[str]) -> tuple[list[str], list[str]]:
    """The record's lines pip can install again by name and version (``name==version``), and the
    others (a file or URL: ``name @ file:///...``, ``-e ...``)."""
    exact = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9!+._-]+")
    good = [line for line in lines if exact.fullmatch(line)]
    return good, [line for line in lines if line not in good]


def fix_command(venv: str, recorded: list[str]) -> str:
    """The command that puts the recorded freeze back into VENV (what the message names)."""
    good, others = pinned(recorded)
    command = f"{venv}/bin/python -m pip install --no-deps " + " ".join(
        f"'{line}'" for line in good
    )
    if others:
        command += f" (and, from where they came, {_listed(others)})"
    return command


def restore_plan(
    recorded: dict[str, list[str]],
    now: dict[str, list[str] | None],
    kept: dict[str, list[str] | None],
) -> list[dict]:
    """For each venv the record froze: {path, action, why} - in_state (its freeze is the
    record's), restore (its kept copy has the record's freeze: put back in place) or fail (no
    copy to put back: the message names the venv, what differs and the command that fixes it).
    now / kept: each venv's freeze now and its kept copy's (None: absent)."""
    plan = []
    for path in sorted(recorded):
        want, have, copy = recorded[path], now.get(path), kept.get(path)
        if have == want:
            plan.append({"path": path, "action": "in_state", "why": "its freeze is the record's"})
        elif copy == want:
            plan.append(
                {
                    "path": path,
                    "action": "restore",
                    "why": f"its kept copy {kept_path(path)} has the recorded freeze"
                    f" ({differs(want, have)})",
                }
            )
        else:
            found = (
                "no kept copy"
                if copy is None
                else f"a kept copy of another freeze ({differs(want, copy)})"
            )
            plan.append(
                {
                    "path": path,
                    "action": "fail",
                    "why": (
                        f"{path} differs from its known-good freeze: {differs(want, have)}; there"
                        f" is {found} to put back. With the lab's pip sources (the role's index"
                        f" and wheelhouse settings), run: {fix_command(path, want)}"
                    ),
                }
            )
    return plan


# --- acting on the host (root, in the modules) -------------------------------------------------

FREEZE_TIMEOUT = 120
# pip runs with this environment only: nothing of the caller's (PYTHON*, PIP_*) reaches it.
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}


def freeze(run, venv: str) -> list[str] | None:
    """VENV's `pip freeze --all` (parse_freeze), None when there is no such directory; ValueError
    when the venv, its bin/ or its Python is not root's (its pip is not run as root) or pip fails.
    RUN(argv, environ) -> (rc, out, err)."""
    if not os.path.isdir(venv):
        return None
    for path in (venv, os.path.join(venv, "bin")):
        if os.lstat(path).st_uid != 0:
            raise ValueError(f"{path} is not root's; its pip is not run as root")
    python = os.path.join(venv, "bin", "python")
    if os.stat(python).st_uid != 0:
        raise ValueError(f"{python} does not belong to root; it is not run as root")
    rc, out, err = run(
        ["/usr/bin/timeout", str(FREEZE_TIMEOUT), python, "-I", "-m", "pip", "freeze", "--all"],
        CLEAN_ENV,
    )
    if rc != 0:
        raise ValueError(f"pip freeze in {venv} failed (exit {rc}): {err.strip()[-400:]}")
    return parse_freeze(out, venv)


def check_parent(venv: str) -> None:
    """The venv's directory must be root's and writable by root alone: its kept copy lives there."""
    parent = os.path.dirname(venv)
    info = os.lstat(parent)
    if not (info.st_mode & 0o170000 == 0o040000 and info.st_uid == 0 and not info.st_mode & 0o022):
        raise ValueError(
            f"{parent} (where {venv} and its kept copy live) is not a directory of root's"
            " writable by root alone"
        )


def is_root_dir(path: str) -> bool | None:
    """True: a directory of root's (never a link); None: absent; ValueError: anything else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if info.st_mode & 0o170000 != 0o040000 or info.st_uid != 0:
        raise ValueError(f"{path} is not a directory of root's; rocmlab leaves it alone")
    return True


def remove_tree(path: str) -> None:
    """Remove one of our own names (a kept, keeping or trash copy) when it is root's directory."""
    if is_root_dir(path):
        shutil.rmtree(path)


def discard(path: str, venv: str) -> None:
    """Rename PATH (a kept copy, or a changed venv) to VENV's trash name, then remove it."""
    trash = trash_path(venv)
    remove_tree(trash)
    os.rename(path, trash)
    shutil.rmtree(trash)


def host_freezes(recorded: dict[str, list[str]], freeze) -> tuple[dict, dict]:
    """(each recorded venv's freeze now, its kept copy's where the venv differs from the record)
    for restore_plan. FREEZE(path) -> lines or None (absent); a kept copy whose freeze cannot be
    read stands as one comment line saying why (never a record's freeze)."""
    now = {venv: readable_freeze(venv, freeze, "venv") for venv in sorted(recorded)}
    kept = {}
    for venv in sorted(recorded):
        if now[venv] != recorded[venv]:
            kept[venv] = kept_freeze(venv, freeze)
    return now, kept


def readable_freeze(path: str, freeze, what: str) -> list[str] | None:
    """FREEZE(PATH), or - when it cannot be read (a venv half made, its Python gone, not root's) -
    one comment line saying why, which differs from every freeze (parse_freeze drops comments)."""
    try:
        return freeze(path)
    except (ValueError, OSError) as err:
        return [f"# unreadable {what}: {str(err)[:200]}"]


def kept_freeze(venv: str, freeze) -> list[str] | None:
    """VENV's kept copy's freeze, None without one (see host_freezes)."""
    copy = kept_path(venv)
    if not is_root_dir(copy):
        return None
    return readable_freeze(copy, freeze, "kept copy")


def make_kept_copy(venv: str, run) -> None:
    """Copy VENV to its kept name as hard links (cp -al), through the keeping name.
    RUN(argv) -> (rc, out, err) runs a command."""
    keeping, kept = keeping_path(venv), kept_path(venv)
    remove_tree(keeping)
    rc, _out, err = run(["cp", "-a", "-l", "--", venv, keeping])
    if rc != 0:
        remove_tree(keeping)
        raise OSError(f"cp -al {venv} {keeping} failed (exit {rc}): {err.strip()[-300:]}")
    if is_root_dir(kept):
        discard(kept, venv)
    os.rename(keeping, kept)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(first: str, second: str) -> bool:
    """Swap two paths in one rename (renameat2 RENAME_EXCHANGE): True, or False when this
    system or file system cannot (the caller renames twice); OSError otherwise."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int
    result = renameat2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), first)


def put_back(venv: str) -> None:
    """Put VENV's kept copy in its place, and remove the venv it replaces."""
    kept = kept_path(venv)
    if not is_root_dir(kept):
        raise ValueError(f"{venv} has no kept copy at {kept}")
    if is_root_dir(venv) is None:
        os.rename(kept, venv)  # a restore stopped between its two renames
        return
    try:
        swapped = exchange(venv, kept)
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
        raise ValueError(
            f"{venv} cannot be renamed on its file system ({err.strerror}: a directory of an"
            f" image's lower layer?); its known-good copy is {kept}: move it into place by hand"
        ) from err
    if swapped:
        discard(kept, venv)  # the changed venv, now under the kept name
        return
    trash = trash_path(venv)
    remove_tree(trash)
    os.rename(venv, trash)
    os.rename(kept, venv)
    shutil.rmtree(trash)


def release_all(venvs, check_mode: bool = False) -> list[str]:
    """Release the kept copies of VENVS (each checked first); the venvs that had any, in order.
    In check mode nothing is removed."""
    released = []
    for venv in sorted(set(venvs)):
        check_venv_path(venv)
        names = (kept_path(venv), keeping_path(venv), trash_path(venv))
        if not any(is_root_dir(name) for name in names):
            continue
        released.append(venv)
        if not check_mode:
            release(venv)
    return released


def release(venv: str) -> bool:
    """Remove VENV's kept copy and anything a stopped step left; True when there was any."""
    found = False
    for path in (kept_path(venv), keeping_path(venv), trash_path(venv)):
        if is_root_dir(path):
            found = True
            if path == kept_path(venv):
                discard(path, venv)
            else:
                shutil.rmtree(path)
    return found
