"""The ``rocmlab allreduce --json`` document and the printed summary. No PyTorch needed.

Every key of ALLREDUCE_SCHEMA is always present; what a run did not reach is null or empty.
docs/cluster-check.md describes each field.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rocmlab import __version__
from rocmlab.allreduce.msgsize import format_bytes
from rocmlab.common.outputs import finite, write_atomic
from rocmlab.common.textsafe import valid_unicode

SCHEMA_VERSION = 1
TOOL = "rocmlab allreduce"

_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_STR = {"type": ["string", "null"]}
_HOST_PAIR = {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}
_RANK = {
    "type": "object",
    "required": ["rank", "local_rank", "node_rank", "host", "device", "device_name"],
    "properties": {
        "rank": {"type": "integer", "minimum": 0},
        "local_rank": {"type": "integer", "minimum": 0},
        "node_rank": _INT,
        "host": {"type": "string"},
        "device": {"type": "string"},
        "device_name": {"type": "string"},
    },
    "additionalProperties": False,
}
_SIZE = {
    "type": "object",
    "required": [
        "bytes", "elements", "iters", "time_us", "time_us_max", "algbw_gbps", "busbw_gbps",
        "correct", "wrong_elements", "wrong_ranks", "max_abs_error",
    ],
    "properties": {
        "bytes": {"type": "integer", "minimum": 4},
        "elements": {"type": "integer", "minimum": 1},
        "iters": {"type": "integer", "minimum": 1},
        "time_us": {"type": "number", "exclusiveMinimum": 0},
        "time_us_max": {"type": "number", "exclusiveMinimum": 0},
        "algbw_gbps": {"type": "number", "minimum": 0},
        "busbw_gbps": {"type": "number", "minimum": 0},
        "correct": {"type": "boolean"},
        "wrong_elements": {"type": "integer", "minimum": 0},
        "wrong_ranks": {"type": "array", "items": {"type": "integer"}},
        "max_abs_error": _NUM,
    },
    "additionalProperties": False,
}  # fmt: skip
_PAIR = {
    "type": "object",
    "required": [*_SIZE["required"], "hosts", "ranks", "slow"],
    "properties": {
        **_SIZE["properties"],
        "hosts": _HOST_PAIR,
        "ranks": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
        "slow": {"type": "boolean"},
    },
    "additionalProperties": False,
}
_SLOW_PAIR = {
    "type": "object",
    "required": ["hosts", "busbw_gbps", "fraction_of_reference"],
    "properties": {
        "hosts": _HOST_PAIR,
        "busbw_gbps": {"type": "number"},
        "fraction_of_reference": {"type": "number"},
    },
    "additionalProperties": False,
}
_PAIRWISE = {
    "type": ["object", "null"],
    "required": [
        "bytes", "members", "pairs_possible", "pairs_measured", "sampled", "seed",
        "slow_fraction", "reference_busbw_gbps", "median_busbw_gbps",
    ],
    "properties": {
        "bytes": {"type": "integer"},
        "members": {"const": "all ranks of both nodes"},
        "pairs_possible": {"type": "integer", "minimum": 0},
        "pairs_measured": {"type": "integer", "minimum": 0},
        "sampled": {"type": "boolean"},
        "seed": {"type": "integer"},
        "slow_fraction": {"type": "number"},
        "reference_busbw_gbps": _NUM,
        "median_busbw_gbps": _NUM,
    },
    "additionalProperties": False,
}  # fmt: skip
_CHECK = {
    "type": "object",
    "required": ["name", "passed", "detail"],
    "properties": {
        "name": {"type": "string"},
        "passed": {"type": "boolean"},
        "detail": {"type": "string"},
    },
    "additionalProperties": False,
}
_LOST = {
    "type": "object",
    "required": ["rank", "host", "detail"],
    "properties": {"rank": {"type": "integer"}, "host": _STR, "detail": {"type": "string"}},
    "additionalProperties": False,
}

# JSON Schema (draft 2020-12) of the document.
ALLREDUCE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rocmlab allreduce report",
    "type": "object",
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "tool": {"const": TOOL},
        "rocmlab_version": {"type": "string"},
        "created": {"type": "string"},
        "host": {"type": "string"},
        "written_by_rank": {"type": "integer", "minimum": 0},
        "passed": {"type": "boolean"},
        "exit_code": {"enum": [0, 1, 2, 4, 130, 143]},
        "error": _STR,
        "failed_step": _STR,
        "lost_ranks": {"type": "array", "items": _LOST},
        "backend": {"enum": ["nccl", "gloo", None]},
        "device_type": {"enum": ["cuda", "cpu", None]},
        "torch_version": _STR,
        "hip_version": _STR,
        "cuda_version": _STR,
        "world_size": {"type": "integer", "minimum": 1},
        "nodes": _INT,
        "hosts": {"type": "array", "items": {"type": "string"}},
        "ranks": {"type": "array", "items": _RANK},
        "dtype": {"const": "float32"},
        "iters": {"type": "integer", "minimum": 1},
        "warmup": {"type": "integer", "minimum": 0},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0},
        "sizes": {"type": "array", "items": _SIZE},
        "latency_us": _NUM,
        "peak_busbw_gbps": _NUM,
        "pairwise": _PAIRWISE,
        "pairs": {"type": "array", "items": _PAIR},
        "slow_pairs": {"type": "array", "items": _SLOW_PAIR},
        "suspect_hosts": {"type": "array", "items": {"type": "string"}},
        "checks": {"type": "array", "items": _CHECK},
    },
    "additionalProperties": False,
}
ALLREDUCE_SCHEMA["required"] = list(ALLREDUCE_SCHEMA["properties"])


def new_report(
    host: str, rank: int, world_size: int, iters: int, warmup: int, timeout: float
) -> dict[str, Any]:
    """A report with every key present, the run's options filled in, results empty."""
    report: dict[str, Any] = dict.fromkeys(ALLREDUCE_SCHEMA["properties"])
    report.update(
        schema_version=SCHEMA_VERSION,
        tool=TOOL,
        rocmlab_version=__version__,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        host=host,
        written_by_rank=rank,
        passed=False,
        exit_code=1,
        lost_ranks=[],
        world_size=world_size,
        hosts=[],
        ranks=[],
        dtype="float32",
        iters=iters,
        warmup=warmup,
        timeout_s=timeout,
        sizes=[],
        pairs=[],
        slow_pairs=[],
        suspect_hosts=[],
        checks=[],
    )
    return report


