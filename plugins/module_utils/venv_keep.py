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
- rebuild (no kept copy has the record's freeze): a new venv is made under
  ``.<name>.rocmlab-rebuild`` from the record's freeze alone (``pip install --no-deps`` of its
  exact pins, from the lab's pip sources; a wheel of rocmlab's wheel directory from that file),
  its scripts made to name the venv's path, and its own freeze compared with the record's; only
  when they are equal is it exchanged with the venv as a kept copy is (one rename). Otherwise the
  new directory is removed and the venv left as it was.
- release (the gate passed): the copy is renamed to the trash name, then removed.

The policy - what to do with each venv given the record's freeze, the venv's freeze now and the
kept copy's (put the copy back, rebuild, or refuse), and the pip command line of a rebuild - is
pure (keep_decision, restore_plan, rebuild_requirements, pip_argv) and tested over its cases; the
modules rocmlab_venv_keep and rocmlab_rollback_plan read the host and act on it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import shutil
from urllib.parse import urlsplit

from ansible_collections.rocmlab.rocmlab.plugins.module_utils.known_good import read_root_file

KEPT, KEEPING, TRASH = ".rocmlab-kept", ".rocmlab-keeping", ".rocmlab-trash"
REBUILD = ".rocmlab-rebuild"
# Where the smoke job puts rocmlab's wheels on the host (role smoke_test, __smoke_test_wheel_dir):
# a record's "NAME @ file://..." line is rebuilt from there, and from nowhere else.
WHEEL_DIR = "/opt/rocmlab/wheels"
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


def rebuild_path(venv: str) -> str:
    return _sibling(venv, REBUILD)


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
    if name.startswith(".") and name.endswith((KEPT, KEEPING, TRASH, REBUILD)):
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


_PINNED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9!+._-]+")
# pip 23.1 and later add the wheel's hash, which pip then checks again on the rebuild.
_FILE_LINE = re.compile(
    r"([A-Za-z0-9][A-Za-z0-9._-]*) @ file://(/[A-Za-z0-9/+._-]+)(#sha256=[0-9a-f]{64})?"
)
# A wheel's file name: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl.
_WHEEL_FILE = re.compile(
    r"([A-Za-z0-9][A-Za-z0-9._]*)-[A-Za-z0-9!+._]+(-[0-9][A-Za-z0-9._]*)?"
    r"-[A-Za-z0-9._]+-[A-Za-z0-9._]+-[A-Za-z0-9._]+\.whl"
)


def pinned(lines: list[str]) -> tuple[list[str], list[str]]:
    """The record's lines pip can install again by name and version (``name==version``), and the
    others (a file or URL: ``name @ file:///...``, ``-e ...``)."""
    good = [line for line in lines if _PINNED.fullmatch(line)]
    return good, [line for line in lines if line not in good]


