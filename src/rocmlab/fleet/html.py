"""``fleet.html``: the fleet report as one self-contained page (inline CSS and SVG, no script,
no external reference), for a person to open in a browser.

Every host row carries ``data-host``, ``data-state``, ``data-ready`` and ``data-flags`` so that
tests (and scripts) can read the rendered page. Every value goes through ``_e``: HTML-escaped, and
control and bidirectional characters shown as escapes (rocmlab.common.textsafe.for_terminal).
"""

from __future__ import annotations

from html import escape
from typing import Any

from rocmlab.common.textsafe import for_terminal
from rocmlab.fleet.chart import speed_chart
from rocmlab.fleet.records import CLUSTER_PASSING, ROOT_TIERS
from rocmlab.fleet.text import (
    DRIFT_NAMES,
    age_text,
    drift_text,
    headline,
    known_good_release,
    number,
    shows_health,
    shows_known_good,
    slow_text,
    tflops,
)

STYLE = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1a1a1a;
       margin: 1.5rem; background: #fafafa; }
h1 { font-size: 1.6rem; margin: 0 0 .3rem; }
h2 { font-size: 1.2rem; margin: 1.8rem 0 .6rem; }
.verdict { font-size: 1.25rem; padding: .6rem .9rem; border-radius: 6px; display: inline-block;
           margin: .4rem 0; }
