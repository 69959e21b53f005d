#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Count the bytes a lab cache fetched upstream and served to its clients, from its own logs."""

from __future__ import annotations

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
  - "C(O) lines to a loopback client (C(127.0.0.1), C(::1)) are the cache host's own fill
    (lab_cache_apt_fill fetching for its clients) and are not counted as served."
  - "apt-cacher-ng also logs an C(I) line of only the response's headers (about 130 bytes) for
    a request that arrives while the same file is still coming in for another client: the file
    crossed the uplink once, and the bytes say so."
  - Read-only. Missing logs count as empty (a cache that served nothing yet).
  - "The logs are written by service accounts (apt-cacher-ng, www-data), so what is read is
    bounded and checked: each file is opened without following a link or blocking and must be a
    regular file of at most 1 GiB (a rotated C(.gz) copy at most 1 GiB decompressed); a file
    that cannot be read whole (a C(.gz) cut short, too large, a link, a FIFO) is left out of the
    counts entirely and listed in C(unreadable) with the reason; a line longer than 8 KiB, a
    path longer than 1 KiB or a byte count that is not a plain number (ASCII digits, at most
    18) is skipped and counted in C(skipped_lines). At most the newest 100 rotated copies are
    read, and with I(details) at most 50000 files per kind are listed."
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
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Count what the cache fetched upstream and served since the run started
  rocmlab.rocmlab.lab_cache_stats:
    http_log: /var/log/nginx/rocmlab-lab-cache.access.log
    fill_log: /srv/rocmlab/cache/fill.log
    since: "{{ run_started | float }}"
  register: bytes

- name: Say it
  ansible.builtin.debug:
    msg: "{{ bytes.upstream_bytes }} bytes upstream, {{ bytes.served_bytes }} served"
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
details_left_out:
  description: With I(details), how many counted transfers are of files past the 50000 listed.
  returned: when details
  type: int
unreadable:
  description: The log files left out of the counts, each with C(file) and C(reason).
  returned: always
  type: list
  elements: dict
  sample:
    - {"file": "/var/log/apt-cacher-ng/apt-cacher.log.2.gz", "reason": "cannot be read to its end"}
skipped_lines:
  description: Lines of the files counted that were skipped as malformed or too long.
  returned: always
  type: int
"""

import ipaddress
import json
import math
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.lab_cache import (
    Unreadable,
    log_lines,
    rotated_logs,
)

KINDS = ("apt", "wheels", "datasets")
SERVED_STATUS = ("200", "206")
# Bounds on what is read: the logs are written by service accounts (apt-cacher-ng, www-data).
# A log (or what a rotated .gz copy decompresses to) larger than MAX_LOG_BYTES is not counted;
# a line longer than MAX_LINE, or a path longer than MAX_PATH, is skipped; at most MAX_ROTATED
# rotated copies are read (the newest); with details, at most MAX_DETAILS files per kind are
# listed (the counts still hold every line).
MAX_LOG_BYTES = 1 << 30
MAX_LINE = 8192
MAX_PATH = 1024
MAX_ROTATED = 100
MAX_DETAILS = 50000
# A byte count: ASCII digits, at most 18 (under 2**63).
BYTES = re.compile(r"[0-9]{1,18}")


class Reading:
    """What could not be counted: whole files (with the reason) and skipped lines."""

    def __init__(self):
        self.unreadable = []
        self.skipped_lines = 0

    def refuse(self, path, why):
        self.unreadable.append({"file": path, "reason": why})


def log_files(path, reading):
    """PATH's rotated copies (logrotate's .N and .N.gz, oldest first) and PATH."""
    kept, dropped = rotated_logs(path, MAX_ROTATED)
    for name in dropped:
        reading.refuse(name, f"more than {MAX_ROTATED} rotated copies: the oldest are not read")
    return kept


def lines_of(name, reading):
    """The lines of the log file NAME; a line over MAX_LINE is skipped and counted in READING.
    Raises Unreadable when the file cannot be read whole."""
    for line in log_lines(name, MAX_LINE, MAX_LOG_BYTES):
        if line is None:
            reading.skipped_lines += 1
        else:
            yield line


def count_log(tally, reading, path, reader, window):
    """Count PATH and its rotated copies with READER into TALLY, file by file: a file that
    cannot be read whole (cut short, too large, a link, not a regular file) is left out
    entirely and named in READING, so the counts hold only whole files."""
    for name in log_files(path, reading):
        part, part_reading = Tally(), Reading()
        try:
            reader(part, lines_of(name, part_reading), window, part_reading)
        except Unreadable as exc:
            reading.refuse(name, str(exc))
            continue
        tally.merge(part)
        reading.skipped_lines += part_reading.skipped_lines


def empty_counts():
    return {"upstream_bytes": 0, "upstream_fetches": 0, "served_bytes": 0, "served_requests": 0}


class Tally:
    def __init__(self):
        self.kinds = {kind: empty_counts() for kind in KINDS}
        self.files = {kind: {} for kind in KINDS}
        self.details_left_out = 0

    def add(self, kind, direction, path, size):
        counts = self.kinds[kind]
        if direction == "upstream":
            counts["upstream_bytes"] += size
            counts["upstream_fetches"] += 1
        else:
            counts["served_bytes"] += size
            counts["served_requests"] += 1
        files = self.files[kind]
        if path not in files and len(files) >= MAX_DETAILS:
            self.details_left_out += 1
            return
        entry = files.setdefault(
            path, {"upstream": 0, "upstream_bytes": 0, "served": 0, "served_bytes": 0}
        )
        entry[direction] += 1
        entry[f"{direction}_bytes"] += size

    def merge(self, other):
        """Add OTHER's counts to these."""
        for kind in KINDS:
            for key, value in other.kinds[kind].items():
                self.kinds[kind][key] += value
            files = self.files[kind]
            for path, counts in other.files[kind].items():
                if path not in files and len(files) >= MAX_DETAILS:
                    self.details_left_out += 1
                    continue
                entry = files.setdefault(path, dict.fromkeys(counts, 0))
                for key, value in counts.items():
                    entry[key] += value
        self.details_left_out += other.details_left_out


