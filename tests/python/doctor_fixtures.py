"""Build a doctor Context from a case under tests/fixtures/doctor/ (see its README.md).

A case's ``case.json`` names the trees it is assembled from: sysfs trees overlaid in order (the
role's tests/fixtures/sysfs trees, then the case's own ``sys/``), root trees (then the case's
``root/``), an ``ls -l`` listing of the device nodes, recorded command outputs, the account and
its login groups, the environment and PyTorch's answers. Git keeps neither device nodes nor file
ownership, so the nodes are created as plain files with the listing's modes, and /etc/group's
line for the listing's group is given the gid those files get on the machine running the tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from rocmlab_testutil import REPO

from rocmlab.doctor.context import (
    CommandResult,
    Context,
    KernelLog,
    TorchInfo,
    UserInfo,
    parse_group,
    recorded_runner,
)

FIXTURES = REPO / "tests" / "fixtures"
CASES = FIXTURES / "doctor"
LS_LINE = re.compile(r"^([bcdlps-][rwxsStT-]{9})\s+\d+\s+(\S+)\s+(\S+)\s+.*\s(/dev/\S+)$")


def case_config(name: str) -> dict[str, Any]:
    """A case's case.json."""
    return json.loads((CASES / name / "case.json").read_text())


def _overlay(sources: list[Path], target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)


def _mode(text: str) -> int:
    mode = 0
    for index, char in enumerate(text[1:]):
        if char != "-":
            mode |= 1 << (8 - index)
    return mode


def make_dev(listing: str, dev: Path) -> list[str]:
    """Plain files standing for the listed nodes, with their modes; the groups they name."""
    groups = []
    for line in listing.splitlines():
        match = LS_LINE.match(line.strip())
        if not match:
            continue
        path = dev / match[4].removeprefix("/dev/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        os.chmod(path, _mode(match[1]))
        groups.append(match[3])
    shm = dev / "shm"
    shm.mkdir(exist_ok=True)
    os.chmod(shm, 0o1777)
    return groups


def _regroup(group_file: Path, names: list[str]) -> None:
    """Give the listing's groups the gid the created node files have here."""
    if not group_file.is_file():
        return
    gid = os.getgid()
    lines = []
    for line in group_file.read_text().splitlines():
        parts = line.split(":")
        if len(parts) == 4 and parts[0] in names:
            parts[2] = str(gid)
        lines.append(":".join(parts))
    group_file.write_text("\n".join(lines) + "\n")


def build(name: str, tmp: Path, **override: Any) -> Context:
    """The case's Context, its trees assembled under ``tmp``. Keyword arguments replace
    case.json entries (``env``, ``user``, ``torch``, ``expect_gpus``, ``commands``, ...)."""
    config = {**case_config(name), **override}
    own = CASES / name
    sysfs, root, dev = tmp / "sys", tmp / "root", tmp / "dev"
    _overlay([FIXTURES / p for p in config.get("sysfs", [])] + [own / "sys"], sysfs)
    _overlay([FIXTURES / p for p in config.get("root", [])] + [own / "root"], root)
    dev.mkdir()
    listing_path = config.get("dev", "__own__")
    listing = (
        own / "dev.ls" if listing_path == "__own__" else listing_path and FIXTURES / listing_path
    )
    names = make_dev(listing.read_text(), dev) if listing and listing.is_file() else []
    make_dev("", dev)
    _regroup(root / "etc" / "group", names)
    commands = config.get("commands")
    if isinstance(commands, list):
        # Other cases' recorded outputs overlaid in order, then the case's own.
        folder = tmp / "commands"
        _overlay([FIXTURES / p for p in commands] + [own / "commands"], folder)
    else:
        folder = FIXTURES / commands if commands else own / "commands"
    log_path = config.get("kernel_log")
    log_file = FIXTURES / log_path if log_path else own / "kernel.log"
    log = (
        KernelLog(log_file.read_text(), str(log_file.relative_to(FIXTURES)))
        if log_file.is_file()
        else KernelLog("", "empty fixture log")
    )
    return Context(
        sysfs_root=sysfs,
        dev_root=dev,
        root=root,
        env=dict(config.get("env", {})),
        user=_user(config.get("user"), root),
        run=recorded_runner(folder),
        kernel_log=log,
        torch_probe=_torch(config.get("torch")),
        expect_gpus=config.get("expect_gpus"),
    )


def _user(spec: dict[str, Any] | None, root: Path) -> UserInfo:
    if spec is None:
        return UserInfo("root", 0, 0, frozenset({0}))
    groups = parse_group((root / "etc" / "group").read_text())
    gids = {groups[name].gid for name in spec["groups"] if name in groups}
    return UserInfo(spec["name"], spec["uid"], spec["gid"], frozenset(gids | {spec["gid"]}))


def _torch(spec: dict[str, Any] | None):
    if spec is None:
        return lambda: TorchInfo(error="PyTorch is not installed in this fixture")
    return lambda: TorchInfo(**spec)


def answer(text: str) -> CommandResult:
    """A command's recorded output."""
    return CommandResult(0, text)
