# Copyright: rocmlab contributors
# Apache License 2.0
"""The installed ROCm release, read the same way by the preflight, the known-good record, the
doctor and health: AMD's legacy line (packages rocm-*, one /opt/rocm-X.Y.Z, /opt/rocm/.info/version)
and the ROCm Core SDK line (packages amdrocm*, /opt/rocm/core-X.Y side by side, the one in use
chosen by update-alternatives' group ``core``, no .info/version).

``probe(root)`` reads, under ROOT (tests point it at fixture trees), without running anything:

- dpkg's status file (var/lib/dpkg/status, at most STATUS_LIMIT bytes): rocm-core (the legacy
  line: ``6.4.2.60402-1`` is 6.4.2) and every ``amdrocm*X.Y`` package (the Core line: the name
  carries the series X.Y, the version ``X.Y.Z-N`` the release), installed or left half-way;
- the directories opt/rocm/core-X.Y (lstat: a real directory only, a link is named, never
  followed);
- update-alternatives' group ``core``: its admin file var/lib/dpkg/alternatives/core (the mode,
  auto or manual, and each alternative with its priority) and the link etc/alternatives/core
  (read with readlink, never followed): which core is selected;
- the legacy opt/rocm/.info/version (/opt/rocm is AMD's link to /opt/rocm-X.Y.Z, through
  /etc/alternatives/rocm: those links are followed, each as if ROOT were /, never out of ROOT).

No link is followed anywhere else, and every file is read bounded; what is refused is named in
``problems`` (and ``refused``) and the rest still read.

The answer (JSON-ready):
  line       "core" when a Core SDK core is installed (whole or not), else "legacy" when AMD's
             legacy ROCm is, else None.
  release    The release applications get, X.Y.Z: on the Core line the selected core's (else
             the only core's, else the newest one's, and ``problems`` says so); else the legacy
             release; None without AMD's ROCm.
  selected   The series (X.Y) etc/alternatives/core points to, None when none or elsewhere.
  mode       The ``core`` group's mode, "auto" or "manual"; None without the group.
  cores      One entry per core found, oldest first: ``series`` (X.Y), ``release`` (X.Y.Z of
             its package, None without one), ``package`` and ``version`` (the dpkg package
             that installed it, amdrocm-coreX.Y when there is one, else another amdrocm
             package of the series; None when dpkg has none), ``packages`` (every amdrocm package
             of the series dpkg holds), ``state`` (dpkg's state of that package: "installed",
             "half-configured", "unpacked", ...; "absent" when dpkg has none), ``path``
             (/opt/rocm/core-X.Y), ``directory`` (whether that is a real directory),
             ``priority`` (its update-alternatives priority, None when not an alternative) and
             ``selected``.
  legacy     The legacy line's release, X.Y.Z (rocm-core's, else .info/version's), or None.
  legacy_version  The text of /opt/rocm/.info/version ("6.4.2-120"), or None.
  problems   Sentences naming what does not add up (both lines installed, a core half-way, no
             core selected, a link refused, a file over its bound).
  refused    The files that were refused (a link, not a regular file, over their bound, not
             owned by OWNER), as "path: why"; also in ``problems``.

One module in two places: plugins/module_utils/rocm_installed.py is the source, and
src/rocmlab/common/rocm_installed.py its copy in the rocmlab wheel, written and checked by
tools/role_docs.py like the support catalog's reader. Standard library and support_catalog only.
"""

from __future__ import annotations

import errno
import os
import re
import stat

from .support_catalog import leading_release, release_key, release_of

STATUS = "var/lib/dpkg/status"
ALTERNATIVES = "var/lib/dpkg/alternatives/core"
SELECTED_LINK = "etc/alternatives/core"
CORE_LINK = "/opt/rocm/core"
CORE_DIR = "/opt/rocm/core-"
INFO_VERSION = "opt/rocm/.info/version"
# dpkg's status file is a few MiB on a full desktop; update-alternatives' admin file for a group
# of a few cores is a few hundred bytes; .info/version is one short line.
STATUS_LIMIT = 32 * 1024 * 1024
ALTERNATIVES_LIMIT = 64 * 1024
INFO_LIMIT = 256
LINK_HOPS = 8

