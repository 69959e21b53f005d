"""The declared hosts: ``--hosts h1,h2`` or an Ansible inventory file or directory.

An inventory is read by ``ansible-inventory --list --export`` when Ansible is on PATH (it knows
every inventory format and plugin, and ``--export`` reads no vault-encrypted variables); otherwise
this module parses the two static formats itself: YAML (``all: children: GROUP: hosts: ...``, PyYAML
imported only then) and INI (``[group]``, ``[group:children]``, ``[group:vars]``), with host ranges
(``lab-[01:40]``) and ``host:port`` handled as Ansible does.

Both ways are bounded, so that a mistaken (or hostile) inventory is refused with a message rather
than read for ever: a file is read up to MAX_INVENTORY_BYTES (a FIFO or device is refused), a host
range that names more than MAX_HOSTS hosts is refused before it is expanded (also before
``ansible-inventory``, which would expand it), so is an inventory declaring more than MAX_HOSTS
hosts or listing more than MAX_HOST_ENTRIES (hosts counted once per group), and a group that is
its own child (through ``children:``, YAML anchors or ``[group:children]``) is refused as
Ansible refuses it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import string
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlab.common.hostread import file_kind
from rocmlab.common.textsafe import for_terminal
from rocmlab.fleet.bounded import read_file
from rocmlab.fleet.fields import RecordError

ANSIBLE_INVENTORY = "ansible-inventory"
ANSIBLE_TIMEOUT_S = 120
DIRECTORY_FILES = ("hosts.yml", "hosts.yaml", "hosts.ini", "hosts")
YAML_SUFFIXES = (".yml", ".yaml", ".json")
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[;#].*)?$")
_RANGE = re.compile(r"^(?P<head>[^\[]*)\[(?P<range>[^\]]*)\](?P<tail>.*)$")
_RANGE_BODY = re.compile(r"^([0-9]+|[a-zA-Z]):([0-9]+|[a-zA-Z])(?::([0-9]+))?$")
_PORT = re.compile(r"^(?P<host>[^:]+):(?P<port>[0-9]+)$")
_ANY_RANGE = re.compile(r"\[([0-9]+|[a-zA-Z]):([0-9]+|[a-zA-Z])(?::([0-9]+))?\]")
# A line that shlex splits as str.split does (most of an INI inventory's, and str.split is many
# times faster): no quote, backslash or comment sign, its words apart by spaces and tabs only
# (str.split also splits at the other white space, which shlex keeps in a word).
_PLAIN_LINE = re.compile(r"[^\s'\"\\#]+(?:[ \t]+[^\s'\"\\#]+)*")
MAX_HOSTS = 100_000  # declared hosts, and hosts one range may name
MAX_HOST_ENTRIES = 1_000_000  # host names listed, a host counted once per group that lists it
MAX_INVENTORY_BYTES = 16 * 1024 * 1024
MAX_INVENTORY_FILES = 1_000  # files of an inventory directory checked for ranges
_MAX_RANGE_DIGITS = 18


class InventoryError(Exception):
    """The declared hosts cannot be read; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Declared:
    """The hosts the fleet must have, and where that list came from."""

    hosts: tuple[str, ...]  # unique, in natural order (ws-2 before ws-10)
    source: str  # "--hosts" or the inventory's path
    reader: str  # "hosts option", "ansible-inventory", "yaml" or "ini"


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders the digits in names as numbers: ws-2 before ws-10. A run of digits
    is compared by its length, then its digits, without its leading zeros: as int() would order
    them, for any length (int() refuses over 4,300 digits)."""
    parts = re.split(r"(\d+)", name)
    return (
        tuple(
            (len(p.lstrip("0")), p.lstrip("0")) if i % 2 else p.casefold()
            for i, p in enumerate(parts)
        ),
        name,
    )


def check_host_name(name: str, where: str) -> str:
    """``name`` when it can name a host's report file, else InventoryError."""
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or name != name.strip()
        or for_terminal(name) != name
    ):
        raise InventoryError(
            f"{where}: host name {name!r} cannot name a report file (expected a non-empty name "
            "without '/', surrounding spaces or control characters)"
        )
    return name


