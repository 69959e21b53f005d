# Copyright: rocmlab contributors
# Apache License 2.0
"""One line per host from the smoke reports the controller keeps, read as rocmlab fleet-report
reads its records: every byte of a report came from a lab machine."""

from __future__ import annotations

DOCUMENTATION = r"""
name: smoke_summary
author: rocmlab contributors (@rocmlab)
version_added: 0.1.0
short_description: One line on each host's smoke report kept on the controller
description:
  - For each host name, reads I(dir)/<host>.json, the smoke report the controller keeps (the
    C(rocmlab smoke --json) report role smoke_test fetched), and returns one line - PASSED or
    FAILED, the GPU, the test accuracy and samples/s - as playbooks/smoke.yml and site.yml print it.
  - The report came from a lab machine and is read as C(rocmlab fleet-report) reads it - a
    regular file of one name only, never through a symbolic link (opened with O_NOFOLLOW and
    O_NONBLOCK, checked with fstat - a hard link, which could name a file only the controller's
    account may read, is refused too), at most 4 MiB, JSON nested at most 64 deep - and a report
    that cannot be used is named with the reason, never shown.
  - A report that says it passed is PASSED only when its test accuracy is at its own gate
    (min_accuracy), as the smoke job's accuracy check and C(rocmlab fleet-report) judge it.
  - Control, format (zero-width, bidi) and separator characters of the report are shown as
    escapes.
options:
  _terms:
    description: The inventory host names.
    type: list
    elements: str
    required: true
  dir:
    description: The reports directory on the controller (rocmlab_reports_dir).
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Show one line per host (as playbooks/tasks/smoke-summary.yml does)
  ansible.builtin.debug:
    msg: "{{ lookup('rocmlab.rocmlab.smoke_summary', item, dir=rocmlab_reports_dir) }}"
  loop: "{{ groups['all'] }}"
"""

RETURN = r"""
_raw:
  description: >-
    One line per host, e.g. C(ws-01: PASSED, rocm on AMD Radeon RX 7900 XTX (gfx1100), test
    accuracy 95.38 %, 104600 samples/s).
  type: list
  elements: str
"""

import errno
import json
import os
import stat

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.rocmlab.rocmlab.plugins.plugin_utils.terminal import shown

# As rocmlab fleet-report's records (rocmlab.fleet.bounded): the largest report read, and how
# deep its arrays and objects may nest.
MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unusable(Exception):
    """The report cannot be used; the message says why."""


def read_report(directory: str, name: str) -> bytes | None:
    """The bytes of DIRECTORY/NAME, a regular file of one name within MAX_BYTES, read without
    following a link or blocking; None when there is none. Unusable otherwise."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # no report kept yet: check mode, or no smoke job ran on this controller
    except OSError as exc:
        raise AnsibleLookupError(f"dir: {directory!r} cannot be read ({exc.strerror})") from None
    try:
        try:
            fd = os.open(name, _FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Unusable("a symbolic link, not followed") from None
            raise Unusable(f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unusable("not a regular file")
        if st.st_nlink > 1:
            raise Unusable(f"a hard link ({st.st_nlink} names for one file), not read")
        if st.st_size > MAX_BYTES:
            raise Unusable(f"{st.st_size} bytes, more than {MAX_BYTES}")
        chunks, total = [], 0
        while total <= MAX_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_BYTES + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_BYTES:
            raise Unusable(f"more than {MAX_BYTES} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _depth(value) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _number(doc: dict, key: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unusable(f"'{key}' is {type(value).__name__}, expected a number or null")
    return float(value)


def _text(doc: dict, key: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise Unusable(f"'{key}' is {type(value).__name__}, expected a string or null")
    return value


def parse(data: bytes) -> dict:
    """The report's JSON object; Unusable saying what is wrong."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Unusable(f"not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise Unusable(f"arrays and objects nested deeper than any report ({MAX_DEPTH})") from None
    except ValueError as exc:
        raise Unusable(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise Unusable("not a JSON object")
    if _depth(doc) > MAX_DEPTH:
        raise Unusable(f"arrays and objects nested deeper than any report ({MAX_DEPTH})")
    if not isinstance(doc.get("passed"), bool):
        raise Unusable("no boolean 'passed'")
    return doc


def summary(host: str, doc: dict) -> str:
    """The report's line: PASSED only when it says so and its test accuracy is at its own gate."""
    accuracy, gate = _number(doc, "test_accuracy"), _number(doc, "min_accuracy")
    speed = _number(doc, "samples_per_second")
    backend, device = _text(doc, "backend"), _text(doc, "device_name")
    gfx, error = _text(doc, "gfx_arch"), _text(doc, "error")
    verdict = "PASSED" if doc["passed"] else "FAILED"
    if doc["passed"] and (accuracy is None or gate is None):
        verdict = "FAILED (the report says passed, but has no test accuracy and gate)"
    elif doc["passed"] and accuracy < gate:
        verdict = (
            f"FAILED (the report says passed, but its test accuracy {accuracy * 100:.2f} % is "
            f"below its own gate {gate * 100:.2f} %)"
        )
    words = [f"{verdict}, {backend or 'no backend'} on {device or 'no device'}"]
    words[0] += f" ({gfx})" if gfx else ""
    if accuracy is not None:
        words.append(f"test accuracy {accuracy * 100:.2f} %")
    if speed is not None:
        words.append(f"{speed:.0f} samples/s")
    if error and not doc["passed"]:
        words.append(f"error: {error[:300]}")
    return shown(f"{host}: {', '.join(words)}")


def line(directory: str, host: str) -> str:
    """One line on HOST's report in DIRECTORY."""
    name = f"{host}.json"
    try:
        data = read_report(directory, name)
        if data is None:
            return shown(f"{host}: no report (the smoke job did not run there)")
        return summary(host, parse(data))
    except Unusable as exc:
        return shown(f"{host}: unusable report {name}: {exc}")


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        directory = self.get_option("dir")
        lines = []
        for host in terms:
            if not isinstance(host, str) or not host or "/" in host or host in (".", ".."):
                raise AnsibleLookupError(f"{shown(repr(host))} is not an inventory host name")
            lines.append(line(directory, host))
        return lines
