"""The package layout of src/rocmlab, read from the source with ``ast``: packages that mirror the
commands, no import cycle between modules, nothing that imports back up into a command.

- Every ``import`` and ``from ... import`` counts, also the ones inside functions (imported only
  when a command runs): a cycle through a lazy import is still a cycle.
- ``commands/X.py`` leads to its package in one hop (``commands/smoke.py`` to ``rocmlab.smoke``),
  and imports no other command's package and no other command.
- No package imports ``rocmlab.commands`` or ``rocmlab.cli``; the shared packages import no
  command's package: ``common`` nothing of rocmlab's, ``torchjob`` only ``common``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "rocmlab"

# What each part of rocmlab may import besides itself and ``rocmlab`` (the version).
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "data": set(),
    "torchjob": {"common"},
    "datasets": {"common"},
    "doctor": {"common"},
    "fleet": {"common"},
    # The smoke report's ``system`` is read with the doctor's readers (rocmlab.smoke.system).
    "smoke": {"common", "torchjob", "datasets", "doctor"},
    "allreduce": {"common", "torchjob"},
    # The health tiers run the doctor's checks and, on the GPU, the probes of smoke and allreduce.
    "health": {"common", "doctor", "smoke", "allreduce"},
    "commands": {
        "common",
        "torchjob",
        "datasets",
        "doctor",
        "fleet",
        "smoke",
        "allreduce",
        "health",
    },
    "cli": {"commands", "common"},
    "__main__": {"cli"},
}
# The package each command leads to.
COMMAND_PACKAGES = {
    "smoke": "smoke",
    "fetch_mnist": "datasets",
    "doctor": "doctor",
    "fleet_report": "fleet",
    "verified": "fleet",
    "allreduce": "allreduce",
    "health": "health",
}
SHARED = {"common", "torchjob"}
# A command that runs another one passes its arguments through that command's own parser
# (rocmlab health --smoke-arg is checked by rocmlab smoke's parser before anything runs).
PASS_THROUGH = {"health": ("smoke",)}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of rocmlab by dotted name (a package by its ``__init__``)."""
    return {module_name(path): path for path in sorted((SRC / ROOT).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The rocmlab modules ``name`` imports anywhere in its file: ``from pkg import mod`` is
    ``pkg.mod`` when that is a module, else ``pkg``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in known else source)
    return {target for target in found if target in known and target != name}


def graph() -> dict[str, set[str]]:
    every = modules()
    return {name: imports_of(name, path, set(every)) for name, path in every.items()}


def part(name: str) -> str:
    """``smoke`` for rocmlab.smoke.job, ``cli`` for rocmlab.cli, "" for rocmlab itself."""
    return name.split(".")[1] if "." in name else ""


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, and modules that import
    themselves (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(edges.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges.get(node, ()):
                        found.append(sorted(component))
    return found


GRAPH = graph()


def test_the_graph_is_the_whole_package() -> None:
    """The reader sees every module and the imports that matter (a broken reader passes all)."""
    assert {"rocmlab.cli", "rocmlab.smoke.job", "rocmlab.fleet.gather"} <= set(GRAPH)
    assert "rocmlab.commands.smoke" in GRAPH["rocmlab.cli"]
    assert "rocmlab.smoke.checks" in GRAPH["rocmlab.smoke.job"]  # a lazy import counts
    assert "rocmlab.torchjob.distributed" in GRAPH["rocmlab.smoke.checks"]  # from pkg import mod


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    assert cycles(GRAPH) == []


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_each_module_imports_only_what_its_layer_may(name: str) -> None:
    own = part(name)
    allowed = ALLOWED.get(own)
    if allowed is None:
        assert own == "", f"{name}: a part of rocmlab that ALLOWED does not know: add it there"
        allowed = set()
    wrong = sorted(t for t in GRAPH[name] if part(t) not in allowed | {own, ""})
    assert not wrong, f"{name} imports {wrong}: {own or 'rocmlab'} may import {sorted(allowed)}"


def test_no_package_imports_back_up_into_a_command_or_the_cli() -> None:
    up = {
        name: sorted(t for t in targets if part(t) in ("commands", "cli"))
        for name, targets in GRAPH.items()
        if part(name) not in ("commands", "cli", "__main__")
    }
    assert {name: targets for name, targets in up.items() if targets} == {}


@pytest.mark.parametrize("command", sorted(COMMAND_PACKAGES))
def test_each_command_leads_to_its_own_package(command: str) -> None:
    name = f"{ROOT}.commands.{command}"
    targets = GRAPH[name]
    package = COMMAND_PACKAGES[command]
    assert any(part(t) == package for t in targets), f"{name} does not import rocmlab.{package}"
    # What its package is built on (health on the doctor) may be used too; other commands'
    # packages may not.
    others = sorted(
        t
        for t in targets
        if part(t) in set(COMMAND_PACKAGES.values()) - {package} - SHARED - ALLOWED[package]
    )
    assert others == [], f"{name} imports another command's package: {others}"
    commands = sorted(t for t in targets if part(t) == "commands")
    allowed = {f"{ROOT}.commands.argtypes"} | {
        f"{ROOT}.commands.{other}" for other in PASS_THROUGH.get(command, ())
    }
    assert set(commands) <= allowed, commands


def test_every_command_module_has_a_package() -> None:
    names = {p.stem for p in (SRC / ROOT / "commands").glob("*.py")} - {"__init__", "argtypes"}
    assert names == set(COMMAND_PACKAGES)
    for package in set(COMMAND_PACKAGES.values()):
        assert (SRC / ROOT / package / "__init__.py").is_file(), package