.verdict.ok { background: #dcefdc; color: #14521a; border: 1px solid #8cc28f; }
.verdict.bad { background: #fbe0de; color: #8c1d18; border: 1px solid #e39a94; }
.meta { color: #555; margin: .2rem 0; }
.notready a { color: #8c1d18; font-weight: 600; }
.wide { overflow-x: auto; }
table { border-collapse: collapse; background: #fff; }
table#hosts { font-size: 13px; width: 100%; }
th[scope="row"], td.version, td.num { white-space: nowrap; }
td.state { min-width: 11rem; }
td.flags { min-width: 8rem; }
td.gpu { min-width: 8rem; }
td.checks { min-width: 14rem; }
td.techniques { white-space: nowrap; }
th, td { border: 1px solid #d4d4d4; padding: .35rem .5rem; vertical-align: top; text-align: left; }
thead th { background: #ececec; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.host.bad > th { border-left: 5px solid #b3261e; }
tr.host.bad { background: #fff5f4; }
tr.host.ok > th { border-left: 5px solid #2e7d32; }
.badge { display: inline-block; padding: 0 .45rem; border-radius: 4px; font-weight: 700;
         font-size: .85rem; letter-spacing: .02em; }
.badge.ok { background: #2e7d32; color: #fff; }
.badge.bad { background: #b3261e; color: #fff; }
.badge.warn { background: #f0b429; color: #1a1a1a; }
.badge.drift { background: #7b5ea7; color: #fff; }
.badge.slow { background: #d9822b; color: #1a1a1a; }
.sub { color: #555; font-size: .85rem; font-weight: normal; }
.reason { color: #8c1d18; margin-top: .2rem; }
td.version b { color: #555; font-weight: 600; }
.drifted { background: #e6dbf5; font-weight: 700; }
ul.checks { margin: 0; padding-left: 1.1rem; }
ul.checks li { margin-bottom: .25rem; }
.fix { color: #14521a; }
.fix::before { content: "fix: "; font-weight: 700; }
.cards { display: flex; gap: 1rem; flex-wrap: wrap; align-items: flex-start; }
.card { background: #fff; border: 1px solid #d4d4d4; border-radius: 6px; padding: .6rem .9rem; }
"""


def _e(value: Any) -> str:
    """``value`` as HTML text or attribute value: escaped, its controls made visible."""
    return escape(for_terminal(str(value), markup=True))


def _state_words(host: dict[str, Any]) -> str:
    return str(host["state"]).replace("_", " ")


def _badge(kind: str, text: str) -> str:
    return f'<span class="badge {kind}">{_e(text)}</span>'


def _summary(fleet: dict[str, Any]) -> str:
    ok = fleet["ready"]
    not_ready = [h for h in fleet["hosts"] if not h["ready"]]
    parts = [
        "<header><h1>rocmlab fleet report</h1>",
        f'<p class="verdict {"ok" if ok else "bad"}" id="verdict">'
        f"{'READY' if ok else 'NOT READY'}: {_e(headline(fleet))}</p>",
    ]
    if not_ready:
        links = ", ".join(
            f'<a href="#host-{_e(h["host"])}">{_e(h["host"])}</a> ({_e(_state_words(h))})'
            for h in not_ready
        )
        parts.append(f'<p class="notready">Not ready: {links}</p>')
    declared = fleet["declared"]
    max_age = fleet["health_max_age_seconds"]
    health = (
        f"health reports older than {age_text(max_age)} fail the host; "
        if max_age is not None
        else ""
    )
    parts.append(
        f'<p class="meta">Declared hosts from {_e(declared["source"])} '
        f"(read by {_e(declared['reader'])}); records from {_e(fleet['reports_dir'])}; "
        f"slow below {fleet['slow_fraction']:g} x the median of the GPU model; {health}"
        f"written {_e(fleet['created'])} by rocmlab {_e(fleet['rocmlab_version'])}.</p></header>"
    )
    return "".join(parts)


def _cards(fleet: dict[str, Any]) -> str:
    cards = []
    cluster = fleet["cluster"]
    if cluster is not None:
        if cluster["problem"] is not None:
            body = f"{_badge('bad', 'UNREADABLE')} {_e(cluster['file'])}: {_e(cluster['problem'])}"
        else:
            verdict = cluster["verdict"]
            kind = "warn" if verdict == "warn" else "ok" if verdict in CLUSTER_PASSING else "bad"
            extra = [
                f"{key} {_e(cluster[key])}"
                for key in ("backend", "world_size")
                if cluster[key] is not None
            ]
            body = _badge(kind, verdict.upper())
            body += f" {', '.join(extra)}" if extra else ""
            if cluster["error"]:
                body += f'<div class="reason">{_e(cluster["error"])}</div>'
        cards.append(f'<div class="card" id="cluster"><strong>Cluster check</strong> {body}</div>')
    cache = fleet["cache"]
    if cache is not None:
        if cache["problem"] is not None:
            body = f"{_badge('bad', 'UNREADABLE')} {_e(cache['file'])}: {_e(cache['problem'])}"
        else:
            rows = "".join(
                f"<tr><td>{_e(kind)}</td><td class='num'>{_bytes(c['upstream_bytes'])}</td>"
                f"<td class='num'>{_bytes(c['served_bytes'])}</td></tr>"
                for kind, c in cache["kinds"].items()
            )
            body = (
                f"on {_e(cache['cache_host'])}<table><thead><tr><th>kind</th>"
                f"<th>fetched upstream</th><th>served to hosts</th></tr></thead>"
                f"<tbody>{rows}</tbody></table>"
            )
        cards.append(f'<div class="card" id="cache"><strong>Lab cache</strong> {body}</div>')
    return f'<section class="cards">{"".join(cards)}</section>' if cards else ""


def _bytes(count: int) -> str:
    """``512 B``, ``52.5 MiB``, ``40.2 GiB`` (binary units)."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:,.0f} B" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} TiB"


def _state_cell(host: dict[str, Any]) -> str:
    if host["ready"]:
        return f'<td class="state">{_badge("ok", "READY")}</td>'
    reason = f'<div class="reason">{_e(host["reason"])}</div>' if host["reason"] else ""
    return f'<td class="state">{_badge("bad", "FAIL")} {_e(_state_words(host))}{reason}</td>'


def _flags_cell(host: dict[str, Any]) -> str:
    items = [f"{_badge('drift', 'DRIFT')} {_e(drift_text(d))}" for d in host["drift"]]
    slow = host["slow"]
    if slow is not None:
        items.append(
            f'<span title="{_e(slow_text(slow))}">{_badge("slow", "SLOW")} '
            f"{slow['ratio']:.2f} x the median ({number(slow['median'])} samples/s)</span>"
        )
    return f'<td class="flags">{"<br>".join(items)}</td>'


def _versions_cell(host: dict[str, Any]) -> str:
    drifted = {d["field"]: d for d in host["drift"]}
    lines = []
    for name, label in DRIFT_NAMES.items():
        value = host["versions"][name]
        shown = _e(value) if value is not None else "&mdash;"
        if name in drifted:
            title = _e(drift_text(drifted[name]))
            lines.append(f'<div class="drifted" title="{title}"><b>{label}</b> {shown}</div>')
        else:
            lines.append(f"<div><b>{label}</b> {shown}</div>")
    return f'<td class="version">{"".join(lines)}</td>'


def _checks_cell(host: dict[str, Any]) -> str:
    shown = [c for c in host["checks"] if c["status"] in ("fail", "error", "warn")]
    if not shown:
        total = len(host["checks"])
        return f'<td class="checks sub">{f"all {total} passed" if total else "&mdash;"}</td>'
    items = []
    for check in shown:
        kind = "warn" if check["status"] == "warn" else "bad"
        fix = f'<div class="fix">{_e(check["fix"])}</div>' if check["fix"] else ""
        items.append(
            f"<li>{_badge(kind, check['status'].upper())} <strong>{_e(check['source'])}/"
            f"{_e(check['name'])}</strong>: {_e(check['detail'])}{fix}</li>"
        )
    return f'<td class="checks"><ul class="checks">{"".join(items)}</ul></td>'


def _health_cell(host: dict[str, Any], max_age: float | None) -> str:
    """The verdict that stands, then each report (root's tier 0, the account's tier 2): its
    verdict when there are two, its tier and age, "stale" past the maximum age (root's)."""
    health = host["health"]
    if health is None:
        return '<td class="health">&mdash;</td>'
    kinds = {"pass": "ok", "warn": "warn", "fail": "bad"}
    two = len(health["reports"]) > 1
    lines = []
    for report in health["reports"]:
        age = age_text(report["age_seconds"])
        stale = (
            max_age is not None and report["tier"] in ROOT_TIERS and report["age_seconds"] > max_age
        )
        verdict = f"{report['verdict'].upper()}, " if two else ""
        when = f"{verdict}tier {report['tier']}, {_e(age)} ago" + (" (stale)" if stale else "")
        lines.append(f'<div class="sub" title="{_e(report["finished"])}">{when}</div>')
    return (
        f'<td class="health">{_badge(kinds[health["verdict"]], health["verdict"].upper())}'
        f"{''.join(lines)}</td>"
    )


def _known_good_cell(host: dict[str, Any]) -> str:
    known = host["known_good"]
    if known is None:
        return '<td class="version">&mdash;</td>'
    age = age_text(known["age_seconds"])
    return (
        f'<td class="version">{_e(known_good_release(host))}'
        f'<div class="sub" title="{_e(known["since"])}">since {_e(age)} ago</div></td>'
    )


def _techniques_cell(host: dict[str, Any]) -> str:
    items = []
    for technique in host["techniques"]:
        verdict = {True: ("ok", "pass"), False: ("bad", "FAIL"), None: ("warn", "no check")}
        kind, word = verdict[technique["passed"]]
        items.append(
            f'<span title="{_e(technique["detail"])}">{_e(technique["name"])} '
            f"{_badge(kind, word)}</span>"
        )
    if host["amp_speedup"] is not None:
        items.append(f"AMP speed-up {host['amp_speedup']:.2f}x")
    return f'<td class="techniques">{"<br>".join(items) or "&mdash;"}</td>'


def _host_row(host: dict[str, Any], columns: dict[str, Any]) -> str:
    flags = ["drift"] * bool(host["drift"]) + ["slow"] * (host["slow"] is not None)
    gpu = _e(host["device_name"]) if host["device_name"] else "&mdash;"
    details = [str(v) for v in (host["gfx_arch"], host["backend"]) if v]
    if details:
        gpu += f'<div class="sub">{_e(", ".join(details))}</div>'
    machine = host["machine"]
    name = _e(host["host"])
    if machine and machine != host["host"]:
        name += f'<div class="sub">hostname {_e(machine)}</div>'
    accuracy = number(host["test_accuracy"], 4)
    if host["min_accuracy"] is not None:
        accuracy += f'<div class="sub">gate {number(host["min_accuracy"], 4)}</div>'
    cells = [
        f'<th scope="row" id="host-{_e(host["host"])}">{name}</th>',
        _state_cell(host),
        _checks_cell(host),
        _flags_cell(host),
        f'<td class="gpu">{gpu}</td>',
        _versions_cell(host),
        *([_known_good_cell(host)] if columns["known_good"] else []),
        f'<td class="num">{accuracy}</td>',
        f'<td class="num">{number(host["samples_per_second"])}</td>',
        f'<td class="num">{"<br>".join(map(_e, tflops(host["matmul_tflops"]).split(", ")))}</td>',
    ]
    if columns["health"]:
        cells.insert(2, _health_cell(host, columns["health_max_age"]))
    if columns["doctor"]:
        verdict = (host["doctor"] or {}).get("verdict")
        kinds = {"pass": "ok", "warn": "warn", "fail": "bad"}
        cells.append(
            f"<td>{_badge(kinds[verdict], verdict.upper()) if verdict else '&mdash;'}</td>"
        )
    if columns["techniques"]:
        cells.append(_techniques_cell(host))
    return (
        f'<tr class="host {"ok" if host["ready"] else "bad"}" data-host="{_e(host["host"])}" '
        f'data-state="{_e(host["state"])}" data-ready="{str(host["ready"]).lower()}" '
        f'data-flags="{" ".join(flags)}">{"".join(cells)}</tr>'
    )


def _hosts_table(fleet: dict[str, Any]) -> str:
    hosts = fleet["hosts"]
    columns = {
        "doctor": any(h["doctor"] for h in hosts),
        "techniques": any(h["techniques"] or h["amp_speedup"] is not None for h in hosts),
        "health": shows_health(fleet),
        "health_max_age": fleet["health_max_age_seconds"],
        "known_good": shows_known_good(fleet),
    }
    heads = ["Host", "State"] + ["Health"] * columns["health"]
    heads += ["Failed checks and their fix", "Flags"]
    heads += ["GPU model (gfx, backend)", "Versions"] + ["Known good"] * columns["known_good"]
    heads += ["Accuracy", "Samples/s", "Matmul TFLOP/s"]
    heads += ["Doctor"] * columns["doctor"] + ["Techniques"] * columns["techniques"]
    head = "".join(f'<th scope="col">{_e(h)}</th>' for h in heads)
    rows = "".join(_host_row(host, columns) for host in hosts)
    return (
        f'<section><h2>Hosts ({len(hosts)} declared)</h2><div class="wide"><table id="hosts">'
        f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div></section>"
    )


def _speed_section(fleet: dict[str, Any]) -> str:
    chart = speed_chart(fleet)
    charted = {name for group in fleet["speed_groups"] for name in group["hosts"]}
    missing = [h["host"] for h in fleet["hosts"] if h["host"] not in charted]
    note = f'<p class="sub">No samples/s figure: {_e(", ".join(missing))}</p>' if missing else ""
    return f'<section id="speed"><h2>Samples/s per host, by GPU model</h2>{chart}{note}</section>'


def _drift_section(fleet: dict[str, Any]) -> str:
    rows = []
    for name, info in fleet["drift"].items():
        if not info["counts"]:
            continue
        counts = ", ".join(f"{_e(v)} on {n}" for v, n in info["counts"].items())
        majority = _e(info["majority"]) if info["majority"] is not None else "none (a tie)"
        rows.append(f"<tr><td>{DRIFT_NAMES[name]}</td><td>{majority}</td><td>{counts}</td></tr>")
    if not rows:
        return ""
    return (
        '<section id="drift"><h2>Versions across the fleet</h2>'
        '<p class="sub">Drift is a flag, not a failure: hosts whose version differs from the '
        "fleet's majority are marked DRIFT.</p><table><thead><tr><th>version</th><th>majority</th>"
        f"<th>values (hosts)</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _undeclared_section(fleet: dict[str, Any]) -> str:
    if not fleet["undeclared"]:
        return ""
    items = "".join(
        f"<li><code>{_e(u['file'])}</code>: {_e(u['reason'])}</li>" for u in fleet["undeclared"]
    )
    return f'<section id="undeclared"><h2>Undeclared files</h2><ul>{items}</ul></section>'


def fleet_html(fleet: dict[str, Any]) -> str:
    """The whole page."""
    title = f"rocmlab fleet report: {headline(fleet)}"
    body = "".join(
        [
            _summary(fleet),
            _cards(fleet),
            _hosts_table(fleet),
            _speed_section(fleet),
            _drift_section(fleet),
            _undeclared_section(fleet),
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>\n<body>{body}</body></html>\n"
    )
