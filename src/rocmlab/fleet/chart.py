"""The inline SVG chart of the HTML report: samples/s per host, grouped by GPU model.

Horizontal bars on one scale for the whole fleet, a heading per GPU model (``device_name``) with
its median, and a dashed line at the slow threshold (slow fraction x median) in groups of two or
more hosts. Slow hosts' bars are orange and say SLOW; hosts that are not ready say so.
"""

from __future__ import annotations

from html import escape
from typing import Any

from rocmlab.common.textsafe import for_terminal
from rocmlab.fleet.text import number

WIDTH = 960
LABEL_W = 250
VALUE_W = 190
BAR_H = 18
ROW_H = 26
HEAD_H = 30
BAR_COLOUR = "#2f6fab"
SLOW_COLOUR = "#d9822b"
MUTED = "#5a5a5a"


def _e(text: str) -> str:
    return escape(for_terminal(text, markup=True))


def _text(x: float, y: float, text: str, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{_e(text)}</text>'


def speed_chart(fleet: dict[str, Any]) -> str:
    """The chart as an inline ``<svg>`` element (empty when no host measured samples/s).

    Hosts without a figure are not drawn: rocmlab.fleet.html lists them under the chart.
    """
    hosts = {host["host"]: host for host in fleet["hosts"]}
    groups = fleet["speed_groups"]
    if not groups:
        return ""
    top = max(hosts[name]["samples_per_second"] for g in groups for name in g["hosts"])
    scale = (WIDTH - LABEL_W - VALUE_W) / top
    parts: list[str] = []
    y = 0.0
    for group in groups:
        model = group["device_name"]
        if group["world_size"] > 1:
            model += f" ({group['world_size']} processes per run)"
        heading = f"{model}: {len(group['hosts'])} host(s), median {number(group['median'])}"
        if len(group["hosts"]) > 1:
            heading += f" samples/s, slow below {number(group['threshold'])}"
        else:
            heading += " samples/s (one host: no peers to compare)"
        parts.append(_text(0, y + 20, heading, font_weight="bold", font_size="14"))
        y += HEAD_H
        first_row = y
        for name in group["hosts"]:
            host = hosts[name]
            speed = host["samples_per_second"]
            slow = host["slow"] is not None
            label = name if host["ready"] else f"{name} (not ready)"
            parts.append(
                f'<g class="bar" data-host="{_e(name)}">'
                + _text(LABEL_W - 8, y + 14, label, text_anchor="end", font_size="13",
                        fill="#b3261e" if not host["ready"] else "#1a1a1a")
                + f'<rect x="{LABEL_W}" y="{y + 2:.1f}" width="{max(speed * scale, 1):.1f}" '
                f'height="{BAR_H}" fill="{SLOW_COLOUR if slow else BAR_COLOUR}"/>'
                + _text(LABEL_W + speed * scale + 6, y + 15,
                        f"{number(speed)}{'  SLOW' if slow else ''}", font_size="13",
                        font_weight="bold" if slow else "normal")
                + "</g>"
            )  # fmt: skip
            y += ROW_H
        if len(group["hosts"]) > 1:
            x = LABEL_W + group["threshold"] * scale
            parts.append(
                f'<line x1="{x:.1f}" y1="{first_row:.1f}" x2="{x:.1f}" y2="{y:.1f}" '
                f'stroke="{MUTED}" stroke-width="1.5" stroke-dasharray="5 4"/>'
            )
        y += 8
    title = "Training samples/s per host, grouped by GPU model"
    return (
        f'<svg role="img" aria-label="{title}" '
        f'viewBox="0 0 {WIDTH} {y:.0f}" width="{WIDTH}" height="{y:.0f}" '
        f'font-family="system-ui, sans-serif"><title>{title}</title>{"".join(parts)}</svg>'
    )
