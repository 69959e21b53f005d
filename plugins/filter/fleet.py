# Copyright: rocmlab contributors
# Apache License 2.0
"""Filters of the lab rollout (role rocmlab_fleet): a host's preflight findings judged as checks,
and the rollout's decision for the host.

fleet_preflight_checks(findings) -> [{"name", "status": pass|warn|fail, "detail"}], in the order
the rollout prints them. FINDINGS holds what the preflight tasks registered:

  reach           wait_for_connection's result (failed: the host did not answer)
  connect_timeout rocmlab_fleet_connect_timeout
  overdue         {"task", "timeout"} when the host's checks ran out of
                  rocmlab_fleet_preflight_timeout (Ansible stopped TASK), or None
  settings        {"status", "detail"} of the roles' settings check, or None
  python          {"status", "detail"} of the frameworks' Python check, or None (not applicable)
  host            rocmlab_preflight's result (space, clock_offset, in_use), or None
  dpkg            rocmlab_dpkg's result (lock_holders, interrupted, unconfigured), or None
  audit           the `dpkg --audit` command's result, or None
  mirrors         [{"what", "urls"}]: what the roles will fetch; any URL answering 200 will do
  rocm_configured the ROCm release the inventory configures (AMD's source), or None; with the
                  release host.rocm_version read from the host, the "release" line says what the
                  rollout will change
  fetched         the uri results, one per URL (item, status, msg)
  max_clock_skew  rocmlab_fleet_max_clock_skew
  skip_busy       rocmlab_fleet_skip_busy

fleet_decision(checks, skip_busy) -> {"state": go|unreachable|failed|skipped, "reason"}.

What the preflight play gathers and prints around them:

fleet_time_left(started, limit) -> whole seconds left of LIMIT since STARTED (at least 1): the
Ansible task timeout that keeps a host's checks, as a whole, within their deadline
fleet_python_detail(found) -> the python check's detail, from the frameworks' *_python_found
(what the roles will fetch and where they write, the mirrors and space above, comes from
downloads_preflight in plugins/filter/downloads.py)
fleet_preflight_record(checks, facts) -> the host's preflight record (<reports>/fleet/preflight/)
fleet_not_run_reason(decision, aside, all_or_nothing) -> why a host that went has not run yet
fleet_lines(hosts, checks, decisions) -> one line per host and check, and one per decision
fleet_aside(hosts, decisions) -> ["host (state)"] of the hosts that do not go
fleet_go(hosts, decisions) -> the hosts that go, in inventory order
fleet_failure(task, result) -> why a host's task failed, for its rollout record: the package
whose maintainer script failed and that script's last lines when apt or dpkg says so, else the
task's message
"""

from __future__ import annotations

import math
import re
import time

from ansible_collections.rocmlab.rocmlab.plugins.module_utils import downloads
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_release import (
    leading_release,
    release_key,
)

CREDENTIALS = re.compile(r"://[^/@\s]*@")


def _masked(text):
    return CREDENTIALS.sub("://***@", str(text))


# What one piece of a host's answer (a line of dpkg --audit, a fetch's error, a use found) may
# add to a check's detail: the host is not trusted to keep its answers short.
FROM_HOST_MAX = 300


# A failed task's whole message in a rollout record (it may quote what a host said).
MESSAGE_MAX = 800


