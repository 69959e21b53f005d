"""JSON Schema (draft 2020-12) of ``fleet.json``, schema version 1 (docs/fleet-report.md)."""

from __future__ import annotations

from typing import Any

from rocmlab.fleet.gather import FILE_KEYS
from rocmlab.fleet.records import ROLLOUT_STATES, SMOKE_SCHEMAS
from rocmlab.fleet.rules import DRIFT_FIELDS, FLEET_SCHEMA_VERSION

# A host's state: the rollout record's, or the fleet report's own when it has none to go by.
HOST_STATES = (
    *ROLLOUT_STATES,
    "no_report",
    "smoke_failed",
    "release_differs",
    "health_failed",
    "health_stale",
    "health_missing",
    "unreadable",
)

_STR = {"type": ["string", "null"]}
_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_BOOL = {"type": ["boolean", "null"]}


def _object(properties: dict[str, Any], nullable: bool = False) -> dict[str, Any]:
    """An object with exactly ``properties``, all required."""
    return {
        "type": ["object", "null"] if nullable else "object",
        "required": list(properties),
        "properties": properties,
        "additionalProperties": False,
    }


_CHECK = _object(
    {
        "source": {"enum": ["preflight", "doctor", "health", "health_tier2", "smoke"]},
        "name": {"type": "string"},
        "status": {"enum": ["pass", "warn", "fail", "skip", "error"]},
        "detail": {"type": "string"},
        "fix": _STR,
    }
)
_DRIFT = _object(
    {"field": {"enum": list(DRIFT_FIELDS)}, "value": {"type": "string"}, "majority": _STR}
)
_SLOW = _object(
    {
        "device_name": {"type": "string"},
        "median": {"type": "number"},
        "threshold": {"type": "number"},
        "ratio": {"type": "number"},
    },
    nullable=True,
)
# A health report as a host's row shows it (rocmlab.fleet.rules.health_summary).
_HEALTH_REPORT = {
    "verdict": {"enum": ["pass", "warn", "fail"]},
    "tier": {"enum": [0, 1, 2]},
    "finished": {"type": "string"},
    "age_seconds": {"type": "number", "minimum": 0},
    "failed": {
        "type": "array",
        "items": _object({"name": {"type": "string"}, "saw": {"type": "string"}, "fix": _STR}),
    },
}
_HOST = _object(
    {
        "host": {"type": "string"},
        "ready": {"type": "boolean"},
        "state": {"enum": list(HOST_STATES)},
        "reason": _STR,
        "problems": {"type": "array", "items": {"type": "string"}},
        "files": _object(dict.fromkeys(FILE_KEYS, _STR)),
        "rollout": _object(
            {
                "state": {"enum": list(ROLLOUT_STATES)},
                "reason": _STR,
                "batch": _INT,
                "rollout_id": {"type": "string"},
                "created": {"type": "string"},
                "rocm": _object({"installed": _STR, "configured": _STR}, nullable=True),
            },
            nullable=True,
        ),
        "preflight": _object(
            {"passed": {"type": "boolean"}, "created": {"type": "string"}}, nullable=True
        ),
        "machine": _STR,
        "report_schema": {"enum": [*SMOKE_SCHEMAS, None]},
        "smoke_passed": _BOOL,
        "exit_code": _INT,
        "error": _STR,
        "backend": {"enum": ["rocm", "cuda", "cpu", None]},
        "device_name": _STR,
        "gfx_arch": _STR,
        "distribution": _STR,
        "versions": _object(dict.fromkeys(DRIFT_FIELDS, _STR)),
        "test_accuracy": _NUM,
        "min_accuracy": _NUM,
        "samples_per_second": _NUM,
        "world_size": _INT,
        "matmul_tflops": {"type": ["object", "null"], "additionalProperties": {"type": "number"}},
        "doctor": _object({"verdict": {"enum": ["pass", "warn", "fail"]}}, nullable=True),
        "health": _object(
            {**_HEALTH_REPORT, "reports": {"type": "array", "items": _object(_HEALTH_REPORT)}},
            nullable=True,
        ),
        "known_good": _object(
            {
                "release": _STR,
                "since": {"type": "string"},
                "age_seconds": {"type": "number", "minimum": 0},
            },
            nullable=True,
        ),
        "techniques": {
            "type": "array",
            "items": _object(
                {"name": {"type": "string"}, "passed": _BOOL, "detail": {"type": "string"}}
            ),
        },
        "amp_speedup": _NUM,
        "checks": {"type": "array", "items": _CHECK},
        "drift": {"type": "array", "items": _DRIFT},
        "slow": _SLOW,
    }
)
_COUNT = {"type": "integer", "minimum": 0}
_BYTES = _object({"upstream_bytes": {"type": "integer"}, "served_bytes": {"type": "integer"}})


def _fleet_record(properties: dict[str, Any]) -> dict[str, Any]:
    """An optional fleet-wide record: null (no file), its file and why it is unreadable, or its
    file and ``properties``."""
    return {
        "oneOf": [
            {"type": "null"},
            _object({"file": {"type": "string"}, "problem": {"type": "string"}}),
            _object({"file": {"type": "string"}, "problem": {"type": "null"}, **properties}),
        ]
    }


# JSON Schema (draft 2020-12) of fleet.json.
FLEET_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rocmlab fleet report",
    **_object(
        {
            "schema_version": {"const": FLEET_SCHEMA_VERSION},
            "tool": {"const": "rocmlab fleet-report"},
            "rocmlab_version": {"type": "string"},
            "created": {"type": "string"},
            "reports_dir": {"type": "string"},
            "declared": _object({"source": {"type": "string"}, "reader": {"type": "string"}}),
            "slow_fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "health_max_age_seconds": {"type": ["number", "null"], "exclusiveMinimum": 0},
            "ready": {"type": "boolean"},
            "summary": _object(
                dict.fromkeys(
                    ("declared", "ready", "not_ready", "drift", "slow", "undeclared"), _COUNT
                )
            ),
            "hosts": {"type": "array", "items": _HOST},
            "undeclared": {
                "type": "array",
                "items": _object({"file": {"type": "string"}, "reason": {"type": "string"}}),
            },
            "drift": _object(
                dict.fromkeys(
                    DRIFT_FIELDS,
                    _object(
                        {
                            "majority": _STR,
                            "counts": {
                                "type": "object",
                                "additionalProperties": {"type": "integer", "minimum": 1},
                            },
                        }
                    ),
                )
            ),
            "speed_groups": {
                "type": "array",
                "items": _object(
                    {
                        "device_name": {"type": "string"},
                        "world_size": {"type": "integer", "minimum": 1},
                        "hosts": {"type": "array", "items": {"type": "string"}},
                        "median": {"type": "number"},
                        "threshold": {"type": "number"},
                    }
                ),
            },
            "cache": _fleet_record(
                {
                    "cache_host": {"type": "string"},
                    "kinds": {"type": "object", "additionalProperties": _BYTES},
                }
            ),
            "cluster": _fleet_record(
                {"verdict": {"type": "string"}, "backend": _STR, "world_size": _INT, "error": _STR}
            ),
        }
    ),
}