def _declared(hosts: Iterable[str], source: str, reader: str) -> Declared:
    where = "--hosts" if reader == "hosts option" else f"--inventory {source}"
    names = set(hosts)
    if len(names) > MAX_HOSTS:
        raise InventoryError(
            f"{where}: declares {len(names)} hosts: more than fleet-report takes "
            f"({MAX_HOSTS} at most)"
        )
    unique = sorted((check_host_name(h, where) for h in names), key=natural_key)
    if not unique:
        raise InventoryError(f"{where}: declares no hosts")
    return Declared(tuple(unique), source, reader)


def parse_host_list(text: str) -> Declared:
    """The ``--hosts h1,h2,...`` list (duplicates are listed once)."""
    names = [part.strip() for part in text.split(",", MAX_HOSTS)]
    if len(names) > MAX_HOSTS:
        raise InventoryError(f"--hosts: more than {MAX_HOSTS} host names (the most it takes)")
    if any(not name for name in names):
        raise InventoryError(
            f"--hosts {text!r}: an empty host name; expected host names separated by commas"
        )
    return _declared(names, "--hosts", "hosts option")


def read_inventory(path: Path, ansible_inventory: str | None) -> Declared:
    """The hosts of the inventory at ``path``, through ``ansible_inventory`` when given."""
    if not path.exists():
        raise InventoryError(f"--inventory {path}: no such file or directory")
    if ansible_inventory:
        check_before_ansible(path)
        return _declared(
            hosts_from_ansible(path, ansible_inventory), str(path), "ansible-inventory"
        )
    if path.is_dir():
        files = [path / name for name in DIRECTORY_FILES if (path / name).is_file()]
        if not files:
            raise InventoryError(
                f"--inventory {path}: the directory holds none of {', '.join(DIRECTORY_FILES)}"
            )
    else:
        files = [path]
    hosts: list[str] = []
    readers: list[str] = []
    for file in files:
        found, reader = hosts_from_file(file)
        hosts += found
        _count_entries(hosts, file)
        readers.append(reader)
    return _declared(hosts, str(path), "+".join(sorted(set(readers))))


def _count_entries(hosts: list[str], path: Path, where: str = "") -> None:
    if len(hosts) > MAX_HOST_ENTRIES:
        raise InventoryError(
            f"--inventory {path}{where}: lists more than {MAX_HOST_ENTRIES} host names (a host "
            "counted once per group that lists it): more than fleet-report takes"
        )


def check_before_ansible(path: Path) -> None:
    """Refuse what ``ansible-inventory`` would read without a bound, before it runs: in the
    inventory file, or the files at the top of an inventory directory (it reads them all), a
    special file (a FIFO would block it), a file over MAX_INVENTORY_BYTES, a host range naming
    more than MAX_HOSTS hosts (it would expand it). Executable files (dynamic inventories, which
    Ansible runs) are not read; files that cannot be read are left to Ansible to report."""
    if path.is_dir():
        try:
            entries = sorted(path.iterdir())[:MAX_INVENTORY_FILES]
        except OSError:
            return
        files = [entry for entry in entries if not entry.is_dir()]
    else:
        files = [path]
    for file in files:
        try:
            info = file.stat()
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            kind = file_kind(info.st_mode, named_pipe=True)
            raise InventoryError(f"--inventory {file}: {kind}, not a regular file: not read")
        if info.st_size > MAX_INVENTORY_BYTES:
            raise InventoryError(
                f"--inventory {file}: {info.st_size} bytes: larger than an inventory "
                f"({MAX_INVENTORY_BYTES} bytes at most)"
            )
        if os.access(file, os.X_OK):
            continue
        try:
            text = read_file(file, MAX_INVENTORY_BYTES).decode("utf-8", "replace")
        except RecordError:
            continue
        _check_ranges_in(text, file)


