"""``fleet.junit.xml``: one test suite per declared host, one test case per host x check.

Each host's first case, ``ready``, fails with the reason when the host is not ready (its flags
and its known-good release are in its system-out); then one case per preflight, doctor and smoke
check: ``fail`` is a <failure>, ``error`` (a doctor check that crashed) an <error>, ``skip``
<skipped>, ``warn`` a pass whose system-out says WARN. The cluster check, when there is one, is
the suite ``fleet``. Undeclared files are not test cases (they are not counted).

The document is written as text, suite by suite (``junit_chunks``), not built as an
xml.etree tree: for 10,000 hosts the tree held about 350,000 elements (seconds to build and
serialize, hundreds of MB). The text is what ``xml.etree.ElementTree.tostring`` writes for that
tree after ``ET.indent`` (tests/python/test_fleet_scale.py compares them): attribute values and
text escaped as ElementTree escapes them, two spaces per level, empty elements as ``<x />``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from operator import itemgetter
from typing import Any

from rocmlab.common.textsafe import for_terminal
from rocmlab.fleet.records import CLUSTER_PASSING, SHARED_CHECKS
from rocmlab.fleet.text import age_text, flags

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


CASE_INDENT = "    "  # a test case's, below its suite below the root
# A test case as _Case.made gives it: its text after the classname, and its outcome.
_Made = tuple[str, str]


class _Case:
    """A test case: its name and its children (already text), and what it counts as."""

    __slots__ = ("children", "name", "outcome")

    def __init__(self, name: str) -> None:
        self.name = name
        self.children: list[str] = []
        self.outcome = ""  # "failure", "error", "skipped" or "" (passed)

    def made(self) -> _Made:
        """(the case's text after its classname, its outcome). A suite's cases share their
        classname, which the suite writes before each (_suite)."""
        start = f' name="{_attr(_clean(self.name))}" time="0"'
        if not self.children:
            return start + " />", self.outcome
        inner = "\n" + CASE_INDENT + "  "
        return f"{start}>{inner}{inner.join(self.children)}\n{CASE_INDENT}</testcase>", self.outcome


def _outcome(case: _Case, tag: str, message: str, body: str | None = None) -> None:
    short = " ".join(for_terminal(message, markup=True).split())  # one line, what it held shown
    if len(short) > MESSAGE_WIDTH:
        short = short[: MESSAGE_WIDTH - 3] + "..."
    text = _clean(body if body is not None else message)
    case.children.append(_leaf(tag, {"message": _clean(short), "type": tag}, text))
    case.outcome = case.outcome or tag


def _system_out(case: _Case, text: str) -> None:
    case.children.append(_leaf("system-out", {}, _clean(text)))


def _suite(name: str, index: int, timestamp: str, classname: str, cases: list[_Made]) -> str:
    """A test suite and its cases (each as _Case.made gives it, ``classname`` the attribute's
    text), indented as the first level below the root."""
    counts = _counts([outcome for _text, outcome in cases])
    attributes = {
        "name": _clean(name),
        "id": str(index),
        "package": "fleet",
        "hostname": _clean(name),
        "timestamp": timestamp,
        "time": "0",
        **{key: str(value) for key, value in counts.items()},
    }
    start = f'{CASE_INDENT}<testcase classname="{classname}"'
    inner = "\n".join(start + text for text, _outcome in cases)
    return f"  {_start('testsuite', attributes)}>\n{inner}\n  </testsuite>"


def _counts(outcomes: list[str]) -> dict[str, int]:
    return {
        "tests": len(outcomes),
        "failures": outcomes.count("failure"),
        "errors": outcomes.count("error"),
        "skipped": outcomes.count("skipped"),
    }


def known_good_lines(host: dict[str, Any]) -> list[str]:
    """``known-good: ROCm 6.4.2 since 2026-12-01T09:00:00Z (3d ago)``, for the ready case's
    system-out; nothing without a known-good record."""
    known = host["known_good"]
    if known is None:
        return []
    release = f"ROCm {known['release']}" if known["release"] is not None else "no AMD ROCm"
    return [f"known-good: {release} since {known['since']} ({age_text(known['age_seconds'])} ago)"]


def _host_cases(host: dict[str, Any]) -> list[_Made]:
    ready = _Case("ready")
    if not host["ready"]:
        _outcome(ready, "failure", f"{host['state']}: {host['reason']}")
    said = [*flags(host), *known_good_lines(host)]
    if said:
        _system_out(ready, "\n".join(said))
    return [ready.made(), *(_check_case(*_take_check(check)) for check in host["checks"])]


_take_check = itemgetter("source", "name", "status", "detail", "fix")


@lru_cache(maxsize=SHARED_CHECKS)
def _check_case(source: str, name: str, status: str, detail: str, fix: str | None) -> _Made:
    """The case of one of a host's checks. Most checks are the same on every host, and so are
    their cases but for the classname: each distinct one is made once."""
    case = _Case(f"{source}.{name}")
    if status == "pass":
        return case.made()
    body = detail + (f"\nfix: {fix}" if fix else "")
    if status == "fail":
        _outcome(case, "failure", detail, body)
    elif status == "error":
        _outcome(case, "error", detail, body)
    elif status == "skip":
        case.children.append(_leaf("skipped", {"message": _clean(detail)}, None))
        case.outcome = "skipped"
    elif status == "warn":
        _system_out(case, f"WARN: {body}")
    return case.made()


def _cluster_cases(cluster: dict[str, Any]) -> list[_Made]:
    case = _Case("cluster")
    if cluster["problem"] is not None:
        _outcome(case, "error", f"unreadable {cluster['file']}: {cluster['problem']}")
    elif cluster["verdict"] not in CLUSTER_PASSING:
        detail = f": {cluster['error']}" if cluster["error"] else ""
        _outcome(case, "failure", f"cluster check verdict {cluster['verdict']}{detail}")
    return [case.made()]


def _all_suites(fleet: dict[str, Any]) -> Iterator[tuple[str, str, list[_Made]]]:
    """Each suite's name, its cases' classname (as the attribute's text) and its cases."""
    for host in fleet["hosts"]:
        yield host["host"], _attr(_clean(host["host"])), _host_cases(host)
    if fleet["cluster"] is not None:
        yield "fleet", "fleet", _cluster_cases(fleet["cluster"])  # no character to escape


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
    for index, (name, classname, cases) in enumerate(_all_suites(fleet)):
        suite = _suite(name, index, timestamp, classname, cases)
        yield (suite + "\n").encode("utf-8", "xmlcharrefreplace")
    yield b"</testsuites>\n"


def junit_xml(fleet: dict[str, Any]) -> bytes:
    """The JUnit XML document of the fleet report, UTF-8 with an XML declaration."""
    return b"".join(junit_chunks(fleet))
