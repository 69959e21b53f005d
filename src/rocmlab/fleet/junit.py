"""``fleet.junit.xml``: one test suite per declared host, one test case per host x check.

Each host's first case, ``ready``, fails with the reason when the host is not ready (its flags
are in its system-out); then one case per preflight, doctor and smoke check: ``fail`` is a
<failure>, ``error`` (a doctor check that crashed) an <error>, ``skip`` <skipped>, ``warn`` a pass
whose system-out says WARN. The cluster check, when there is one, is the suite ``fleet``.
Undeclared files are not test cases (they are not counted).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
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
    return _NOT_XML.sub("\ufffd", for_terminal(text, markup=True))


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(
        suite, "testcase", {"classname": _clean(classname), "name": _clean(name), "time": "0"}
    )


def _outcome(case: ET.Element, tag: str, message: str, body: str | None = None) -> None:
    short = " ".join(for_terminal(message, markup=True).split())  # one line, what it held shown
    if len(short) > MESSAGE_WIDTH:
        short = short[: MESSAGE_WIDTH - 3] + "..."
    element = ET.SubElement(case, tag, {"message": _clean(short), "type": tag})
    element.text = _clean(body if body is not None else message)


def _system_out(case: ET.Element, text: str) -> None:
    ET.SubElement(case, "system-out").text = _clean(text)


def _suite(parent: ET.Element, name: str, index: int, timestamp: str) -> ET.Element:
    return ET.SubElement(
        parent,
        "testsuite",
        {
            "name": _clean(name),
            "id": str(index),
            "package": "fleet",
            "hostname": _clean(name),
            "timestamp": timestamp,
            "time": "0",
        },
    )


def _host_suite(root: ET.Element, host: dict[str, Any], index: int, timestamp: str) -> None:
    suite = _suite(root, host["host"], index, timestamp)
    ready = _case(suite, host["host"], "ready")
    if not host["ready"]:
        _outcome(ready, "failure", f"{host['state']}: {host['reason']}")
    if flags(host):
        _system_out(ready, "\n".join(flags(host)))
    for check in host["checks"]:
        case = _case(suite, host["host"], f"{check['source']}.{check['name']}")
        body = check["detail"] + (f"\nfix: {check['fix']}" if check["fix"] else "")
        if check["status"] == "fail":
            _outcome(case, "failure", check["detail"], body)
        elif check["status"] == "error":
            _outcome(case, "error", check["detail"], body)
        elif check["status"] == "skip":
            ET.SubElement(case, "skipped", {"message": _clean(check["detail"])})
        elif check["status"] == "warn":
            _system_out(case, f"WARN: {body}")


def _count(root: ET.Element) -> None:
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in root.iter("testsuite"):
        cases = suite.findall("testcase")
        counts = {
            "tests": len(cases),
            "failures": sum(c.find("failure") is not None for c in cases),
            "errors": sum(c.find("error") is not None for c in cases),
            "skipped": sum(c.find("skipped") is not None for c in cases),
        }
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))


def junit_xml(fleet: dict[str, Any]) -> bytes:
    """The JUnit XML document of the fleet report, UTF-8 with an XML declaration."""
    root = ET.Element("testsuites", {"name": "rocmlab fleet-report", "time": "0"})
    timestamp = fleet["created"].rstrip("Z")
    for index, host in enumerate(fleet["hosts"]):
        _host_suite(root, host, index, timestamp)
    cluster = fleet["cluster"]
    if cluster is not None:
        suite = _suite(root, "fleet", len(fleet["hosts"]), timestamp)
        case = _case(suite, "fleet", "cluster")
        if cluster["problem"] is not None:
            _outcome(case, "error", f"unreadable {cluster['file']}: {cluster['problem']}")
        elif cluster["verdict"] not in CLUSTER_PASSING:
            detail = f": {cluster['error']}" if cluster["error"] else ""
            _outcome(case, "failure", f"cluster check verdict {cluster['verdict']}{detail}")
    _count(root)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