def parse_time(text):
    """A finite Unix time, or None."""
    try:
        when = float(text)
    except (ValueError, TypeError, OverflowError):
        return None
    return when if math.isfinite(when) else None


def byte_count(text):
    """The byte count of a log field (ASCII digits, at most 18), or None."""
    return int(text) if BYTES.fullmatch(text) else None


def record_count(value):
    """The byte count of a fill record (a JSON whole number from 0 to 2**63), or None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63:
        return value
    return None


def own_fill(client):
    """Whether apt-cacher-ng's client field names this host itself (a loopback address): the
    fill of lab_cache_apt_fill, which fetches for the clients, not a client served."""
    try:
        address = ipaddress.ip_address(client.strip())
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def read_apt(tally, lines, window, reading):
    """apt-cacher-ng: ``time|I|bytes|client|path`` (upstream) and ``time|O|...`` (served)."""
    for line in lines:
        fields = line.rstrip("\n").split("|", 4)
        if len(fields) == 5 and fields[1] not in ("I", "O"):
            continue  # another kind of record
        size = byte_count(fields[2]) if len(fields) == 5 else None
        if size is None or len(fields[4]) > MAX_PATH:
            reading.skipped_lines += 1
            continue
        if not window(parse_time(fields[0])):
            continue
        if fields[1] == "O" and own_fill(fields[3]):
            continue  # the cache host's own fill (lab_cache_apt_fill), not a client
        direction = "upstream" if fields[1] == "I" else "served"
        tally.add("apt", direction, fields[4].lstrip("/"), size)


def read_http(tally, lines, window, reading):
    """nginx: ``$msec|$status|$body_bytes_sent|$remote_addr|$uri``; /wheels/ and /datasets/."""
    for line in lines:
        fields = line.rstrip("\n").split("|", 4)
        size = byte_count(fields[2]) if len(fields) == 5 else None
        if size is None or len(fields[4]) > MAX_PATH:
            reading.skipped_lines += 1
            continue
        if fields[1] not in SERVED_STATUS or not window(parse_time(fields[0])):
            continue
        path = fields[4].lstrip("/")
        kind = path.split("/", 1)[0]
        # Files only: the listings (/wheels/, which pip reads) are not downloads.
        if kind in ("wheels", "datasets") and "/" in path and not path.endswith("/"):
            tally.add(kind, "served", path, size)


def read_fills(tally, lines, window, reading):
    """lab_cache_fill's JSON lines: one per file fetched upstream."""
    for line in lines:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            reading.skipped_lines += 1
            continue
        if not isinstance(record, dict) or record.get("kind") not in ("wheels", "datasets"):
            reading.skipped_lines += 1
            continue
        size = record_count(record.get("bytes", 0))
        path = record.get("file", "")
        if size is None or not isinstance(path, str) or len(path) > MAX_PATH:
            reading.skipped_lines += 1
            continue
        if not window(parse_time(record.get("time"))):
            continue
        tally.add(record["kind"], "upstream", path, size)


def stats(apt_log, http_log, fill_log, since=0.0, until=None, details=False):
    """The counts of the three logs' lines from SINCE to before UNTIL (Unix times)."""

    def window(when):
        return when is not None and when >= since and (until is None or when < until)

    tally, reading = Tally(), Reading()
    count_log(tally, reading, apt_log, read_apt, window)
    count_log(tally, reading, http_log, read_http, window)
    count_log(tally, reading, fill_log, read_fills, window)
    result = {
        "kinds": tally.kinds,
        "upstream_bytes": sum(c["upstream_bytes"] for c in tally.kinds.values()),
        "served_bytes": sum(c["served_bytes"] for c in tally.kinds.values()),
        "unreadable": reading.unreadable,
        "skipped_lines": reading.skipped_lines,
    }
    if details:
        result["files"] = tally.files
        result["details_left_out"] = tally.details_left_out
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