def _check_ranges_in(text: str, path: Path) -> None:
    """Each line's ranges multiply (``web[1:100]-[1:100]`` names 10,000 hosts)."""
    counts: dict[int, int] = {}  # line start -> hosts its ranges name
    for match in _ANY_RANGE.finditer(text):
        try:
            count = _range_count(*match.groups(), pattern=match.group(), where=str(path))
        except InventoryError:
            continue  # not a range Ansible expands: its own message says why
        start = text.rfind("\n", 0, match.start()) + 1
        counts[start] = counts.get(start, 1) * count
    for start, count in counts.items():
        if count > MAX_HOSTS:
            end = text.find("\n", start)
            line = text[start : end if end >= 0 else len(text)].strip()
            where = f"{path}:{text.count(chr(10), 0, start) + 1}"
            raise InventoryError(_too_many(where, line, count))


def _too_many(where: str, pattern: str, count: int) -> str:
    return (
        f"--inventory {where}: host range in {_cut(pattern)!r} names {count} hosts: more than "
        f"fleet-report takes ({MAX_HOSTS} at most)"
    )


def _cut(text: str, width: int = 80) -> str:
    return text if len(text) <= width else f"{text[: width - 3]}..."


def hosts_from_ansible(path: Path, executable: str) -> list[str]:
    """Every host ``ansible-inventory --list --export`` finds in ``path`` (any format)."""
    env = {
        **os.environ,
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
        "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
        "ANSIBLE_NOCOLOR": "True",
    }
    command = [executable, "-i", str(path), "--list", "--export"]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=ANSIBLE_TIMEOUT_S, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InventoryError(f"--inventory {path}: {' '.join(command)} failed: {exc}") from None
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
        said = "; ".join(errors[-2:]) or result.stderr.strip()[-500:]
        raise InventoryError(f"--inventory {path}: ansible-inventory cannot read it: {said}")
    try:
        groups = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise InventoryError(
            f"--inventory {path}: ansible-inventory printed no JSON: {exc}"
        ) from None
    hosts = list(groups.get("_meta", {}).get("hostvars", {}))
    for name, group in groups.items():
        if name != "_meta" and isinstance(group, dict):
            hosts += group.get("hosts", [])
    return hosts


