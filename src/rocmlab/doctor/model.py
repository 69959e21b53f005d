"""What a check returns, the verdict over all of them, and the JSON document (schema_version 1).

docs/doctor.md describes the document; DOCTOR_SCHEMA is its JSON Schema, which the smoke report
embeds verbatim under ``doctor`` and the tests validate against.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmlab.common.outputs import write_atomic
from rocmlab.common.textsafe import for_terminal, valid_unicode

SCHEMA_VERSION = 1
TOOL = "rocmlab doctor"

PASS = "pass"
WARN = "warn"
FAIL = "fail"
SKIP = "skip"
ERROR = "error"
STATUSES = (PASS, WARN, FAIL, SKIP, ERROR)


@dataclass
class Result:
    """One check's outcome. ``fix`` is one sentence naming the command or rocmlab variable."""

    status: str
    saw: str
    fix: str | None = None
    evidence: list[str] = field(default_factory=list)
    name: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The check as the JSON document lists it."""
        return {
            "name": self.name,
            "status": self.status,
            "saw": self.saw,
            "fix": self.fix,
            "evidence": list(self.evidence),
        }


def passed(saw: str, evidence: list[str] | None = None) -> Result:
    """A PASS."""
    return Result(PASS, saw, None, evidence or [])


def warned(saw: str, fix: str, evidence: list[str] | None = None) -> Result:
    """A WARN: works, but something will bite or cannot be confirmed."""
    return Result(WARN, saw, fix, evidence or [])


def failed(saw: str, fix: str, evidence: list[str] | None = None) -> Result:
    """A FAIL: training on the GPU will not work (or not correctly) until it is fixed."""
    return Result(FAIL, saw, fix, evidence or [])


def skipped(saw: str) -> Result:
    """A SKIP: the check does not apply here; ``saw`` says why."""
    return Result(SKIP, saw)


def verdict(results: list[Result]) -> str:
    """fail when any check failed; warn when any warned or crashed; else pass."""
    statuses = {result.status for result in results}
    if FAIL in statuses:
        return FAIL
    if statuses & {WARN, ERROR}:
        return WARN
    return PASS


def exit_code(results: list[Result]) -> int:
    """0 when no check failed, 1 otherwise."""
    return 1 if verdict(results) == FAIL else 0


def document(
    results: list[Result],
    *,
    version: str,
    host: str,
    created: str,
    user: str,
    rocm: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``--json`` document: what the checks saw, as they saw it (JSON escapes control
    characters), with lone surrogates replaced so that it is valid UTF-8 JSON. ROCM: AMD's
    installed ROCm (rocm_installed.summary), listed as ``rocm`` when given."""
    extra = {} if rocm is None else {"rocm": rocm}
    return valid_unicode(
        {
            **extra,
            "schema_version": SCHEMA_VERSION,
            "tool": TOOL,
            "rocmlab_version": version,
            "host": host,
            "created": created,
            "user": user,
            "verdict": verdict(results),
            "exit_code": exit_code(results),
            "checks": [result.as_dict() for result in results],
        }
    )


def format_line(result: Result) -> str:
    """``PASS  name: saw — fix`` (no fix part when there is none), safe for a terminal: what the
    host wrote (sysfs and os-release values, log lines, names) may hold escape sequences, line
    breaks or bidi controls, which are shown escaped (``\\x1b``, ``\\u202e``)."""
    line = f"{result.status.upper():<5} {result.name}: {result.saw}"
    return for_terminal(f"{line} — {result.fix}" if result.fix else line)


def format_verdict(results: list[Result]) -> str:
    """The closing line: the verdict and the count per status."""
    counts = ", ".join(
        f"{sum(r.status == status for r in results)} {status}" for status in STATUSES
    )
    return f"verdict: {verdict(results).upper()} ({counts})"


def write_json(doc: dict[str, Any], target: str) -> None:
    """Write the document to ``target`` atomically (a temporary file renamed over it); ``-``
    writes it to stdout."""
    text = json.dumps(doc, indent=2) + "\n"
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_atomic(Path(target), text, mode=0o644)


_CHECK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "status", "saw", "fix", "evidence"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "status": {"enum": list(STATUSES)},
        "saw": {"type": "string"},
        "fix": {"type": ["string", "null"]},
        "evidence": {"type": "array", "items": {"type": "string"}},
    },
}

_TEXT_OR_NULL = {"type": ["string", "null"]}
# AMD's installed ROCm (rocm_installed.summary): the release line, the release applications
# get, on the Core SDK line the selected core's series, the alternatives group's mode and every
# core found; the legacy release also where both lines are installed. Optional: documents
# written before it have none.
ROCM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["line", "release", "selected", "mode", "legacy", "cores", "problems"],
    "additionalProperties": False,
    "properties": {
        "line": {"enum": ["core", "legacy", None]},
        "release": _TEXT_OR_NULL,
        "selected": _TEXT_OR_NULL,
        "mode": {"enum": ["auto", "manual", None]},
        "legacy": _TEXT_OR_NULL,
        "cores": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["series", "release", "package", "version", "state", "path",
                             "selected"],
                "additionalProperties": False,
                "properties": {
                    "series": {"type": "string"},
                    "release": _TEXT_OR_NULL,
                    "package": _TEXT_OR_NULL,
                    "version": _TEXT_OR_NULL,
                    "state": {"type": "string"},
                    "path": {"type": "string"},
                    "selected": {"type": "boolean"},
                },
            },
        },
        "problems": {"type": "array", "items": {"type": "string"}},
    },
}  # fmt: skip

# JSON Schema (draft 2020-12) of the ``rocmlab doctor --json`` document.
DOCTOR_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rocmlab doctor report",
    "type": "object",
    "required": [
        "schema_version",
        "tool",
        "rocmlab_version",
        "host",
        "created",
        "user",
        "verdict",
        "exit_code",
        "checks",
    ],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "tool": {"const": TOOL},
        "rocmlab_version": {"type": "string"},
        "host": {"type": "string"},
        "created": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"},
        "user": {"type": "string"},
        "verdict": {"enum": [PASS, WARN, FAIL]},
        "exit_code": {"enum": [0, 1]},
        "checks": {"type": "array", "items": _CHECK_SCHEMA},
        "rocm": ROCM_SCHEMA,
    },
}
