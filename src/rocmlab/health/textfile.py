"""The verdict as a node_exporter textfile (``--textfile FILE.prom``).

Prometheus's text exposition format: one ``# HELP`` and one ``# TYPE`` line per metric name
before its samples, label values in double quotes with backslash, double quote and line feed
escaped (``\\\\``, ``\\"``, ``\\n``), HELP text with backslash and line feed escaped, UTF-8, the
last line ending in a line feed. node_exporter's textfile collector reads ``*.prom`` files from
its directory; the file is written to a temporary name that does not end in ``.prom`` in the
same directory and renamed over the target, so the collector never reads half a file.

Every sample has the label ``tier``: the tier of the run that wrote the file. Runs of different
tiers write different files (the timer's tier 0 and tier 2), so their series never collide.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocmlab.doctor.model import ERROR, FAIL, STATUSES
from rocmlab.health.state import write_atomically

PREFIX = "rocmlab_health"
# (name, help): every metric is a gauge.
METRICS = (
    (
        f"{PREFIX}_check",
        "1 when the check found the node healthy (status pass, warn or skip), 0 when it failed "
        "or could not judge (fail, error)",
    ),
    (f"{PREFIX}_check_status", "1 for the status the check ended with, 0 for the others"),
    (f"{PREFIX}_check_duration_seconds", "How long the check took, in seconds"),
    (f"{PREFIX}_healthy", "1 when no check of the run failed (rocmlab health exit code 0)"),
    (f"{PREFIX}_last_run_timestamp_seconds", "When the run finished, in seconds since the epoch"),
    (f"{PREFIX}_duration_seconds", "How long the run took, in seconds"),
    (f"{PREFIX}_budget_seconds", "The run's time budget (its tier's), in seconds"),
)
UNHEALTHY = (FAIL, ERROR)


def label_value(value: str) -> str:
    """A label value as the exposition format writes it inside double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def help_text(value: str) -> str:
    """HELP text: backslash and line feed escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{label_value(v)}"' for k, v in sorted(labels.items())) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def render(doc: dict[str, Any], finished: float) -> str:
    """The textfile of one run's document; ``finished`` is its end in seconds since the epoch."""
    tier = str(doc["tier"])
    samples: dict[str, list[str]] = {name: [] for name, _unused in METRICS}
    for check in doc["checks"]:
        name, status = check["name"], check["status"]
        samples[f"{PREFIX}_check"].append(
            f"{PREFIX}_check{_labels(check=name, tier=tier)} {int(status not in UNHEALTHY)}"
        )
        for each in STATUSES:
            samples[f"{PREFIX}_check_status"].append(
                f"{PREFIX}_check_status{_labels(check=name, status=each, tier=tier)} "
                f"{int(each == status)}"
            )
        if check["seconds"] is not None:
            samples[f"{PREFIX}_check_duration_seconds"].append(
                f"{PREFIX}_check_duration_seconds{_labels(check=name, tier=tier)} "
                f"{_number(float(check['seconds']))}"
            )
    run = _labels(tier=tier)
    samples[f"{PREFIX}_healthy"].append(f"{PREFIX}_healthy{run} {int(doc['exit_code'] == 0)}")
    samples[f"{PREFIX}_last_run_timestamp_seconds"].append(
        f"{PREFIX}_last_run_timestamp_seconds{run} {_number(round(finished, 3))}"
    )
    samples[f"{PREFIX}_duration_seconds"].append(
        f"{PREFIX}_duration_seconds{run} {_number(float(doc['duration_seconds']))}"
    )
    samples[f"{PREFIX}_budget_seconds"].append(
        f"{PREFIX}_budget_seconds{run} {_number(float(doc['budget_seconds']))}"
    )
    lines = []
    for name, text in METRICS:
        if not samples[name]:
            continue
        lines += [f"# HELP {name} {help_text(text)}", f"# TYPE {name} gauge", *samples[name]]
    return "\n".join(lines) + "\n"


def write(path: Path, doc: dict[str, Any], finished: float) -> None:
    """Write the textfile atomically (OSError when it cannot be written)."""
    write_atomically(path, render(doc, finished))
