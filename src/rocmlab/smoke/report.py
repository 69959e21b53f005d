"""The smoke job's report: the JSON written by ``--json`` and the printed summary. No torch needed.

Every key of REPORT_SCHEMA is always present; values a run did not reach (for example after a
data error) are null. docs/smoke-job.md describes each field.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from rocmlab import __version__
from rocmlab.common import contract
from rocmlab.common.errors import UsageError
from rocmlab.common.outputs import finite, write_atomic
from rocmlab.smoke.rocm_wheels import ROCM_WHEELS_SCHEMA
from rocmlab.smoke.system import SYSTEM_SCHEMA

SCHEMA_VERSION = 4
# The choices of --model and --techniques (smoke.model and smoke.techniques implement them) and
# smoke's exit codes (common.errors.ExitCode, and 128 + the signal's number for SIGINT (130) and
# SIGTERM (143)); all from the CLI's contract (rocmlab/data/cli_contract.json).
MODEL_CHOICES = contract.MODELS
TECHNIQUES = contract.TECHNIQUES
EXIT_CODES = list(contract.EXIT_CODES)
DOCTOR_TOOL = "rocmlab doctor"

_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_STR = {"type": ["string", "null"]}
_CHECK = {
    "type": "object",
    "required": ["name", "passed", "detail", "rank"],
    "properties": {
        "name": {"type": "string"},
        "passed": {"type": "boolean"},
        "detail": {"type": "string"},
        "rank": _INT,
    },
}
_EPOCH = {
    "type": "object",
    "required": ["epoch", "loss", "test_accuracy", "seconds", "samples_per_second"],
    "properties": {
        "epoch": {"type": "integer"},
        "loss": {"type": "number"},
        "test_accuracy": {"type": "number"},
        "seconds": {"type": "number"},
        "samples_per_second": {"type": "number"},
    },
}
_RANK = {
    "type": "object",
    "required": ["rank", "host", "device", "device_name", "gfx_arch", "gpu_cpu_max_abs_diff"],
    "properties": {
        "rank": {"type": "integer"},
        "host": {"type": "string"},
        "device": {"type": "string"},
        "device_name": {"type": "string"},
        "gfx_arch": _STR,
        "gpu_cpu_max_abs_diff": _NUM,
    },
}

_KERNEL = {
    "type": "object",
    "required": ["name", "device_time_us", "calls"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "device_time_us": {"type": "number"},
        "calls": {"type": "integer"},
    },
}

# JSON Schema (draft 2020-12) of the report.
REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rocmlab smoke report",
    "type": "object",
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "rocmlab_version": {"type": "string"},
        "created": {"type": "string"},
        "host": {"type": "string"},
        # The machine the job ran on (rocmlab.smoke.system), from schema 3.
        "system": SYSTEM_SCHEMA,
        # The venv's ROCm from wheels (rocmlab.smoke.rocm_wheels), from schema 4.
        "rocm_wheels": ROCM_WHEELS_SCHEMA,
        "passed": {"type": "boolean"},
        "exit_code": {"enum": EXIT_CODES},
        "error": _STR,
        "backend": {"enum": ["rocm", "cuda", "cpu", None]},
        "torch_build": {"enum": ["rocm", "cuda", "cpu", None]},
        "device": _STR,
        "device_name": _STR,
        "gfx_arch": _STR,
        "compute_capability": _STR,
        "device_count": _INT,
        "torch_version": _STR,
        "hip_version": _STR,
        "cuda_version": _STR,
        "gpu_env": {"type": ["object", "null"], "additionalProperties": _STR},
        "world_size": {"type": "integer", "minimum": 1},
        "ranks": {"type": "array", "items": _RANK},
        "dataset": {"enum": list(contract.DATASETS)},
        "data_dir": {"type": "string"},
        "epochs": {"type": "integer", "minimum": 1},
        "batch_size": {"type": "integer", "minimum": 1},
        "optimizer": {"enum": ["adam", "sgd"]},
        "lr": {"type": "number"},
        "momentum": {"type": "number"},
        "seed": {"type": "integer"},
        "amp": {"enum": ["auto", "off", "fp16", "bf16"]},
        "amp_dtype": {"enum": ["float16", "bfloat16", None]},
        "train_seconds": _NUM,
        "samples_per_second": _NUM,
        "test_accuracy": _NUM,
        "min_accuracy": _NUM,
        "loss_first": _NUM,
        "loss_last": _NUM,
        "epoch_stats": {"type": "array", "items": _EPOCH},
        "gpu_cpu_max_abs_diff": _NUM,
        "numeric_tolerance": {
            "type": ["object", "null"],
            "additionalProperties": {
                "type": "object",
                "required": ["atol", "rtol"],
                "properties": {"atol": {"type": "number"}, "rtol": {"type": "number"}},
            },
        },
        "matmul_tflops": {"type": ["object", "null"], "additionalProperties": {"type": "number"}},
        "checks": {"type": "array", "items": _CHECK},
        # The `rocmlab doctor --json` document given with --doctor-json, verbatim.
        "doctor": {"type": ["object", "null"]},
        "model": {"enum": list(MODEL_CHOICES)},
        "techniques": {"type": "array", "items": {"enum": list(TECHNIQUES)}},
        "amp_speedup": _NUM,
        "profile": {
            "type": ["object", "null"],
            "required": ["trace", "top_kernels"],
            "additionalProperties": False,
            "properties": {
                "trace": {"type": "string"},
                "top_kernels": {"type": "array", "items": _KERNEL},
            },
        },
    },
    "additionalProperties": False,
}
REPORT_SCHEMA["required"] = list(REPORT_SCHEMA["properties"])


def new_report(
    options: dict[str, Any], world_size: int, system: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A report with every key present, run options filled in, results null; ``system``: the
    machine's (rocmlab.smoke.system.host_system), null when not given."""
    report: dict[str, Any] = dict.fromkeys(REPORT_SCHEMA["properties"])
    report.update(
        model="mlp",
        techniques=[],
    )
    report.update(
        schema_version=SCHEMA_VERSION,
        rocmlab_version=__version__,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        host=socket.gethostname(),
        system=system,
        passed=False,
        world_size=world_size,
        ranks=[],
        epoch_stats=[],
        checks=[],
        **options,
    )
    return report


