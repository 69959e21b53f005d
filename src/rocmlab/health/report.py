"""The ``rocmlab health --json`` document (schema 1) and its JSON Schema, HEALTH_SCHEMA.

This is what the timer writes and ``rocmlab fleet-report`` reads (docs/health.md, "The JSON
report"). The verdict and exit code follow the doctor's rules (rocmlab.doctor.model): fail when a
check failed; warn when one warned or ended in error (cut at its budget, or crashed); else pass.
"""

from __future__ import annotations

import time
from typing import Any

from rocmlab.common.textsafe import valid_unicode
from rocmlab.doctor.model import FAIL, PASS, ROCM_SCHEMA, STATUSES, WARN, exit_code, verdict
from rocmlab.health.run import Run

SCHEMA_VERSION = 1
TOOL = "rocmlab health"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"


def utc(seconds: float) -> str:
    """``2026-01-30T08:00:00Z``."""
    return time.strftime(TIME_FORMAT, time.gmtime(seconds))


def document(
    run: Run, *, version: str, host: str, user: str, rocm: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The report of one run, as the host's files and commands gave it (see docs/doctor.md,
    "What the host says is data": JSON escapes control characters, lone surrogates are
    replaced so that it is valid UTF-8). ROCM: AMD's installed ROCm (rocm_installed.summary),
    listed as ``rocm`` when given."""
    results = run.results
    extra = {} if rocm is None else {"rocm": rocm}
    return valid_unicode(
        {
            **extra,
            "schema_version": SCHEMA_VERSION,
            "tool": TOOL,
            "rocmlab_version": version,
            "host": host,
            "user": user,
            "tier": run.tier,
            "started": utc(run.started),
            "finished": utc(run.finished),
            "duration_seconds": round(run.duration, 3),
            "budget_seconds": run.budget,
            "verdict": verdict(results),
            "exit_code": exit_code(results),
            "checks": [
                {
                    **check.result.as_dict(),
                    "tier": check.tier,
                    "seconds": check.seconds,
                    "budget_seconds": check.budget,
                }
                for check in run.checks
            ],
        }
    )


_NUMBER_OR_NULL = {"type": ["number", "null"], "minimum": 0}
_CHECK = {
    "type": "object",
    "required": ["name", "tier", "status", "saw", "fix", "evidence", "seconds", "budget_seconds"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "tier": {"enum": [0, 1, 2]},
        "status": {"enum": list(STATUSES)},
        "saw": {"type": "string"},
        "fix": {"type": ["string", "null"]},
        "evidence": {"type": "array", "items": {"type": "string"}},
        "seconds": _NUMBER_OR_NULL,
        "budget_seconds": _NUMBER_OR_NULL,
    },
}

# JSON Schema (draft 2020-12) of the ``rocmlab health --json`` document.
HEALTH_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rocmlab health report",
    "type": "object",
    "required": [
        "schema_version", "tool", "rocmlab_version", "host", "user", "tier", "started",
        "finished", "duration_seconds", "budget_seconds", "verdict", "exit_code", "checks",
    ],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "tool": {"const": TOOL},
        "rocmlab_version": {"type": "string"},
        "host": {"type": "string"},
        "user": {"type": "string"},
        "tier": {"enum": [0, 1, 2]},
        "started": {"type": "string", "pattern": TIME_PATTERN},
        "finished": {"type": "string", "pattern": TIME_PATTERN},
        "duration_seconds": {"type": "number", "minimum": 0},
        "budget_seconds": {"type": "number", "exclusiveMinimum": 0},
        "verdict": {"enum": [PASS, WARN, FAIL]},
        "exit_code": {"enum": [0, 1]},
        "checks": {"type": "array", "items": _CHECK},
        "rocm": ROCM_SCHEMA,
    },
}  # fmt: skip
