"""The declared hosts: ``--hosts h1,h2`` or an Ansible inventory file or directory.

An inventory is read by ``ansible-inventory --list --export`` when Ansible is on PATH (it knows
every inventory format and plugin, and ``--export`` reads no vault-encrypted variables); otherwise
this module parses the two static formats itself: YAML (``all: children: GROUP: hosts: ...``, PyYAML
imported only then) and INI (``[group]``, ``[group:children]``, ``[group:vars]``), with host ranges
(``lab-[01:40]``) and ``host:port`` handled as Ansible does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import string
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANSIBLE_INVENTORY = "ansible-inventory"
ANSIBLE_TIMEOUT_S = 120
DIRECTORY_FILES = ("hosts.yml", "hosts.yaml", "hosts.ini", "hosts")
YAML_SUFFIXES = (".yml", ".yaml", ".json")
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[;#].*)?$")
_RANGE = re.compile(r"^(?P<head>[^\[]*)\[(?P<range>[^\]]*)\](?P<tail>.*)$")
_RANGE_BODY = re.compile(r"^([0-9]+|[a-zA-Z]):([0-9]+|[a-zA-Z])(?::([0-9]+))?$")
_PORT = re.compile(r"^(?P<host>[^:]+):(?P<port>[0-9]+)$")


class InventoryError(Exception):
    """The declared hosts cannot be read; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Declared:
    """The hosts the fleet must have, and where that list came from."""

    hosts: tuple[str, ...]  # unique, in natural order (ws-2 before ws-10)
    source: str  # "--hosts" or the inventory's path
    reader: str  # "hosts option", "ansible-inventory", "yaml" or "ini"


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders the digits in names as numbers: ws-2 before ws-10."""
    parts = re.split(r"(\d+)", name)
    return (
        tuple(int(p) if i % 2 else p.casefold() for i, p in enumerate(parts)),
        name,
    )


def check_host_name(name: str, where: str) -> str:
    """``name`` when it can name a host's report file, else InventoryError."""
    if not name or name in (".", "..") or "/" in name or "\0" in name or name != name.strip():
        raise InventoryError(
            f"{where}: host name {name!r} cannot name a report file "
            "(expected a non-empty name without '/' or surrounding spaces)"
        )
    return name


def _declared(hosts: Iterable[str], source: str, reader: str) -> Declared:
    where = "--hosts" if reader == "hosts option" else f"--inventory {source}"
    unique = sorted({check_host_name(h, where) for h in hosts}, key=natural_key)
    if not unique:
        raise InventoryError(f"{where}: declares no hosts")
    return Declared(tuple(unique), source, reader)


def parse_host_list(text: str) -> Declared:
    """The ``--hosts h1,h2,...`` list (duplicates are listed once)."""
    names = [part.strip() for part in text.split(",")]
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
        readers.append(reader)
    return _declared(hosts, str(path), "+".join(sorted(set(readers))))


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
            command, capture_output=True, text=True, timeout=ANSIBLE_TIMEOUT_S, env=env
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
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"--inventory {path}: cannot be read: {exc}") from None
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


def hosts_from_yaml(doc: Any, path: Path) -> list[str]:
    """The hosts of a parsed YAML inventory: every group's ``hosts:``, through ``children:``."""
    if doc is None:
        return []
    if not isinstance(doc, dict):
        raise InventoryError(
            f"--inventory {path}: expected groups (all: children: GROUP: hosts: HOST:), "
            f"found a {type(doc).__name__}"
        )
    hosts: list[str] = []
    pending = list(doc.items())
    while pending:
        group, body = pending.pop(0)
        if body is None:
            continue
        if not isinstance(body, dict):
            raise InventoryError(
                f"--inventory {path}: group {group!r} is a {type(body).__name__}, "
                "expected a mapping with hosts:, children: or vars:"
            )
        members = body.get("hosts")
        if isinstance(members, dict):
            for pattern in members:
                hosts += expand_pattern(str(pattern), path)
        elif members is not None:
            raise InventoryError(
                f"--inventory {path}: group {group!r} has hosts: as a "
                f"{type(members).__name__}, expected a mapping (HOST: or HOST: {{vars}})"
            )
        children = body.get("children")
        if isinstance(children, dict):
            pending += list(children.items())
        elif children is not None:
            raise InventoryError(
                f"--inventory {path}: group {group!r} has children: as a "
                f"{type(children).__name__}, expected a mapping of groups"
            )
    return hosts


def hosts_from_ini(text: str, path: Path) -> list[str]:
    """The hosts of an INI inventory: the first word of each line in a hosts section."""
    hosts: list[str] = []
    kind = "hosts"  # lines before the first section are ungrouped hosts
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            match = _SECTION.match(line)
            if not match:
                raise InventoryError(f"--inventory {path}:{number}: bad section header {line!r}")
            kind = match.group(2) or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise InventoryError(
                    f"--inventory {path}:{number}: section {line!r}: expected [group], "
                    "[group:vars] or [group:children]"
                )
            continue
        if kind != "hosts":
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise InventoryError(f"--inventory {path}:{number}: {exc}: {line!r}") from None
        if words:
            hosts += expand_pattern(words[0], path, f":{number}")
    return hosts


def expand_pattern(pattern: str, path: Path, where: str = "") -> list[str]:
    """Host names of an inventory pattern: ranges expanded (``ws-[01:03]``), ``:port`` dropped."""
    if pattern.endswith(":"):
        raise InventoryError(
            f"--inventory {path}{where}: host {pattern!r} ends in ':' (expected HOST or HOST:PORT)"
        )
    match = _RANGE.match(pattern)
    body = _RANGE_BODY.match(match.group("range")) if match else None
    if match and body:
        head, tail = match.group("head"), match.group("tail")
        return [
            name
            for item in _range_items(*body.groups(), pattern=pattern, where=f"{path}{where}")
            for name in expand_pattern(f"{head}{item}{tail}", path, where)
        ]
    port = _PORT.match(pattern)
    return [port.group("host") if port else pattern]


def _range_items(begin: str, end: str, step: str | None, pattern: str, where: str) -> list[str]:
    stride = int(step or 1)
    bad = f"--inventory {where}: host range in {pattern!r}"
    if stride < 1:
        raise InventoryError(f"{bad}: the step must be 1 or more")
    if begin.isdigit() and end.isdigit():
        width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
        if width and len(end) != width:
            raise InventoryError(f"{bad}: begin and end need the same number of digits")
        if int(begin) > int(end):
            raise InventoryError(f"{bad}: begin is after end")
        return [str(n).zfill(width) for n in range(int(begin), int(end) + 1, stride)]
    if begin.isalpha() and end.isalpha():
        letters = string.ascii_letters
        first, last = letters.index(begin), letters.index(end)
        if first > last:
            raise InventoryError(f"{bad}: begin is after end")
        return list(letters[first : last + 1 : stride])
    raise InventoryError(f"{bad}: begin and end must both be numbers or both letters")
