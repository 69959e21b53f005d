"""The plain-text table printed at the end of a run: one line per declared host.

Everything a record says is shown through rocmlab.common.textsafe.for_terminal: an escape
sequence, a newline or a bidirectional control from a lab machine is printed as ``\\x1b``, ``\\n``
or ``\\u202e``, so no record can colour, move, overwrite or add a line of the table.
"""

from __future__ import annotations

from typing import Any

from rocmlab.common.textsafe import for_terminal
from rocmlab.fleet.text import (
    headline,
    health_text,
    key_figures,
    known_good_text,
    rocm_text,
    short_flags,
    shows_health,
    shows_known_good,
    shows_rocm_wheels,
)

DETAIL_WIDTH = 120
# The known-good column: a release (64 characters at most, rocmlab.fleet.records) and its age.
KNOWN_WIDTH = 40


def _clip(text: str, width: int) -> str:
    """``text`` made visible, its runs of spaces as one, cut to ``width`` characters."""
    text = " ".join(for_terminal(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def table_lines(fleet: dict[str, Any]) -> list[str]:
    """Host, state, the latest health verdict and its age (when there are health reports), the
    known-good release and its age (when a rollout record names one), the system's and the
    venv's ROCm (when a smoke report names ROCm from wheels), flags, and the reason (not ready)
    or the key figures (ready)."""
    hosts = fleet["hosts"]
    names = [for_terminal(h["host"]) for h in hosts]
    width = max([len("HOST"), *(len(name) for name in names)])
    states = [h["state"].upper() if not h["ready"] else "READY" for h in hosts]
    state_width = max([len("STATE"), *(len(s) for s in states)])
    # Once: without health reports, shows_health looks at every host.
    with_health = shows_health(fleet)
    healths = [health_text(h) if with_health else "" for h in hosts]
    health_width = max([len("HEALTH"), *(len(text) for text in healths)])
    health_head = f"{'HEALTH':<{health_width}}  " if with_health else ""
    with_known = shows_known_good(fleet)
    knowns = [_clip(known_good_text(h), KNOWN_WIDTH) if with_known else "" for h in hosts]
    known_width = max([len("KNOWN-GOOD"), *(len(text) for text in knowns)])
    known_head = f"{'KNOWN-GOOD':<{known_width}}  " if with_known else ""
    with_rocm = shows_rocm_wheels(fleet)
    rocms = [_clip(rocm_text(h), KNOWN_WIDTH) if with_rocm else "" for h in hosts]
    rocm_width = max([len("ROCM (SYSTEM, VENV)"), *(len(text) for text in rocms)])
    rocm_head = f"{'ROCM (SYSTEM, VENV)':<{rocm_width}}  " if with_rocm else ""
    head = f"{health_head}{known_head}{rocm_head}"
    lines = [f"{'HOST':<{width}}  {'STATE':<{state_width}}  {head}DETAIL"]
    rows = zip(hosts, names, states, healths, knowns, rocms, strict=True)
    for host, name, state, health, known, rocm in rows:
        detail = key_figures(host) if host["ready"] else host["reason"] or ""
        detail = "".join(f"[{flag}] " for flag in short_flags(host)) + detail
        column = f"{health:<{health_width}}  " if with_health else ""
        column += f"{known:<{known_width}}  " if with_known else ""
        column += f"{rocm:<{rocm_width}}  " if with_rocm else ""
        lines.append(
            f"{name:<{width}}  {state:<{state_width}}  {column}{_clip(detail, DETAIL_WIDTH)}"
        )
    for item in fleet["undeclared"]:
        lines.append(f"undeclared: {for_terminal(item['file'])}: {for_terminal(item['reason'])}")
    for name in ("cluster", "cache"):
        record = fleet[name]
        if record is not None and record["problem"] is not None:
            file, problem = for_terminal(record["file"]), for_terminal(record["problem"])
            lines.append(f"{name}: unreadable {file}: {problem}")
    cluster = fleet["cluster"]
    if cluster is not None and cluster["problem"] is None:
        lines.append(f"cluster check: {_clip(cluster['verdict'], DETAIL_WIDTH)}")
    lines.append(f"fleet: {headline(fleet)}")
    return lines