def write_json(document: dict[str, Any], path: Path) -> None:
    """Write atomically (rocmlab.common.outputs: several nodes may write the same path on a
    shared file system; each temporary name is unique, each rename atomic). The directory
    must exist: it is not created (commands.allreduce refuses a missing one before the run).
    Strings that came from other hosts are written as valid UTF-8 (textsafe.valid_unicode).
    """
    write_atomic(path, json.dumps(valid_unicode(finite(document)), indent=2) + "\n", mode=0o644)


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The table and verdict rank 0 prints (nccl-tests' columns: size, time, algbw, busbw)."""
    lines = []
    if report["sizes"]:
        lines.append(
            f"{'size':>10} {'iters':>6} {'time us':>11} {'algbw GB/s':>11} " + " busbw GB/s  exact"
        )
        for size in report["sizes"]:
            exact = "yes" if size["correct"] else f"NO ({size['wrong_elements']} wrong)"
            lines.append(
                f"{format_bytes(size['bytes']):>10} {size['iters']:>6} "
                f"{size['time_us']:>11.1f} {size['algbw_gbps']:>11.3f} "
                f"{size['busbw_gbps']:>11.3f}  {exact}"
            )
        lines.append(
            f"latency (smallest size) {_number(report['latency_us'], 1)} us; "
            f"peak busbw {_number(report['peak_busbw_gbps'], 3)} GB/s"
        )
    pairwise = report["pairwise"]
    if pairwise is not None:
        lines.append(
            f"pairs: {pairwise['pairs_measured']} of {pairwise['pairs_possible']} node pairs, "
            f"{format_bytes(pairwise['bytes'])} over all ranks of both nodes; reference busbw "
            f"{_number(pairwise['reference_busbw_gbps'], 3)} GB/s (median of each node's best)"
        )
        for pair in report["pairs"]:
            flag = "  SLOW" if pair["slow"] else ""
            exact = "" if pair["correct"] else "  NOT EXACT"
            lines.append(
                f"  {pair['hosts'][0]} <-> {pair['hosts'][1]}: busbw "
                f"{pair['busbw_gbps']:.3f} GB/s, {pair['time_us']:.1f} us{flag}{exact}"
            )
    for check in report["checks"]:
        mark = "PASS" if check["passed"] else "FAIL"
        lines.append(f"[{mark}] {check['name']}: {check['detail']}")
    if report["error"]:
        lines.append(f"error: {report['error']}")
    lines.append(f"{TOOL}: {'PASSED' if report['passed'] else 'FAILED'}")
    return lines
