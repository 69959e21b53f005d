"""``fleet.junit.xml``: one test suite per declared host, one test case per host x check.

Each host's first case, ``ready``, fails with the reason when the host is not ready (its flags
are in its system-out); then one case per preflight, doctor and smoke check: ``fail`` is a
<failure>, ``error`` (a doctor check that crashed) an <error>, ``skip`` <skipped>, ``warn`` a pass
whose system-out says WARN. The cluster check, when there is one, is the suite ``fleet``.
Undeclared files are not test cases (they are not counted).

The document is written as text, suite by suite (``junit_chunks``), not built as an
xml.etree tree: for 10,000 hosts the tree held about 350,000 elements (seconds to build and
serialize, hundreds of MB). The text is what ``xml.etree.ElementTree.tostring`` writes for that
tree after ``ET.indent`` (tests/python/test_fleet_scale.py compares them): attribute values and
text escaped as ElementTree escapes them, two spaces per level, empty elements as ``<x />``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from rocmlab.common.textsafe import for_terminal
from rocmlab.fleet.records import CLUSTER_PASSING
from rocmlab.fleet.text import flags

# Characters XML 1.0 cannot carry. for_terminal() has written the controls among them (kernel log
# lines may hold escape sequences) as escapes; U+FFFE and U+FFFF are left, and replaced.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
MESSAGE_WIDTH = 200


def _clean(text: str) -> str:
    """``text`` for XML 1.0: controls and bidirectional characters as visible escapes (``\\x1b``),
    what XML cannot carry otherwise replaced by U+FFFD."""
    if text.isprintable():  # nothing to escape or replace: no character above is printable
        return text
    return _NOT_XML.sub("\ufffd", for_terminal(text, markup=True))


def _attr(text: str) -> str:
    """An attribute value as ElementTree writes it."""
    if "&" in text:
        text = text.replace("&", "&amp;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    if ">" in text:
        text = text.replace(">", "&gt;")
    if '"' in text:
        text = text.replace('"', "&quot;")
    if "\r" in text:
        text = text.replace("\r", "&#13;")
    if "\n" in text:
        text = text.replace("\n", "&#10;")
    if "\t" in text:
        text = text.replace("\t", "&#09;")
    return text


def _cdata(text: str) -> str:
    """Element text as ElementTree writes it."""
    if "&" in text:
        text = text.replace("&", "&amp;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    if ">" in text:
        text = text.replace(">", "&gt;")
    return text


def _start(tag: str, attributes: dict[str, str]) -> str:
    return "<" + tag + "".join(f' {key}="{_attr(value)}"' for key, value in attributes.items())


def _leaf(tag: str, attributes: dict[str, str], text: str | None) -> str:
    """An element without children: ``<tag a="v">text</tag>``, or ``<tag a="v" />`` without
    text (ElementTree's short form)."""
    if not text:
        return _start(tag, attributes) + " />"
    return f"{_start(tag, attributes)}>{_cdata(text)}</{tag}>"


class _Case:
    """A test case: its name and its children (already text), and what it counts as."""

    __slots__ = ("children", "classname", "name", "outcome")

    def __init__(self, classname: str, name: str) -> None:
        self.classname = classname  # as the attribute's text: the same for a suite's cases
        self.name = name
        self.children: list[str] = []
        self.outcome = ""  # "failure", "error", "skipped" or "" (passed)

    def text(self, indent: str) -> str:
        start = (
            f'{indent}<testcase classname="{self.classname}" name="{_attr(_clean(self.name))}" '
            'time="0"'
        )
        if not self.children:
            return start + " />"
        inner = "\n" + indent + "  "
        return f"{start}>{inner}{inner.join(self.children)}\n{indent}</testcase>"


def _outcome(case: _Case, tag: str, message: str, body: str | None = None) -> None:
    short = " ".join(for_terminal(message, markup=True).split())  # one line, what it held shown
    if len(short) > MESSAGE_WIDTH:
        short = short[: MESSAGE_WIDTH - 3] + "..."
    text = _clean(body if body is not None else message)
    case.children.append(_leaf(tag, {"message": _clean(short), "type": tag}, text))
    case.outcome = case.outcome or tag


def _system_out(case: _Case, text: str) -> None:
    case.children.append(_leaf("system-out", {}, _clean(text)))


def _suite(name: str, index: int, timestamp: str, cases: list[_Case]) -> str:
    """A test suite and its cases, indented as the first level below the root."""
    counts = _counts(cases)
    attributes = {
        "name": _clean(name),
        "id": str(index),
        "package": "fleet",
        "hostname": _clean(name),
        "timestamp": timestamp,
        "time": "0",
        **{key: str(value) for key, value in counts.items()},
    }
    inner = "\n".join(case.text("    ") for case in cases)
    return f"  {_start('testsuite', attributes)}>\n{inner}\n  </testsuite>"


def _counts(cases: list[_Case]) -> dict[str, int]:
    outcomes = [case.outcome for case in cases]
    return {
        "tests": len(cases),
        "failures": outcomes.count("failure"),
        "errors": outcomes.count("error"),
        "skipped": outcomes.count("skipped"),
    }


def _host_cases(host: dict[str, Any]) -> list[_Case]:
    classname = _attr(_clean(host["host"]))
    ready = _Case(classname, "ready")
    if not host["ready"]:
        _outcome(ready, "failure", f"{host['state']}: {host['reason']}")
    if flags(host):
        _system_out(ready, "\n".join(flags(host)))
    cases = [ready]
    for check in host["checks"]:
        case = _Case(classname, f"{check['source']}.{check['name']}")
        cases.append(case)
        status = check["status"]
        if status == "pass":
            continue
        body = check["detail"] + (f"\nfix: {check['fix']}" if check["fix"] else "")
        if status == "fail":
            _outcome(case, "failure", check["detail"], body)
        elif status == "error":
            _outcome(case, "error", check["detail"], body)
        elif status == "skip":
            case.children.append(_leaf("skipped", {"message": _clean(check["detail"])}, None))
            case.outcome = "skipped"
        elif status == "warn":
            _system_out(case, f"WARN: {body}")
    return cases


def _cluster_cases(cluster: dict[str, Any]) -> list[_Case]:
    case = _Case("fleet", "cluster")  # no character to escape
    if cluster["problem"] is not None:
        _outcome(case, "error", f"unreadable {cluster['file']}: {cluster['problem']}")
    elif cluster["verdict"] not in CLUSTER_PASSING:
        detail = f": {cluster['error']}" if cluster["error"] else ""
        _outcome(case, "failure", f"cluster check verdict {cluster['verdict']}{detail}")
    return [case]


def _all_suites(fleet: dict[str, Any]) -> Iterator[tuple[str, list[_Case]]]:
    for host in fleet["hosts"]:
        yield host["host"], _host_cases(host)
    if fleet["cluster"] is not None:
        yield "fleet", _cluster_cases(fleet["cluster"])


def _totals(fleet: dict[str, Any]) -> dict[str, int]:
    """The document's counts, which its root carries before the suites: what _host_cases and
    _cluster_cases make, counted from the fleet document without making them."""
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for host in fleet["hosts"]:
        statuses = [check["status"] for check in host["checks"]]
        totals["tests"] += 1 + len(statuses)
        totals["failures"] += (not host["ready"]) + statuses.count("fail")
        totals["errors"] += statuses.count("error")
        totals["skipped"] += statuses.count("skip")
    cluster = fleet["cluster"]
    if cluster is not None:
        totals["tests"] += 1
        if cluster["problem"] is not None:
            totals["errors"] += 1
        elif cluster["verdict"] not in CLUSTER_PASSING:
            totals["failures"] += 1
    return totals


def junit_chunks(fleet: dict[str, Any]) -> Iterator[bytes]:
    """The JUnit XML document of the fleet report, UTF-8 with an XML declaration, in pieces of
    a suite each."""
    totals = _totals(fleet)
    root = {"name": "rocmlab fleet-report", "time": "0", **{k: str(v) for k, v in totals.items()}}
    yield b"<?xml version='1.0' encoding='utf-8'?>\n"
    if not fleet["hosts"] and fleet["cluster"] is None:
        yield (_start("testsuites", root) + " />\n").encode("utf-8", "xmlcharrefreplace")
        return
    yield (_start("testsuites", root) + ">\n").encode("utf-8", "xmlcharrefreplace")
    timestamp = fleet["created"].rstrip("Z")
    for index, (name, cases) in enumerate(_all_suites(fleet)):
        yield (_suite(name, index, timestamp, cases) + "\n").encode("utf-8", "xmlcharrefreplace")
    yield b"</testsuites>\n"


def junit_xml(fleet: dict[str, Any]) -> bytes:
    """The JUnit XML document of the fleet report, UTF-8 with an XML declaration."""
    return b"".join(junit_chunks(fleet))