def _project(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def rebuild_requirements(
    lines: list[str], wheel_dir: str = WHEEL_DIR
) -> tuple[list[str], list[str]]:
    """(the requirements a rebuild hands pip, one per line of the record's freeze; the lines it
    refuses, each with why). Taken: ``name==version`` (an exact pin), and ``name @
    file:///WHEEL_DIR/<wheel of that name>.whl`` with or without ``#sha256=<hash>`` (rocmlab's
    own wheel, where the smoke job put it). Refused: anything else - an editable install, a URL,
    a file elsewhere, a line that is not a requirement. No line ever reaches a shell; every one
    taken starts with a letter or digit, so none reads as an option of pip's."""
    taken, refused = [], []
    for line in lines:
        if _PINNED.fullmatch(line):
            taken.append(line)
            continue
        found = _FILE_LINE.fullmatch(line)
        path = found.group(2) if found else ""
        wheel = _WHEEL_FILE.fullmatch(os.path.basename(path)) if found else None
        if not found:
            refused.append(f"{line!r} (not name==version, nor a wheel of {wheel_dir})")
        elif os.path.normpath(path) != path or os.path.dirname(path) != wheel_dir:
            refused.append(f"{line!r} (a file outside {wheel_dir})")
        elif not wheel or _project(wheel.group(1)) != _project(found.group(1)):
            refused.append(f"{line!r} (not a wheel of {found.group(1)})")
        else:
            taken.append(line)
    return taken, refused


def index_for(recorded: list[str], index_url: str, base_url: str) -> str:
    """The index a rebuild reads. PyTorch's index serves one ROCm release's builds (BASE/rocmX.Y,
    the one the configured release picks), and a torch from it carries that name as its local
    version (torch==2.9.1+rocm6.4 came from BASE/rocm6.4): when INDEX_URL is one of BASE_URL's,
    the recorded torch's own. Otherwise INDEX_URL as it is."""
    base = base_url.rstrip("/")
    if not base or not index_url.startswith(base + "/"):
        return index_url
    for line in recorded:
        name, sep, version = line.partition("==")
        local = version.partition("+")[2]
        if sep and name.lower() == "torch" and re.fullmatch(r"rocm[0-9][0-9.]*", local):
            return f"{base}/{local}"
    return index_url


def pip_argv(python: str, sources: dict, recorded: list[str], requirements: list[str]) -> list:
    """pip install's command line of a rebuild into the venv of PYTHON: SOURCES as the role's
    own install reads them (index_url, no_index, find_links, the plain-http hosts trusted as it
    trusts them, extra_args; index_base_url for index_for), --no-deps (the record lists every
    distribution, each pinned), then the requirements."""
    index = index_for(recorded, sources.get("index_url") or "", sources.get("index_base_url") or "")
    links = sources.get("find_links") or ""
    argv = [python, "-I", "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    argv += ["--no-deps", "--retries", "5", "--timeout", "60"]
    if index:
        argv += ["--index-url", index]
    if sources.get("no_index"):
        argv.append("--no-index")
    if links:
        argv += ["--find-links", links]
    hosts = {urlsplit(url).hostname for url in (index, links) if url.startswith("http://")}
    for name in sorted(host for host in hosts if host):
        argv += ["--trusted-host", name]
    return argv + list(sources.get("extra_args") or []) + list(requirements)


def mask(text: str) -> str:
    """TEXT with the credentials of any URL in it masked."""
    return re.sub(r"://[^/@\s]*@", "://***@", text)


def fix_command(venv: str, recorded: list[str]) -> str:
    """The command that puts the recorded freeze back into VENV (what the message names)."""
    good, others = pinned(recorded)
    command = f"{venv}/bin/python -m pip install --no-deps " + " ".join(
        f"'{line}'" for line in good
    )
    if others:
        command += f" (and, from where they came, {_listed(others)})"
    return command


def _fix(path: str, want: list[str]) -> str:
    return (
        "With the lab's pip sources (the role's index and wheelhouse settings), run:"
        f" {fix_command(path, want)}"
    )


def restore_plan(
    recorded: dict[str, list[str]],
    now: dict[str, list[str] | None],
    kept: dict[str, list[str] | None],
    wheel_dir: str = WHEEL_DIR,
) -> list[dict]:
    """For each venv the record froze: {path, action, why} - in_state (its freeze is the
    record's), restore (its kept copy has the record's freeze: put back in place), rebuild (no
    such copy, and every line of the record's freeze is one rebuild_requirements takes: a new
    venv is made from the freeze and swapped in) or fail (neither: the message names the venv,
    what differs, the lines no rebuild takes and the command that fixes it).
    now / kept: each venv's freeze now and its kept copy's (None: absent)."""
    plan = []
    for path in sorted(recorded):
        want, have, copy = recorded[path], now.get(path), kept.get(path)
        if have == want:
            plan.append({"path": path, "action": "in_state", "why": "its freeze is the record's"})
            continue
        if copy == want:
            plan.append(
                {
                    "path": path,
                    "action": "restore",
                    "why": f"its kept copy {kept_path(path)} has the recorded freeze"
                    f" ({differs(want, have)})",
                }
            )
            continue
        found = (
            "no kept copy"
            if copy is None
            else f"a kept copy of another freeze ({differs(want, copy)})"
        )
        _taken, refused = rebuild_requirements(want, wheel_dir)
        if not refused:
            plan.append(
                {
                    "path": path,
                    "action": "rebuild",
                    "why": f"{differs(want, have)}; there is {found} to put back: rebuilt from its"
                    f" recorded freeze ({len(want)} distributions) in {rebuild_path(path)}, then"
                    " put in its place",
                }
            )
            continue
        plan.append(
            {
                "path": path,
                "action": "fail",
                "why": (
                    f"{path} differs from its known-good freeze: {differs(want, have)}; there"
                    f" is {found} to put back, and it cannot be rebuilt from the record's freeze,"
                    f" which holds {_listed(refused)}. {_fix(path, want)}"
                ),
            }
        )
    return plan


def rebuild_failed(venv: str, recorded: list[str], now: list[str] | None, reason: str) -> str:
    """The message of a rebuild that could not reach the record's freeze (the venv as it was)."""
    return mask(
        f"{venv} differs from its known-good freeze: {differs(recorded, now)}; there is no kept"
        f" copy to put back, and rebuilding it from the record's freeze failed: {reason}."
        f" {venv} is left as it was. {_fix(venv, recorded)}"
    )


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
    swap_in(venv, kept, "its known-good copy")


def swap_in(venv: str, source: str, what: str) -> None:
    """Put SOURCE (a kept copy, a rebuilt venv: WHAT, for the message) in VENV's place in one
    rename, and remove the venv it replaces; with no venv there (a restore stopped between its
    two renames, a venv removed) SOURCE is renamed into place."""
    if is_root_dir(venv) is None:
        os.rename(source, venv)
        return
    try:
        swapped = exchange(venv, source)
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
        raise ValueError(
            f"{venv} cannot be renamed on its file system ({err.strerror}: a directory of an"
            f" image's lower layer?); {what} is {source}: move it into place by hand"
        ) from err
    if swapped:
        discard(source, venv)  # the changed venv, now under SOURCE's name
        return
    trash = trash_path(venv)
    remove_tree(trash)
    os.rename(venv, trash)
    os.rename(source, venv)
    shutil.rmtree(trash)


# --- a rebuild from the record's freeze ------------------------------------------------------

# A rebuild's pip runs at most this long (a torch wheel from a slow index takes minutes).
REBUILD_TIMEOUT = 3600
# Files of a venv's bin/ (its scripts, the activate scripts) larger than this are not scripts.
MAX_SCRIPT = 1024 * 1024
_BLOCK = re.compile(r"^# BEGIN rocmlab: .*?^# END rocmlab: [^\n]*\n?", re.M | re.S)


def rocmlab_blocks(text: str) -> str:
    """The blocks rocmlab's roles add to a venv's bin/activate (``# BEGIN rocmlab: ...`` to
    ``# END rocmlab: ...``, as role framework_venv's blockinfile writes them), in order."""
    return "".join(
        block if block.endswith("\n") else block + "\n" for block in _BLOCK.findall(text)
    )


class RebuildFailed(ValueError):
    """A rebuild that could not reach the record's freeze; the venv is as it was."""


def rebuild(venv: str, recorded: list[str], sources: dict, run, wheel_dir: str = WHEEL_DIR):
    """Make VENV anew from the record's freeze RECORDED beside it (rebuild_path), and put it in
    VENV's place once its freeze is the record's; RebuildFailed (the new directory removed, VENV
    untouched) when it is not, or a step fails. SOURCES: pip_argv's, and python (the interpreter
    the venv is made from, the role's). RUN(argv, environ) -> (rc, out, err)."""
    check_venv_path(venv)
    check_parent(venv)
    requirements, refused = rebuild_requirements(recorded, wheel_dir)
    if refused:
        raise RebuildFailed(f"the record's freeze holds {_listed(refused)}")
    python = sources.get("python") or "/usr/bin/python3"
    if not python.startswith("/") or os.path.normpath(python) != python:
        raise RebuildFailed(f"the interpreter {python!r} is not an absolute path")
    new = rebuild_path(venv)
    remove_tree(new)
    try:
        _build(venv, new, python, recorded, requirements, sources, run)
    except (ValueError, OSError) as err:
        remove_tree(new)
        if isinstance(err, RebuildFailed):
            raise
        raise RebuildFailed(str(err)) from err
    except BaseException:
        remove_tree(new)
        raise
    swap_in(venv, new, "the venv rebuilt from the record's freeze")


def _run(run, argv: list[str], what: str):
    # umask 022: readable by every user whatever root's umask is, as the roles make venvs.
    umask = ["/bin/sh", "-c", 'umask 022 && exec "$@"', "sh"]
    rc, out, err = run([*umask, "/usr/bin/timeout", str(REBUILD_TIMEOUT), *argv], CLEAN_ENV)
    if rc != 0:
        said = " | ".join((err.strip() or out.strip()).splitlines()[-6:])[-600:]
        raise RebuildFailed(f"{what} failed (exit {rc}): {said}")
    return out


def _build(venv, new, python, recorded, requirements, sources, run) -> None:
    name = os.path.basename(venv)
    _run(run, [python, "-I", "-m", "venv", "--prompt", name, new], f"{python} -m venv {new}")
    interpreter = os.path.join(new, "bin", "python")
    # pip runs only in a venv (its pyvenv.cfg): never in the interpreter it was made from.
    config = os.path.join(new, "pyvenv.cfg")
    if not is_root_dir(new) or not os.path.exists(interpreter) or not os.path.isfile(config):
        raise RebuildFailed(f"{python} -m venv made no venv at {new}")
    _run(run, pip_argv(interpreter, sources, recorded, requirements), "pip install")
    got = freeze(run, new) or []
    # What the new venv has and the record does not (ensurepip's setuptools where the recorded
    # venv had it removed): removed, by the names of its own freeze.
    names = {line.split("==")[0].lower() for line in recorded if "==" in line}
    names |= {line.split(" @ ")[0].lower() for line in recorded if " @ " in line}
    extra = [line.split("==")[0] for line in got if _PINNED.fullmatch(line)]
    extra = [n for n in extra if n.lower() not in names]
    if extra:
        _run(run, [interpreter, "-I", "-m", "pip", "uninstall", "--yes", *extra], "pip uninstall")
        got = freeze(run, new) or []
    if got != sorted(recorded):
        raise RebuildFailed(f"its freeze is not the record's: {differs(sorted(recorded), got)}")
    relocate(new, venv)
    old_activate = os.path.join(venv, "bin", "activate")
    try:
        old = read_root_file(old_activate, MAX_SCRIPT) if is_root_dir(venv) else None
    except (ValueError, OSError):
        old = None  # a venv whose bin/ is broken: the next run of its role writes the blocks
    blocks = rocmlab_blocks(old.decode("utf-8", "replace")) if old else ""
    if blocks:
        with open(os.path.join(new, "bin", "activate"), "a", encoding="utf-8") as handle:
            handle.write(blocks)
    if is_root_dir(venv):
        info = os.lstat(venv)
        os.chown(new, info.st_uid, info.st_gid)
        os.chmod(new, info.st_mode & 0o7777)


def relocate(new: str, venv: str) -> None:
    """Make the scripts of the venv built at NEW (bin/: pip's script shebangs, the activate
    scripts; pyvenv.cfg) name VENV, where it is about to be renamed."""
    built, final = os.fsencode(new), os.fsencode(venv)
    paths = [os.path.join(new, "pyvenv.cfg")]
    bindir = os.path.join(new, "bin")
    paths += [os.path.join(bindir, entry) for entry in sorted(os.listdir(bindir))]
    for path in paths:
        info = os.lstat(path)
        if info.st_mode & 0o170000 != 0o100000 or info.st_size > MAX_SCRIPT:
            continue
        with open(path, "rb") as handle:
            data = handle.read()
        if built not in data:
            continue
        with open(path, "wb") as handle:
            handle.write(data.replace(built, final))
        os.chmod(path, info.st_mode & 0o7777)


def release_all(venvs, check_mode: bool = False) -> list[str]:
    """Release the kept copies of VENVS (each checked first); the venvs that had any, in order.
    In check mode nothing is removed."""
    released = []
    for venv in sorted(set(venvs)):
        check_venv_path(venv)
        names = (kept_path(venv), keeping_path(venv), trash_path(venv), rebuild_path(venv))
        if not any(is_root_dir(name) for name in names):
            continue
        released.append(venv)
        if not check_mode:
            release(venv)
    return released


def release(venv: str) -> bool:
    """Remove VENV's kept copy and anything a stopped step left; True when there was any."""
    found = False
    for path in (kept_path(venv), keeping_path(venv), trash_path(venv), rebuild_path(venv)):
        if is_root_dir(path):
            found = True
            if path == kept_path(venv):
                discard(path, venv)
            else:
                shutil.rmtree(path)
    return found