def _clip(text, limit=FROM_HOST_MAX):
    """TEXT as the host sent it, whitespace folded, cut at LIMIT characters."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    return f"{text[:limit]} ... ({len(text) - limit} more characters)"


# dpkg's words when a package's maintainer script fails (dpkg's src/main/script.c and
# errors.c): "dpkg: error processing package NAME (--configure):" then the script and its exit.
_DPKG_ERROR = re.compile(
    r"^dpkg: error processing (?:package|archive) (\S+) \((--[a-z-]+)\):$\n^ (.+)$", re.MULTILINE
)
_SCRIPT_LINES = 5
# What dpkg and apt print around a script's own lines.
_NOT_THE_SCRIPT = re.compile(r"^(?:dpkg: |E: |W: |N: |debconf: |Errors were encountered)")


def _lines(text):
    """TEXT's lines, carriage returns (apt runs dpkg on a terminal) and control and format
    characters dropped."""
    text = str(text or "").replace("\r\n", "\n").replace("\r", "\n")
    return ["".join(c for c in line if c.isprintable()) for line in text.split("\n")]


def _script_output(lines, name):
    """The last lines package NAME's maintainer script printed: those after dpkg's "Setting up
    NAME (" (or "Unpacking", "Removing") up to its error for NAME, dpkg's and apt's own left out."""
    start = None
    for index, line in enumerate(lines):
        if any(
            line.startswith(f"{step} {name} (") for step in ("Setting up", "Unpacking", "Removing")
        ):
            start = index + 1
        elif line.startswith(f"dpkg: error processing package {name} ") and start is not None:
            said = [x for x in lines[start:index] if x.strip() and not _NOT_THE_SCRIPT.match(x)]
            return said[-_SCRIPT_LINES:]
    return []


def fleet_failure(task, result):
    """Why TASK failed, from its RESULT (a module's result, as ansible_failed_result holds it):
    "TASK: PACKAGE (--configure): installed PACKAGE package post-installation script subprocess
    returned error exit status 1; it said: LINE | LINE" when dpkg says a maintainer script
    failed (the last lines of that script's output; apt's command line left out), else
    "TASK: MESSAGE" (MESSAGE_MAX). Each piece dpkg's output gave is clipped (FROM_HOST_MAX)."""
    result = result if isinstance(result, dict) else {}
    stdout = _lines(result.get("stdout"))[-2000:]
    found = _DPKG_ERROR.search("\n".join(stdout + _lines(result.get("stderr"))[-2000:]))
    if found is None:
        return f"{_clip(task)}: {_clip(result.get('msg') or 'failed', MESSAGE_MAX)}"
    name, action, why = found.groups()
    detail = f"{_clip(name)} ({action}): {_clip(why)}"
    said = _script_output(stdout, name)
    if said:
        detail += "; it said: " + " | ".join(_clip(line) for line in said)
    return f"{_clip(task)}: {detail}"


def _slug(text):
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_")


def _dpkg(dpkg, audit):
    problems = []
    if dpkg.get("interrupted"):
        problems.append("an interrupted dpkg run")
    if dpkg.get("unconfigured"):
        names = ", ".join(f"{p['package']} ({p['state']})" for p in dpkg["unconfigured"])
        problems.append(f"packages not fully installed: {names}")
    said = [
        line
        for line in (audit or {}).get("stdout_lines", []) + (audit or {}).get("stderr_lines", [])
        if line.strip()
    ]
    if said:
        problems.append("dpkg --audit: " + " | ".join(map(_clip, said[:3])))
    if problems:
        return (
            "fail",
            "; ".join(problems) + "; fix: sudo dpkg --configure -a (or rocmlab_dpkg_repair: true)",
        )
    holders = dpkg.get("lock_holders") or []
    if holders:
        held = ", ".join(f"PID {h['pid']} ({h['command']}) on {h['lock']}" for h in holders)
        return "warn", f"lock held by {held}; the roles wait for it (rocmlab_dpkg_lock_timeout)"
    return "pass", "no lock held, dpkg --audit clean"


def _mirror(mirror, fetched):
    answers = [r for r in fetched if r.get("item") in mirror["urls"]]
    good = [r for r in answers if r.get("status") == 200]
    if good:
        return "pass", _masked(f"{mirror['what']}: {good[0]['item']} answered 200")
    if not answers:
        return "fail", _masked(f"{mirror['what']}: not fetched")
    said = "; ".join(
        f"{r['item']}: {_clip(r.get('msg') or 'HTTP ' + str(r.get('status')))}".strip()
        for r in answers
    )
    return "fail", _masked(f"{mirror['what']}: {said}")


def _release(installed, configured):
    """(status, detail) of the release line: what the rollout will do to AMD's ROCm here."""
    now, want = leading_release(installed), leading_release(configured)
    if installed is None:
        return "pass", f"no AMD ROCm installed: will install {want or configured}"
    if now == want:
        return "pass", f"{installed}: already the configured {configured}"
    way = "down" if now and want and release_key(now) > release_key(want) else "up"
    return "pass", f"will change {installed} \u2192 {want or configured} ({way}grade)"


def fleet_preflight_checks(findings):
    """The checks of one host's preflight, judged."""
    checks = []

    def add(name, status, detail):
        checks.append({"name": name, "status": status, "detail": " ".join(str(detail).split())})

    reach = findings.get("reach") or {}
    if reach.get("failed") or reach.get("unreachable"):
        add(
            "reachable",
            "fail",
            f"no answer within {findings.get('connect_timeout')} s: {reach.get('msg', '')}",
        )
        return checks
    add("reachable", "pass", f"answered in {reach.get('elapsed', 0)} s")
    overdue = findings.get("overdue")
    if overdue:
        add(
            "deadline",
            "fail",
            f"the host's checks did not finish within rocmlab_fleet_preflight_timeout"
            f" ({overdue['timeout']} s): Ansible stopped '{_clip(overdue['task'])}'",
        )
    settings = findings.get("settings")
    if settings:
        add("settings", settings["status"], settings["detail"])
    python = findings.get("python")
    if python:
        add("python", python["status"], python["detail"])
    host = findings.get("host") or {}
    if host.get("space"):
        short = [entry for entry in host["space"] if not entry["enough"]]
        add(
            "free_space",
            "fail" if short else "pass",
            "; ".join(map(downloads.space_line, host["space"])),
        )
    if findings.get("dpkg") is not None:
        add("dpkg", *_dpkg(findings["dpkg"], findings.get("audit")))
    if host.get("clock_offset") is not None:
        offset, limit = float(host["clock_offset"]), float(findings.get("max_clock_skew", 10))
        where = "ahead of" if offset >= 0 else "behind"
        add(
            "clock",
            "fail" if abs(offset) > limit else "pass",
            f"{abs(offset):.1f} s {where} the controller (limit {limit:g} s; apt refuses Release"
            " files dated in its future)",
        )
    if findings.get("rocm_configured"):
        add("release", *_release(host.get("rocm_version"), findings["rocm_configured"]))
    for mirror in findings.get("mirrors") or []:
        add(f"mirror_{_slug(mirror['what'])}", *_mirror(mirror, findings.get("fetched") or []))
    if "in_use" in host:
        if host["in_use"]:
            what = "; ".join(map(_clip, host["in_use"]))
            add(
                "in_use",
                "warn",
                f"{what}; skipped (rocmlab_fleet_skip_busy)"
                if findings.get("skip_busy", True)
                else f"{what}; provisioned anyway (rocmlab_fleet_skip_busy: false)",
            )
        else:
            add("in_use", "pass", "no GPU compute process, nobody logged in")
    return checks


def fleet_decision(checks, skip_busy=True, in_use=()):
    """What the rollout does with the host: go, or set it aside with the reason."""
    by_name = {check["name"]: check for check in checks}
    reach = by_name.get("reachable")
    if reach is None or reach["status"] == "fail":
        return {"state": "unreachable", "reason": reach["detail"] if reach else "not checked"}
    failed = [check for check in checks if check["status"] == "fail"]
    if failed:
        reason = "; ".join(f"{check['name']}: {check['detail']}" for check in failed)
        return {"state": "failed", "reason": f"preflight: {reason}"}
    if in_use and skip_busy:
        return {"state": "skipped", "reason": "; ".join(in_use)}
    return {"state": "go", "reason": None}


def fleet_time_left(started, limit):
    """Whole seconds left of LIMIT seconds since STARTED (seconds since the epoch), at least 1
    (Ansible reads a task timeout of 0 as none): each task of the host's checks gets it as its
    timeout, so that they end, as a whole, within LIMIT."""
    return max(1, math.ceil(float(started) + float(limit) - time.time()))


def _framework(found):
    """What a framework's *_python_found names: torch's or jax's release, or TF's package."""
    for name in ("torch", "jax"):
        if name in found:
            return f"{name} {found[name]}"
    return str(found["package"])


def fleet_python_detail(found):
    """The python check's detail: the frameworks' *_python_found (None: not installed with pip
    in this rollout), each interpreter with its version and what has wheels for it."""
    said = [
        f"{f['path']} {f['version']}: {_framework(f)} has wheels for Python"
        f" {', '.join(map(str, f['wheels_for']))}"
        for f in found or []
        if f
    ]
    return "; ".join(said) or "no framework installed with pip in this rollout"


# dpkg's version of the distribution's rocminfo ("5.2.3-1", "1:6.1.5-2"): its upstream release.
_DPKG_RELEASE = re.compile(r"^(?:[0-9]+:)?([0-9][0-9.]*)")


def fleet_preflight_record(checks, facts):
    """The preflight record of a host (schema 1, docs/fleet-report.md): its CHECKS, whether it
    passed (no check failed), and what was read from it before any change. FACTS: host,
    created (UTC, ISO 8601), distribution, kernel, python_found (pytorch_rocm_python_found, or
    None), python_version (Ansible's interpreter's, where the frameworks found none), rocm_source,
    host_rocm_version (rocmlab_preflight's rocm_version: AMD's release, the selected core's on
    the Core SDK line, /opt/rocm/.info/version's text on the legacy line; or None),
    rocminfo_version (dpkg's version of the distribution's rocminfo, "" when not installed),
    rocm_configured (the release the inventory configures, or None)."""
    checks = list(checks or [])
    rocminfo = str(facts.get("rocminfo_version") or "").strip()
    found = _DPKG_RELEASE.match(rocminfo)
    python = (facts.get("python_found") or {}).get("version") or facts.get("python_version")
    return {
        "schema_version": 1,
        "host": facts["host"],
        "created": facts["created"],
        "passed": not any(check["status"] == "fail" for check in checks),
        "checks": checks,
        "facts": {
            "distribution": facts["distribution"],
            "kernel": facts["kernel"],
            "python": python,
            "rocm_source": facts.get("rocm_source") or "amd",
            "rocm_version": facts.get("host_rocm_version")
            or (found.group(1) if found else rocminfo)
            or None,
            "rocm_configured": facts.get("rocm_configured"),
        },
    }


def fleet_not_run_reason(decision, aside, all_or_nothing):
    """The reason of a host's rollout record written in preflight: a host set aside, its
    decision's; a host that goes, why it would not have run if the rollout ends before its batch
    (all or nothing with hosts ASIDE, or a batch before it exceeded the failure budget)."""
    if decision["state"] != "go":
        return decision["reason"]
    if aside and all_or_nothing:
        return (
            f"all or nothing (rocmlab_fleet_all_or_nothing): {', '.join(aside)} set aside in"
            " preflight, so no host is provisioned"
        )
    return "an earlier batch exceeded the failure budget, or the run was stopped"


def fleet_lines(hosts, checks, decisions):
    """One line per host and check, then the host's decision, the host names aligned. CHECKS
    and DECISIONS: {host: [checks]}, {host: decision}; a host without checks has its decision
    alone."""
    hosts = list(hosts)
    width = max((len(h) for h in hosts), default=0)
    lines = []
    for host in hosts:
        for check in (checks or {}).get(host) or []:
            gap = "  " if check["status"] == "fail" else " "
            lines.append(
                f"{host.ljust(width)}  {check['status'].upper()}{gap}{check['name'].ljust(24)}"
                f" {check['detail']}"
            )
        decision = decisions[host]
        outcome = (
            "goes into the rollout"
            if decision["state"] == "go"
            else f"{decision['state']}: {decision['reason']}"
        )
        lines.append(f"{host.ljust(width)}  => {outcome}")
    return lines


def fleet_aside(hosts, decisions):
    """The hosts set aside in preflight, "host (state)", in inventory order."""
    return [f"{h} ({decisions[h]['state']})" for h in hosts if decisions[h]["state"] != "go"]


def fleet_go(hosts, decisions):
    """The hosts that go into the rollout, in inventory order (the first is the canary)."""
    return [h for h in hosts if decisions[h]["state"] == "go"]


class FilterModule:
    def filters(self):
        return {
            "fleet_preflight_checks": fleet_preflight_checks,
            "fleet_decision": fleet_decision,
            "fleet_python_detail": fleet_python_detail,
            "fleet_time_left": fleet_time_left,
            "fleet_preflight_record": fleet_preflight_record,
            "fleet_not_run_reason": fleet_not_run_reason,
            "fleet_lines": fleet_lines,
            "fleet_aside": fleet_aside,
            "fleet_go": fleet_go,
            "fleet_failure": fleet_failure,
        }
