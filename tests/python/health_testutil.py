"""Fixture machines for the ``rocmlab health`` tests: the doctor's fixture machines
(tests/fixtures/doctor/) with the health overlays (tests/fixtures/health/, see its README), and
the command run on them in a subprocess."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from doctor_fixtures import CASES, FIXTURES, build, case_config
from rocmlab_testutil import run_cli

from rocmlab.doctor.context import Context
from rocmlab.health.report import HEALTH_SCHEMA

HEALTH = FIXTURES / "health"


@dataclass
class Machine:
    """A fixture machine assembled under ``tmp``, with its kernel log in a file of its own."""

    ctx: Context
    tmp: Path
    log: Path
    commands: Path | None

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    def sys(self, relative: str) -> Path:
        return self.ctx.sysfs_root / relative

    def root(self, relative: str) -> Path:
        return self.ctx.root / relative


def machine(tmp: Path, case: str, overlays: tuple[str, ...] = (), **override: Any) -> Machine:
    ctx = build(case, tmp / "machine", **override)
    for overlay in overlays:
        for part, target in (("sys", ctx.sysfs_root), ("root", ctx.root)):
            if (HEALTH / overlay / part).is_dir():
                shutil.copytree(HEALTH / overlay / part, target, dirs_exist_ok=True)
    config = {**case_config(case), **override}
    source = (
        FIXTURES / config["kernel_log"] if config.get("kernel_log") else CASES / case / "kernel.log"
    )
    log = tmp / "kernel.log"
    log.write_text(source.read_text() if source.is_file() else "")
    commands = (
        FIXTURES / config["commands"] if config.get("commands") else CASES / case / "commands"
    )
    return Machine(ctx, tmp, log, commands if commands.is_dir() else None)


def health(
    m: Machine, *args: str, tier: int = 0, env: dict[str, str] | None = None, timeout: float = 600
) -> tuple[int, str, dict[str, Any] | None]:
    """Run the command on the machine: (exit code, stdout + stderr, the JSON report)."""
    report = m.tmp / "health.json"
    report.unlink(missing_ok=True)
    argv = ["health", "--tier", str(tier), "--sysfs-root", str(m.ctx.sysfs_root)]
    argv += ["--dev-root", str(m.ctx.dev_root), "--root", str(m.ctx.root)]
    argv += ["--kernel-log", str(m.log), "--state-dir", str(m.state), "--json", str(report)]
    if m.commands is not None:
        argv += ["--commands-from", str(m.commands)]
    if m.ctx.expect_gpus is not None and "--expect-gpus" not in args:
        argv += ["--expect-gpus", str(m.ctx.expect_gpus)]
    result = run_cli(*argv, *args, env=env, timeout=timeout)
    doc = json.loads(report.read_text()) if report.exists() else None
    if doc is not None:
        jsonschema.validate(doc, HEALTH_SCHEMA)
    return result.returncode, result.stdout + result.stderr, doc


def checks(doc: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    assert doc is not None
    return {check["name"]: check for check in doc["checks"]}


def status(doc: dict[str, Any] | None, name: str) -> str:
    return checks(doc)[name]["status"]
