#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Count the bytes a lab cache fetched upstream and served to its clients, from its own logs."""

from __future__ import annotations

import glob
import gzip
import json
import os

DOCUMENTATION = r"""
module: lab_cache_stats
short_description: Bytes a lab cache fetched upstream and served, from the servers' own logs
description:
  - "apt: apt-cacher-ng's transfer log (I(apt_log), with its rotated copies C(.1), C(.2.gz), ...):
    each line is C(time|I|bytes|client|path) for bytes fetched from upstream or
    C(time|O|bytes|client|path) for bytes sent to a client (apt-cacher-ng counts the HTTP
    headers too)."
  - "wheels and datasets: the fill log (I(fill_log), written by lab_cache_fill) for the bytes
    fetched upstream, and nginx's access log (I(http_log), the C(rocmlab_lab_cache) format
    C($msec|$status|$body_bytes_sent|$remote_addr|$uri)) for the bytes served; only answers
    200 and 206 under C(/wheels/) and C(/datasets/) count."
  - "apt-cacher-ng also logs an C(I) line of only the response's headers (about 130 bytes) for
    a request that arrives while the same file is still coming in for another client: the file
    crossed the uplink once, and the bytes say so."
  - Read-only. Missing logs count as empty (a cache that served nothing yet).
options:
  apt_log:
    description: apt-cacher-ng's transfer log.
    type: path
    default: /var/log/apt-cacher-ng/apt-cacher.log
  http_log:
    description: nginx's access log of the lab cache's site.
    type: path
    required: true
  fill_log:
    description: The fill log of lab_cache_fill.
    type: path
    required: true
  since:
    description: Count only lines at or after this Unix time (0, every line).
    type: float
    default: 0
  until:
    description: Count only lines before this Unix time (unset, every line from I(since) on).
    type: float
  details:
    description: Also return, per file, how often it was fetched upstream and served.
    type: bool
    default: false
author: rocmlab
"""

RETURN = r"""
kinds:
  description: Per kind (apt, wheels, datasets), the bytes and transfers upstream and served.
  returned: always
  type: dict
  sample:
    apt: {"upstream_bytes": 1000, "upstream_fetches": 2, "served_bytes": 3000, "served_requests": 6}
upstream_bytes:
  description: Bytes fetched upstream, all kinds together.
  returned: always
  type: int
served_bytes:
  description: Bytes served to clients, all kinds together.
  returned: always
  type: int
files:
  description: >-
    With I(details), per kind and file, C(upstream) and C(served) (how many transfers) and
    C(upstream_bytes) and C(served_bytes).
  returned: when details
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 (after the module's docs, by convention)

KINDS = ("apt", "wheels", "datasets")
SERVED_STATUS = ("200", "206")


def log_lines(path):
    """Lines of ``path`` and its rotated copies, oldest first (logrotate's .N and .N.gz)."""
    if not path:
        return
    rotated = []
    for name in glob.glob(glob.escape(path) + ".*"):
        suffix = name[len(path) + 1 :].removesuffix(".gz")
        if suffix.isdigit():
            rotated.append((int(suffix), name))
    for _, name in [*sorted(rotated, reverse=True), (0, path)]:
        if not os.path.isfile(name):
            continue
        opener = gzip.open if name.endswith(".gz") else open
        with opener(name, "rt", encoding="utf-8", errors="replace") as handle:
            yield from handle


def empty_counts():
    return {"upstream_bytes": 0, "upstream_fetches": 0, "served_bytes": 0, "served_requests": 0}


class Tally:
    def __init__(self):
        self.kinds = {kind: empty_counts() for kind in KINDS}
        self.files = {kind: {} for kind in KINDS}

    def add(self, kind, direction, path, size):
        counts = self.kinds[kind]
        if direction == "upstream":
            counts["upstream_bytes"] += size
            counts["upstream_fetches"] += 1
        else:
            counts["served_bytes"] += size
            counts["served_requests"] += 1
        entry = self.files[kind].setdefault(
            path, {"upstream": 0, "upstream_bytes": 0, "served": 0, "served_bytes": 0}
        )
        entry[direction] += 1
        entry[f"{direction}_bytes"] += size


def parse_time(text):
    try:
        return float(text)
    except ValueError:
        return None


def read_apt(tally, lines, window):
    """apt-cacher-ng: ``time|I|bytes|client|path`` (upstream) and ``time|O|...`` (served)."""
    for line in lines:
        fields = line.rstrip("\n").split("|", 4)
        if len(fields) != 5 or fields[1] not in ("I", "O") or not fields[2].isdigit():
            continue
        if not window(parse_time(fields[0])):
            continue
        direction = "upstream" if fields[1] == "I" else "served"
        tally.add("apt", direction, fields[4].lstrip("/"), int(fields[2]))


def read_http(tally, lines, window):
    """nginx: ``$msec|$status|$body_bytes_sent|$remote_addr|$uri``; /wheels/ and /datasets/."""
    for line in lines:
        fields = line.rstrip("\n").split("|", 4)
        if len(fields) != 5 or fields[1] not in SERVED_STATUS or not fields[2].isdigit():
            continue
        if not window(parse_time(fields[0])):
            continue
        path = fields[4].lstrip("/")
        kind = path.split("/", 1)[0]
        # Files only: the listings (/wheels/, which pip reads) are not downloads.
        if kind in ("wheels", "datasets") and "/" in path and not path.endswith("/"):
            tally.add(kind, "served", path, int(fields[2]))


def read_fills(tally, lines, window):
    """lab_cache_fill's JSON lines: one per file fetched upstream."""
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("kind") not in ("wheels", "datasets"):
            continue
        if not window(parse_time(str(record.get("time", "")))):
            continue
        tally.add(
            record["kind"], "upstream", str(record.get("file", "")), int(record.get("bytes", 0))
        )


def stats(apt_log, http_log, fill_log, since=0.0, until=None, details=False):
    """The counts of the three logs' lines from SINCE to before UNTIL (Unix times)."""

    def window(when):
        return when is not None and when >= since and (until is None or when < until)

    tally = Tally()
    read_apt(tally, log_lines(apt_log), window)
    read_http(tally, log_lines(http_log), window)
    read_fills(tally, log_lines(fill_log), window)
    result = {
        "kinds": tally.kinds,
        "upstream_bytes": sum(c["upstream_bytes"] for c in tally.kinds.values()),
        "served_bytes": sum(c["served_bytes"] for c in tally.kinds.values()),
    }
    if details:
        result["files"] = tally.files
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "apt_log": {"type": "path", "default": "/var/log/apt-cacher-ng/apt-cacher.log"},
            "http_log": {"type": "path", "required": True},
            "fill_log": {"type": "path", "required": True},
            "since": {"type": "float", "default": 0.0},
            "until": {"type": "float"},
            "details": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = stats(
            params["apt_log"],
            params["http_log"],
            params["fill_log"],
            since=params["since"],
            until=params["until"],
            details=params["details"],
        )
    except OSError as exc:
        module.fail_json(msg=f"lab_cache_stats: cannot read a log: {exc}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
