"""The smoke report's ``rocm_wheels``: the venv's ROCm from AMD's multi-arch wheels, proven.

When the venv the job runs in has ``rocm-sdk-core`` (rocmlab.common.rocm_wheels), the job asks
its ``rocm-sdk`` command (beside the interpreter) for ``version`` and ``targets`` and runs
``rocm-sdk test``: never through a shell, each bounded in time (``test``: ``--rocm-sdk-timeout``)
and output (the last lines kept). Two checks come of it: ``rocm_sdk_test`` (its exit status,
its last lines quoted when it fails) and ``rocm_wheels_target`` (the GPU the job trains on, as
HSA_OVERRIDE_GFX_VERSION makes the runtime see it, has its device package in the venv). Without
ROCm wheels the section is null and nothing is checked. No torch needed.
"""

from __future__ import annotations

import sysconfig
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rocmlab.common import rocm_wheels
from rocmlab.common.textsafe import for_terminal
from rocmlab.doctor.context import CommandResult, run_command
from rocmlab.doctor.gpus import override_target
from rocmlab.smoke.gates import Check

ROCM_SDK_TIMEOUT = 300.0  # seconds `rocm-sdk test` may take (--rocm-sdk-timeout)
QUERY_TIMEOUT = 20.0  # seconds `rocm-sdk version` / `targets` may take
TAIL_LINES = 20  # lines of `rocm-sdk test` kept in the report
TAIL_BYTES = 16 * 1024  # bytes of its output read back, at most (the last ones)
QUERY_BYTES = 4 * 1024
LINE_CHARS = 300  # characters of one kept line
MAX_TARGETS = 256

Runner = Callable[..., "CommandResult | None"]

_LIST = {"type": "array", "items": {"type": "string"}}
_TEST_SCHEMA = {
    "type": "object",
    "required": ["passed", "exit_code", "timed_out", "seconds", "timeout", "tail", "truncated"],
    "additionalProperties": False,
    "properties": {
        "passed": {"type": "boolean"},
        "exit_code": {"type": ["integer", "null"]},
        "timed_out": {"type": "boolean"},
        "seconds": {"type": "number"},
        "timeout": {"type": "number"},
        "tail": _LIST,
        "truncated": {"type": "boolean"},
    },
}
# JSON Schema of the report's ``rocm_wheels`` (null: no ROCm wheels in the venv), schema 4 on.
ROCM_WHEELS_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "required": [
        "rocm_sdk",
        "package_version",
        "version",
        "targets",
        "devices",
        "torch_devices",
        "test",
    ],
    "additionalProperties": False,
    "properties": {
        "rocm_sdk": {"type": ["string", "null"]},
        "package_version": {"type": "string"},
        "version": {"type": ["string", "null"]},
        "targets": {"type": ["array", "null"], "items": {"type": "string"}},
        "devices": _LIST,
        "torch_devices": _LIST,
        "test": {"oneOf": [{"type": "null"}, _TEST_SCHEMA]},
    },
}


def scripts_dir() -> Path:
    """Where this interpreter's environment keeps its console scripts (a venv's ``bin``)."""
    return Path(sysconfig.get_path("scripts"))


def _line(text: str) -> str:
    text = for_terminal(text.rstrip())
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 3] + "..."


def _tail(result: CommandResult, timed_out: bool) -> list[str]:
    """The last TAIL_LINES lines of stdout, then stderr (a first line cut by the byte bound is
    dropped; after a timeout stderr holds the runner's words, which the check says itself)."""
    lines = result.stdout.splitlines()
    if result.truncated and lines:
        lines = lines[1:]
    lines += [] if timed_out else result.stderr.splitlines()
    return [_line(line) for line in lines if line.strip()][-TAIL_LINES:]


def _query(runner: Runner, command: Path, word: str) -> str | None:
    """``rocm-sdk version`` / ``targets``: its one line of output, None when it fails."""
    result = runner([str(command), word], timeout=QUERY_TIMEOUT, tail=QUERY_BYTES)
    if result is None or result.returncode != 0 or result.truncated:
        return None
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None


def _targets(text: str | None) -> list[str] | None:
    """``gfx1100;gfx1101`` as a list; None unless every item is a gfx target."""
    if text is None:
        return None
    items = [item.strip() for item in text.split(";") if item.strip()]
    if len(items) > MAX_TARGETS or not all(rocm_wheels.GFX_RE.match(i) for i in items):
        return None
    return items