def hosts_from_file(path: Path) -> tuple[list[str], str]:
    """The hosts of one static inventory file and which format it was: "yaml" or "ini".

    ``.yml``, ``.yaml`` and ``.json`` files are YAML; ``.ini`` files INI; any other name is read
    as YAML when it parses to a mapping (Ansible tries YAML first for such names), else as INI.
    """
    try:
        text = read_file(path, MAX_INVENTORY_BYTES, "an inventory").decode("utf-8")
    except RecordError as exc:
        raise InventoryError(f"--inventory {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise InventoryError(f"--inventory {path}: not UTF-8 text (byte {exc.start})") from None
    suffix = path.suffix.lower()
    if suffix in YAML_SUFFIXES:
        return hosts_from_yaml(_load_yaml(text, path), path), "yaml"
    if suffix != ".ini":
        try:
            doc = _load_yaml(text, path)
        except InventoryError:
            doc = None
        if isinstance(doc, dict):
            return hosts_from_yaml(doc, path), "yaml"
    return hosts_from_ini(text, path), "ini"


def _load_yaml(text: str, path: Path) -> Any:
    try:
        import yaml
    except ImportError:
        raise InventoryError(
            f"--inventory {path}: reading a YAML inventory without Ansible on PATH needs PyYAML "
            "(Debian: apt-get install python3-yaml; pip: PyYAML); or give --hosts h1,h2,..."
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InventoryError(f"--inventory {path}: not valid YAML: {exc}") from None
    except RecursionError:
        raise InventoryError(
            f"--inventory {path}: nested too deep for an inventory (PyYAML's recursion limit)"
        ) from None


def hosts_from_yaml(doc: Any, path: Path) -> list[str]:
    """The hosts of a parsed YAML inventory: every group's ``hosts:``, through ``children:``.

    A group's body (its mapping) is read once however many times YAML anchors repeat it, and a
    group that is its own child, by name or through an anchor, is refused (_find_loop).
    """
    if doc is None:
        return []
    if not isinstance(doc, dict):
        raise InventoryError(
            f"--inventory {path}: expected groups (all: children: GROUP: hosts: HOST:), "
            f"found a {type(doc).__name__}"
        )
    hosts: list[str] = []
    # Groups and bodies: group -> its bodies, body -> its child groups (names).
    graph: dict[tuple[str, Any], list[tuple[str, Any]]] = {}
    bodies: dict[int, Any] = {}
    expanded: set[int] = set()
    pending = [(str(group), body) for group, body in doc.items()]
    while pending:
        group, body = pending.pop()
        if body is None:
            continue
        if not isinstance(body, dict):
            raise InventoryError(
                f"--inventory {path}: group {group!r} is a {type(body).__name__}, "
                "expected a mapping with hosts:, children: or vars:"
            )
        graph.setdefault(("group", group), []).append(("body", id(body)))
        if id(body) in bodies:
            continue
        bodies[id(body)] = body
        members = body.get("hosts")
        if isinstance(members, dict):
            if id(members) not in expanded:
                expanded.add(id(members))
                for pattern in members:
                    hosts += expand_pattern(str(pattern), path)
                    _count_entries(hosts, path)
        elif members is not None:
            raise InventoryError(
                f"--inventory {path}: group {group!r} has hosts: as a "
                f"{type(members).__name__}, expected a mapping (HOST: or HOST: {{vars}})"
            )
        children = body.get("children")
        if isinstance(children, dict):
            edges = graph.setdefault(("body", id(body)), [])
            for child, child_body in children.items():
                edges.append(("group", str(child)))
                pending.append((str(child), child_body))
        elif children is not None:
            raise InventoryError(
                f"--inventory {path}: group {group!r} has children: as a "
                f"{type(children).__name__}, expected a mapping of groups"
            )
    _refuse_loop(graph, path)
    return hosts


def _refuse_loop(graph: dict[tuple[str, Any], list[tuple[str, Any]]], path: Path) -> None:
    loop = _find_loop(graph)[:-1]
    if loop:
        first = next(i for i, (kind, _unused) in enumerate(loop) if kind == "group")
        groups = [name for kind, name in loop[first:] + loop[:first] if kind == "group"]
        groups.append(groups[0])
        raise InventoryError(
            f"--inventory {path}: group {groups[0]!r} is its own child "
            f"({' > '.join(groups)}): a recursive children loop, which Ansible refuses too"
        )


def _find_loop(graph: dict[Any, list[Any]]) -> list[Any]:
    """A cycle of ``graph`` (node -> successors) as its nodes, first repeated at the end; []
    when there is none. Iterative depth-first search: linear, and no recursion limit."""
    done: set[Any] = set()
    for start in graph:
        if start in done:
            continue
        on_path = {start: 0}
        path = [start]
        stack = [iter(graph.get(start, ()))]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                stack.pop()
                done.add(path.pop())
                del on_path[next(reversed(on_path))]
                continue
            if step in on_path:
                return [*path[on_path[step] :], step]
            if step in done:
                continue
            on_path[step] = len(path)
            path.append(step)
            stack.append(iter(graph.get(step, ())))
    return []


def hosts_from_ini(text: str, path: Path) -> list[str]:
    """The hosts of an INI inventory: the first word of each line in a hosts section."""
    hosts: list[str] = []
    kind = "hosts"  # lines before the first section are ungrouped hosts
    group = "ungrouped"
    children: dict[str, list[str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            match = _SECTION.match(line)
            if not match:
                raise InventoryError(f"--inventory {path}:{number}: bad section header {line!r}")
            group, kind = match.group(1), match.group(2) or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise InventoryError(
                    f"--inventory {path}:{number}: section {line!r}: expected [group], "
                    "[group:vars] or [group:children]"
                )
            continue
        if kind == "vars":
            continue
        try:
            words = _words(line)
        except ValueError as exc:
            raise InventoryError(f"--inventory {path}:{number}: {exc}: {line!r}") from None
        if words and kind == "children":
            children.setdefault(group, []).append(words[0])
        elif words:
            hosts += expand_pattern(words[0], path, f":{number}")
            _count_entries(hosts, path, f":{number}")
    _refuse_loop(
        {
            ("group", parent): [("group", child) for child in kids]
            for parent, kids in children.items()
        },
        path,
    )
    return hosts


def _words(line: str) -> list[str]:
    """The words of an INI inventory's line, as shlex splits them (ValueError: an unclosed
    quote)."""
    return line.split() if _PLAIN_LINE.fullmatch(line) else shlex.split(line, comments=True)


def expand_pattern(pattern: str, path: Path, where: str = "") -> list[str]:
    """Host names of an inventory pattern: ranges expanded (``ws-[01:03]``), ``:port`` dropped.

    The ranges' sizes are multiplied first: a pattern naming more than MAX_HOSTS hosts is
    refused before anything is expanded.
    """
    if pattern.endswith(":"):
        raise InventoryError(
            f"--inventory {path}{where}: host {pattern!r} ends in ':' (expected HOST or HOST:PORT)"
        )
    ranges: list[tuple[str, tuple[Any, ...]]] = []  # (text before, the range's bounds)
    count, rest = 1, pattern
    while (match := _RANGE.match(rest)) and (body := _RANGE_BODY.match(match.group("range"))):
        bounds = (*body.groups(), pattern, f"{path}{where}")
        count *= _range_count(*bounds)
        ranges.append((match.group("head"), bounds))
        rest = match.group("tail")
    if count > MAX_HOSTS:
        raise InventoryError(_too_many(f"{path}{where}", pattern, count))
    names = [""]
    parts = [part for head, bounds in ranges for part in ([head], _range_items(*bounds))]
    for options in [*parts, [rest]]:
        names = [name + option for name in names for option in options]
    return [port.group("host") if (port := _PORT.match(name)) else name for name in names]


def _range_bounds(
    begin: str, end: str, step: str | None, pattern: str, where: str
) -> tuple[int, int, int]:
    """(first, last, stride) of a range as numbers (letters by their place), checked."""
    bad = f"--inventory {where}: host range in {_cut(pattern)!r}"
    if max(len(begin), len(end), len(step or "")) > _MAX_RANGE_DIGITS:
        raise InventoryError(f"{bad}: more than {_MAX_RANGE_DIGITS} digits")
    stride = int(step or 1)
    if stride < 1:
        raise InventoryError(f"{bad}: the step must be 1 or more")
    if begin.isdigit() and end.isdigit():
        width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
        if width and len(end) != width:
            raise InventoryError(f"{bad}: begin and end need the same number of digits")
        first, last = int(begin), int(end)
    elif begin.isalpha() and end.isalpha():
        first, last = string.ascii_letters.index(begin), string.ascii_letters.index(end)
    else:
        raise InventoryError(f"{bad}: begin and end must both be numbers or both letters")
    if first > last:
        raise InventoryError(f"{bad}: begin is after end")
    return first, last, stride


def _range_count(begin: str, end: str, step: str | None, pattern: str, where: str) -> int:
    """How many names a range gives, without making them."""
    first, last, stride = _range_bounds(begin, end, step, pattern, where)
    return (last - first) // stride + 1


def _range_items(begin: str, end: str, step: str | None, pattern: str, where: str) -> list[str]:
    first, last, stride = _range_bounds(begin, end, step, pattern, where)
    if begin.isdigit():
        width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
        return [str(n).zfill(width) for n in range(first, last + 1, stride)]
    return list(string.ascii_letters[first : last + 1 : stride])