# dpkg's states in which a package's files are on disk, whole or not.
PRESENT = ("installed", "half-configured", "unpacked", "half-installed", "triggers-awaited",
           "triggers-pending")  # fmt: skip
_SERIES = r"(\d{1,2}\.\d{1,2})"
# The Core line's packages: amdrocm-core10.0, amdrocm-runtime10.0, amdrocm10.0-gfx1200.
_CORE_PACKAGE = re.compile(rf"amdrocm(?:-[a-z][a-z0-9-]*?)?{_SERIES}(?:-gfx[0-9a-f]{{3,4}})?")
_CORE_PATH = re.compile(rf"/opt/rocm/core-{_SERIES}")
_CORE_DIR = re.compile(rf"core-{_SERIES}")


class Refused(Exception):
    """A file that is there but not read: a link, not a regular file, too large, not OWNER's."""


def _walk(root: str, parts: list[str]) -> int:
    """An O_PATH-like descriptor of the directory ROOT/parts, no component followed if a link
    (ELOOP/ENOTDIR as OSError); the caller closes it."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            new = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = new
    except BaseException:
        os.close(fd)
        raise
    return fd


def _split(relative: str) -> tuple[list[str], str]:
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"not a clean relative path: {relative!r}")
    return parts[:-1], parts[-1]


def read_file(root: str, relative: str, limit: int, owner: int | None = None) -> bytes | None:
    """The bytes of ROOT/RELATIVE, a regular file (of OWNER's when given) of at most LIMIT bytes;
    None when it or a directory above it is absent. Refused for a link anywhere on the way, any
    other kind of file, or more than LIMIT bytes."""
    where = "/" + relative
    dirs, name = _split(relative)
    try:
        dir_fd = _walk(root, dirs)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(
                f"{where}: a directory on its path is a link or not a directory"
            ) from None
        raise
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise Refused(f"{where}: a symbolic link (not followed)") from None
            raise
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise Refused(f"{where}: not a regular file")
            if owner is not None and info.st_uid != owner:
                raise Refused(f"{where}: owned by uid {info.st_uid}, not {owner}")
            data = handle.read(limit + 1)
    finally:
        os.close(dir_fd)
    if len(data) > limit:
        raise Refused(f"{where}: over {limit} bytes, not read")
    return data


def _at(root: str, relative: str, call):
    """CALL(name, dir_fd=...) on ROOT/RELATIVE's last part, its directory reached with no link
    followed on the way; None when absent or refused."""
    dirs, name = _split(relative)
    try:
        dir_fd = _walk(root, dirs)
    except OSError:
        return None
    try:
        return call(name, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)


def _lstat(root: str, relative: str) -> os.stat_result | None:
    """lstat of ROOT/RELATIVE with no link followed on the way; None when absent or refused."""
    return _at(root, relative, os.lstat)


def _readlink(root: str, relative: str) -> str | None:
    """The target of the link ROOT/RELATIVE (never followed), None when it is not a link."""
    return _at(root, relative, os.readlink)


def _resolve(root: str, relative: str) -> str | None:
    """RELATIVE with its links followed as if ROOT were / (an absolute target starts again at
    ROOT, ".." stops at it), at most LINK_HOPS of them: the path below ROOT, None past them."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        target = _readlink(root, "/".join([*done, part]))
        if target is None:
            done.append(part)
            continue
        hops += 1
        if hops > LINK_HOPS:
            return None
        if target.startswith("/"):
            done = []
        parts = [p for p in target.split("/") if p not in ("", ".")] + parts
    return "/".join(done)


# --- dpkg -----------------------------------------------------------------------------------


def parse_status(text: str) -> dict[str, dict[str, str]]:
    """dpkg's status file: the Status and Version of the packages this module reads (rocm-core,
    amdrocm*), by name; an installed stanza wins over another of the same name."""
    found: dict[str, dict[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(":")
            if sep and key in ("Package", "Status", "Version"):
                fields[key] = value.strip()
        name = fields.get("Package", "")
        wanted = name == "rocm-core" or name.startswith("amdrocm")
        if wanted and _state(found.get(name, {})) != "installed":
            found[name] = fields
    return found


def _state(fields: dict[str, str]) -> str | None:
    """dpkg's state word of a stanza ("installed", "half-configured"), None when not present."""
    words = fields.get("Status", "").split()
    return words[-1] if len(words) == 3 and words[-1] in PRESENT else None


# --- update-alternatives ---------------------------------------------------------------------


def parse_alternatives(text: str) -> dict:
    """update-alternatives' admin file of a group (dpkg's utils/update-alternatives.c format):
    the mode line, the link, the slaves (name, link) to an empty line, then each alternative as
    its path, its priority and one line per slave, to an empty line. -> {"mode", "link",
    "alternatives": {path: priority}}; ValueError when it is not that format."""
    lines = text.split("\n")
    if len(lines) < 3 or lines[0] not in ("auto", "manual") or not lines[1].startswith("/"):
        raise ValueError("not an update-alternatives admin file (mode, link, ...)")
    if not text.endswith("\n\n"):
        raise ValueError("it does not end with the empty line that ends its alternatives")
    index = 2
    slaves = 0
    while index < len(lines) and lines[index] != "":
        slaves += 1
        index += 2
    if index >= len(lines):
        raise ValueError("its slave list does not end")
    index += 1
    alternatives: dict[str, int] = {}
    while index < len(lines) and lines[index] != "":
        path = lines[index]
        priority = lines[index + 1] if index + 1 < len(lines) else ""
        if not path.startswith("/") or not re.fullmatch(r"-?\d{1,10}", priority):
            raise ValueError(f"alternative {path[:100]!r} has no priority")
        alternatives[path] = int(priority)
        index += 2 + slaves
    return {"mode": lines[0], "link": lines[1], "alternatives": alternatives}


# --- the probe -------------------------------------------------------------------------------


def _read_text(root, relative, limit, owner, problems, refused) -> str | None:
    try:
        data = read_file(root, relative, limit, owner)
    except Refused as err:
        refused.append(str(err))
        problems.append(f"{err}")
        return None
    except OSError as err:
        problems.append(f"/{relative}: cannot read it ({err.strerror or err})")
        return None
    return None if data is None else data.decode("utf-8", errors="replace")


def _cores(root: str, packages: dict[str, dict[str, str]], problems: list[str]) -> dict:
    """Every core found, by series: its packages (dpkg) and its directory (lstat)."""
    cores: dict[str, dict] = {}

    def core(series: str) -> dict:
        return cores.setdefault(
            series,
            {
                "series": series,
                "release": None,
                "package": None,
                "version": None,
                "packages": [],
                "state": "absent",
                "path": CORE_DIR + series,
                "directory": False,
                "priority": None,
                "selected": False,
            },
        )

    for name in sorted(packages):
        match = _CORE_PACKAGE.fullmatch(name)
        if match and _state(packages[name]):
            core(match[1])["packages"].append(name)
    for series, entry in cores.items():
        main = f"amdrocm-core{series}"
        name = main if main in entry["packages"] else entry["packages"][0]
        version = packages[name].get("Version", "")
        entry.update(package=name, version=version, state=_state(packages[name]))
        release = leading_release(version)
        if release is None or release.rsplit(".", 1)[0] != series:
            problems.append(
                f"{name} {version[:64]!r}: its version is not a {series}.Z release; its release"
                " is not known"
            )
            release = None
        entry["release"] = release
        if entry["state"] != "installed":
            problems.append(
                f"{name} {version[:64]} is {entry['state']} (dpkg): `sudo dpkg --configure -a`"
                " finishes or undoes it"
            )
    try:
        fd = _walk(root, ["opt", "rocm"])  # /opt/rocm itself a link (legacy): no core there
    except OSError:
        names = []
    else:
        try:
            names = os.listdir(fd)
        finally:
            os.close(fd)
    for name in sorted(names):
        match = _CORE_DIR.fullmatch(name)
        if not match:
            continue
        info = _lstat(root, f"opt/rocm/{name}")
        if info is None:
            continue
        if stat.S_ISDIR(info.st_mode):
            core(match[1])["directory"] = True
        elif stat.S_ISLNK(info.st_mode):
            problems.append(f"/opt/rocm/{name} is a link, not AMD's directory: not followed")
    for series, entry in cores.items():
        if entry["package"] and not entry["directory"]:
            problems.append(
                f"{entry['package']} is installed but /opt/rocm/core-{series} is missing"
            )
        elif entry["directory"] and not entry["package"]:
            problems.append(f"/opt/rocm/core-{series} is there but no dpkg package installed it")
    return cores


def _alternatives(
    root, owner, cores, problems, refused
) -> tuple[str | None, str | None, str | None]:
    """(mode, the selected series, the best series in auto mode) of the group core."""
    mode = best = None
    text = _read_text(root, ALTERNATIVES, ALTERNATIVES_LIMIT, owner, problems, refused)
    if text is not None:
        try:
            admin = parse_alternatives(text)
        except ValueError as err:
            problems.append(f"/{ALTERNATIVES}: {err}")
            admin = None
        if admin is not None:
            mode = admin["mode"]
            if admin["link"] != CORE_LINK:
                problems.append(f"/{ALTERNATIVES} links {admin['link'][:100]!r}, not {CORE_LINK}")
            for path, priority in admin["alternatives"].items():
                match = _CORE_PATH.fullmatch(path)
                if match is None:
                    problems.append(f"/{ALTERNATIVES} offers {path[:100]!r}, not a core: ignored")
                    continue
                entry = cores.get(match[1])
                if entry is None:
                    problems.append(f"/{ALTERNATIVES} offers {path}, which is not installed")
                    continue
                entry["priority"] = priority
            offered = [e for e in cores.values() if e["priority"] is not None]
            if offered:
                best = max(offered, key=lambda e: (e["priority"], release_key(e["series"])))
                best = best["series"]
    target = _readlink(root, SELECTED_LINK)
    selected = None
    if target is not None:
        match = _CORE_PATH.fullmatch(target)
        if match is None:
            problems.append(
                f"/{SELECTED_LINK} points to {target[:100]!r}, not a /opt/rocm/core-X.Y: not taken"
            )
        elif match[1] not in cores:
            problems.append(f"/{SELECTED_LINK} points to {target}, which is not installed")
        else:
            selected = match[1]
    elif _lstat(root, SELECTED_LINK) is not None:
        problems.append(f"/{SELECTED_LINK} is not a link: not taken")
    link = _readlink(root, "opt/rocm/core")
    if link is not None and link != "/" + SELECTED_LINK:
        problems.append(
            f"{CORE_LINK} points to {link[:100]!r}, not /{SELECTED_LINK}: it was changed by hand"
        )
    if mode == "auto" and selected and best and selected != best:
        problems.append(
            f"the core group is in auto mode but core-{selected} is selected, not the"
            f" best core-{best}: `update-alternatives --auto core` sets it right"
        )
    return mode, selected, best


def _legacy(root, packages, owner, problems, refused) -> tuple[str | None, str | None]:
    """(the legacy release, the text of .info/version)."""
    text = None
    where = _resolve(root, "opt/rocm")
    if where is None:
        problems.append(f"/opt/rocm: more than {LINK_HOPS} links: not followed")
    else:
        raw = _read_text(root, f"{where}/.info/version", INFO_LIMIT, owner, problems, refused)
        text = (raw or "").strip() or None
    info_release = leading_release(text)
    fields = packages.get("rocm-core", {})
    state = _state(fields)
    core = release_of(fields.get("Version", "")) if state else None
    if state and state != "installed":
        problems.append(
            f"rocm-core {fields.get('Version', '')[:64]} is {state} (dpkg): `sudo dpkg"
            " --configure -a` finishes or undoes it"
        )
    if core and info_release and core != info_release:
        problems.append(f"rocm-core is {core}, /{INFO_VERSION} says {text[:64]}")
    return core or info_release, text


def probe(
    root: str = "/",
    packages: dict[str, dict[str, str]] | None = None,
    owner: int | None = None,
) -> dict:
    """The installed ROCm under ROOT (see the module's docstring for the answer's keys).

    packages: dpkg's status file already read and parsed by the caller (name -> its fields,
    Status and Version at least); None reads it here. owner: the uid every file read must belong
    to (0 where root acts on what it reads), None for any."""
    problems: list[str] = []
    refused: list[str] = []
    if packages is None:
        text = _read_text(root, STATUS, STATUS_LIMIT, owner, problems, refused)
        packages = parse_status(text or "")
    cores = _cores(root, packages, problems)
    mode, selected, _best = _alternatives(root, owner, cores, problems, refused)
    legacy, legacy_version = _legacy(root, packages, owner, problems, refused)
    ordered = sorted(cores.values(), key=lambda e: release_key(e["series"]))
    release = None
    if selected:
        cores[selected]["selected"] = True
        release = cores[selected]["release"]
    elif ordered:
        known = [e for e in ordered if e["release"]]
        if len(ordered) == 1:
            problems.append(f"no core is selected (/{SELECTED_LINK}); core-{ordered[0]['series']}"
                            " is the only one installed")  # fmt: skip
        else:
            listed = ", ".join(f"core-{e['series']}" for e in ordered)
            problems.append(
                f"no core is selected (/{SELECTED_LINK}) among {listed}: the newest is named"
            )
        release = known[-1]["release"] if known else None
    line = "core" if ordered else ("legacy" if legacy else None)
    if ordered and legacy:
        problems.append(
            f"both release lines are installed: legacy ROCm {legacy} (rocm-core, /opt/rocm-X.Y.Z)"
            f" and the Core SDK ({', '.join('core-' + e['series'] for e in ordered)})"
        )
    return {
        "line": line,
        "release": release if line == "core" else legacy,
        "selected": selected,
        "mode": mode,
        "cores": ordered,
        "legacy": legacy,
        "legacy_version": legacy_version,
        "problems": problems,
        "refused": refused,
    }


SUMMARY_CORE_KEYS = ("series", "release", "package", "version", "state", "path", "selected")


def summary(found: dict) -> dict:
    """What reports show of a probe's answer: line, release, selected, mode, legacy, cores (each
    with SUMMARY_CORE_KEYS) and problems."""
    shown = {key: found[key] for key in ("line", "release", "selected", "mode", "legacy")}
    shown["cores"] = [{key: core[key] for key in SUMMARY_CORE_KEYS} for core in found["cores"]]
    shown["problems"] = list(found["problems"])
    return shown


def describe(found: dict) -> str:
    """One line: "ROCm 10.0.0 (Core SDK line, /opt/rocm/core-10.0 selected; also installed:
    core-7.14)", "ROCm 6.4.2 (legacy line)", "no AMD ROCm"."""
    if found["line"] is None:
        return "no AMD ROCm"
    if found["line"] == "legacy":
        return f"ROCm {found['legacy']} (legacy line)"
    selected = found["selected"]
    parts = [f"{CORE_DIR}{selected} selected" if selected else "no core selected"]
    others = [f"core-{e['series']}" for e in found["cores"] if e["series"] != selected]
    if others:
        parts.append(f"also installed: {', '.join(others)}")
    if found["mode"] == "manual":
        parts[0] += " by hand"
    return f"ROCm {found['release'] or 'of unknown release'} (Core SDK line, {'; '.join(parts)})"