def _run_test(runner: Runner, command: Path, timeout: float) -> dict[str, Any]:
    started = time.monotonic()
    result = runner([str(command), "test"], timeout=timeout, tail=TAIL_BYTES)
    seconds = round(time.monotonic() - started, 2)
    if result is None:
        result = CommandResult(127, "", f"{command}: not found")
    timed_out = result.returncode == 124 and "did not finish within" in result.stderr
    return {
        "passed": result.returncode == 0 and not timed_out,
        "exit_code": None if timed_out else result.returncode,
        "timed_out": timed_out,
        "seconds": seconds,
        "timeout": timeout,
        "tail": _tail(result, timed_out),
        "truncated": result.truncated,
    }


def probe(
    timeout: float = ROCM_SDK_TIMEOUT,
    scripts: Path | None = None,
    path: list[str] | None = None,
    runner: Runner = run_command,
) -> dict[str, Any] | None:
    """The venv's ``rocm_wheels`` section, None without ROCm wheels. ``scripts`` and ``path``:
    the venv's scripts folder and ``sys.path`` (default: this interpreter's)."""
    found = rocm_wheels.installed(path)
    if found is None:
        return None
    command = (scripts or scripts_dir()) / "rocm-sdk"
    section: dict[str, Any] = {
        "rocm_sdk": str(command) if command.is_file() else None,
        "package_version": found.version,
        "version": None,
        "targets": None,
        "devices": list(found.devices),
        "torch_devices": list(found.torch_devices),
        "test": None,
    }
    if section["rocm_sdk"] is None:
        return section
    version = _query(runner, command, "version")
    section["version"] = version if version and rocm_wheels.VERSION_RE.match(version) else None
    section["targets"] = _targets(_query(runner, command, "targets"))
    section["test"] = _run_test(runner, command, timeout)
    return section


def trained_target(gfx_arch: str | None, env: Mapping[str, str | None]) -> str | None:
    """The gfx target whose code the job's GPU runs: HSA_OVERRIDE_GFX_VERSION's when it is set
    (as the doctor reads it), else the device's own (``gfx90a`` of ``gfx90a:sramecc+:xnack-``)."""
    if not gfx_arch:
        return None
    return override_target(env.get("HSA_OVERRIDE_GFX_VERSION") or "") or gfx_arch.split(":")[0]


def test_check(section: dict[str, Any]) -> Check:
    """``rocm_sdk_test``: ``rocm-sdk test`` passed, with its last lines quoted when not."""
    test = section["test"]
    release = section["version"] or section["package_version"]
    if test is None:
        return Check(
            "rocm_sdk_test",
            False,
            f"the venv has rocm-sdk-core {section['package_version']} but no rocm-sdk command "
            "beside its interpreter: reinstall `rocm` at that release (its sdist has the command)",
        )
    if test["passed"]:
        last = test["tail"][-2:] if test["tail"] else []
        return Check(
            "rocm_sdk_test",
            True,
            f"rocm-sdk test passed (ROCm {release} from wheels, {test['seconds']:g} s): "
            + " / ".join(last),
        )
    why = (
        f"did not finish within {test['timeout']:g} s (stopped)"
        if test["timed_out"]
        else f"exited {test['exit_code']}"
    )
    quoted = " | ".join(test["tail"][-TAIL_LINES:]) or "(no output)"
    return Check("rocm_sdk_test", False, f"rocm-sdk test {why}; its last lines: {quoted}")


def target_check(section: dict[str, Any], target: str | None, backend: str | None) -> Check:
    """``rocm_wheels_target``: the GPU's target has its device package in the venv."""
    name = "rocm_wheels_target"
    devices = section["devices"]
    have = ", ".join(devices) or "none"
    if target is None:
        on = "a CPU run" if backend in (None, "cpu") else f"a {backend} run"
        detail = f"skipped: {on} has no GPU target to check (device packages: {have})"
        return Check(name, True, detail)
    # rocm-sdk-device-<gfx> always; amd-torch-device-<gfx> where torch's device packages are in.
    torch_devices = section["torch_devices"]
    wanted = (("rocm-sdk-device", devices, True), ("amd-torch-device", torch_devices, False))
    missing = [p for p, gfxs, always in wanted if (gfxs or always) and target not in gfxs]
    if missing:
        packages = ", ".join(f"{p}-{target}" for p in missing)
        return Check(
            name,
            False,
            f"the GPU runs {target}, but the venv has no {packages} (device packages for: "
            f"{have}): add {rocm_wheels.device_extra(target)}",
        )
    detail = f"the GPU runs {target}: its device package is installed (device packages for: {have})"
    return Check(name, True, detail)


def checks(
    section: dict[str, Any] | None,
    gfx_arch: str | None,
    env: Mapping[str, str | None],
    backend: str | None,
) -> Sequence[Check]:
    """The report's checks of the section: none without ROCm wheels."""
    if section is None:
        return []
    target = trained_target(gfx_arch, env) if backend == "rocm" else None
    return [test_check(section), target_check(section, target, backend)]