def trace_path_for(report_path: Path) -> Path:
    """Where the profile's Chrome trace goes: beside the report (``smoke.json`` ->
    ``smoke.trace.json``)."""
    return report_path.with_name(f"{report_path.stem}.trace.json")


def write_report(report: dict[str, Any], path: Path) -> None:
    """Write the report as strict JSON, atomically."""
    write_atomic(path, json.dumps(finite(report), indent=2) + "\n")


# How deep a doctor document may nest (it nests three levels: the document, a check, its
# evidence); the fleet report reads a smoke report, which embeds it, to 64 levels.
DOCTOR_MAX_DEPTH = 16
_DOCTOR_STATUSES = ("pass", "warn", "fail", "skip", "error")


def _depth(document: Any) -> int:
    """How deep arrays and objects nest in ``document`` (a parsed JSON value), without
    recursion."""
    deepest, stack = 0, [(document, 1)]
    while stack:
        value, level = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if isinstance(value, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


def _doctor_problem(document: dict[str, Any]) -> str | None:
    """What is wrong with a doctor document's shape, or None: the keys the fleet report reads of
    it (rocmlab.fleet.records.read_doctor, which this package does not import), so that the
    smoke report embedding it is one the fleet report can read."""
    if _depth(document) > DOCTOR_MAX_DEPTH:
        return f"arrays and objects nested deeper than any doctor document ({DOCTOR_MAX_DEPTH})"
    version = document.get("schema_version")
    integer = isinstance(version, int) and not isinstance(version, bool)
    if not integer or not isinstance(document.get("host"), str):
        return "no integer 'schema_version' and string 'host'"
    if document.get("verdict") not in ("pass", "warn", "fail"):
        return f"'verdict' is {document.get('verdict')!r}, expected 'pass', 'warn' or 'fail'"
    checks = document.get("checks")
    if not isinstance(checks, list):
        return "'checks' is not an array"
    for index, check in enumerate(checks):
        fits = (
            isinstance(check, dict)
            and all(isinstance(check.get(key), str) for key in ("name", "saw"))
            and check.get("status") in _DOCTOR_STATUSES
            and "fix" in check
            and (check["fix"] is None or isinstance(check["fix"], str))
            and isinstance(check.get("evidence"), list)
            and all(isinstance(item, str) for item in check["evidence"])
        )
        if not fits:
            return (
                f"'checks[{index}]' is not a check (an object with strings 'name' and 'saw', "
                f"'status' one of {', '.join(_DOCTOR_STATUSES)}, 'fix' a string or null, "
                "'evidence' an array of strings)"
            )
    return None


def load_doctor_document(path: Path) -> dict[str, Any]:
    """The ``rocmlab doctor --json`` document in ``path``; UsageError (exit 2) naming the file and
    what is wrong if it is not one (not JSON, nested too deep, a key of the wrong type)."""
    option = f"--doctor-json {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 text ({exc.reason})"
        raise UsageError(f"{option}: cannot read it ({why})") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option}: not JSON ({exc})") from exc
    except RecursionError:
        raise UsageError(
            f"{option}: not a `rocmlab doctor --json` document: arrays and objects nested "
            f"deeper than any doctor document ({DOCTOR_MAX_DEPTH})"
        ) from None
    if not isinstance(document, dict) or document.get("tool") != DOCTOR_TOOL:
        raise UsageError(
            f"{option}: not a `rocmlab doctor --json` document (expected a JSON object with "
            f'"tool": "{DOCTOR_TOOL}")'
        )
    problem = _doctor_problem(document)
    if problem is not None:
        raise UsageError(f"{option}: not a `rocmlab doctor --json` document: {problem}")
    return document


def summary_lines(report: dict[str, Any], with_error: bool = True) -> list[str]:
    """Human-readable summary of a finished (or failed) run; ``with_error``: with its error (left
    out where another line says it)."""
    verdict = "PASSED" if report["passed"] else "FAILED"
    lines = [f"rocmlab smoke: {verdict}"]
    if with_error and report.get("error"):
        lines.append(f"  error     {report['error']}")
    if report.get("test_accuracy") is not None:
        lines.append(
            f"  result    test accuracy {report['test_accuracy']:.4f} (gate >= "
            f"{report['min_accuracy']:.4f}), {report['train_seconds']:.2f} s training, "
            f"{report['samples_per_second']:,.0f} samples/s"
        )
    if report.get("matmul_tflops"):
        probes = ", ".join(f"{k} {v:.2f}" for k, v in report["matmul_tflops"].items())
        lines.append(f"  matmul    TFLOP/s: {probes}")
    for check in report["checks"]:
        mark = "PASS" if check["passed"] else "FAIL"
        rank = f"[rank {check['rank']}]" if check["rank"] is not None else ""
        lines.append(f"  [{mark}] {check['name']}{rank}: {check['detail']}")
    return lines
