#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Judge one job of the cluster check from what every host of the cluster returned."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_cluster_verdict
short_description: Judge a torchrun job of the cluster check from every host's result
description:
  - Reads what each host of the cluster returned for one job of the cluster check (C(rocmlab
    allreduce) or multi-node C(rocmlab smoke) under torchrun) - the job's exit status and
    output, whether the host reached the rendezvous, the report it wrote - and says whether the
    job passed and, when not, why, naming the hosts.
  - A host absent from I(results), or whose job's status Ansible could not read, is lost (down or
    cut off). When no host wrote a report and a torchrun says that its rendezvous failed, the job
    never started, and the hosts that never joined are named from the evidence - left the run,
    could not connect to the rendezvous, or their torchrun failed before joining.
  - Runs on the controller; changes nothing.
options:
  kind:
    description: Which job - C(allreduce) (every node writes a report) or C(smoke) (rank 0 does).
    type: str
    choices: [allreduce, smoke]
    required: true
  hosts:
    description: The cluster's hosts (inventory names), in the play's order.
    type: list
    elements: str
    required: true
  rdzv_host:
    description: The host whose torchrun serves the rendezvous.
    type: str
    required: true
  rdzv_endpoint:
    description: The rendezvous endpoint, C(ADDRESS:PORT).
    type: str
    required: true
  join_timeout:
    description: Seconds the nodes had to join (torchrun's C(join_timeout)).
    type: int
    required: true
  timeout:
    description: Seconds the job had in all before C(timeout) ended it.
    type: int
    required: true
  results:
    description:
      - Per host still in the run - C(started) (the job was launched), C(job) (C(async_status)'s
        result - C(finished), C(rc), C(delta), C(stdout), C(stderr)), C(reach) (whether
        C(wait_for) got through to the rendezvous - C(reached), C(msg) - or null on the
        rendezvous host), C(report) (the report's content in base64, or null when the host
        has none) and C(report_refused) (why the file where the report belongs was not read -
        a link, a special file, another owner, too large - or null).
    type: dict
    required: true
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Judge the all-reduce
  rocmlab.rocmlab.rocmlab_cluster_verdict:
    kind: allreduce
    hosts: [node-a, node-b, node-c]
    rdzv_host: node-a
    rdzv_endpoint: 10.0.0.1:29400
    join_timeout: 120
    timeout: 1800
    results:
      node-a:
        started: true
        job: {finished: 1, rc: 0, stdout: "", stderr: ""}
        reach: null
        report: "eyJ..."
  delegate_to: localhost
  run_once: true
  register: verdict
"""

RETURN = r"""
passed:
  description: Every host finished with exit 0 and the report passed.
  returned: always
  type: bool
message:
  description: One paragraph - the result, or what failed and on which hosts.
  returned: always
  type: str
lost:
  description: Hosts that left the run (unreachable for Ansible).
  returned: always
  type: list
  elements: str
never_joined:
  description: Hosts named as never having joined when the job never started.
  returned: always
  type: list
  elements: str
started:
  description:
    - Whether the job got past the rendezvous (a host wrote a report or shows a worker's output,
      or no torchrun says that its rendezvous failed).
  returned: always
  type: bool
outcomes:
  description: Per host, one line on how its torchrun ended.
  returned: always
  type: dict
document:
  description:
    - The report to keep for the cluster (the rendezvous host's copy, else the first host's), or
      null.
  returned: always
  type: dict
document_host:
  description: The host whose report is in I(document).
  returned: always
  type: str
record:
  description:
    - The record to keep when no host wrote a report - C(schema_version), C(tool)
      (C(rocmlab cluster-check)), C(created), C(passed) (false), C(error) (the message),
      C(hosts), C(lost_hosts), C(never_joined). Null when I(document) is set.
  returned: always
  type: dict
"""

import base64
import binascii
import json
import re
import time

from ansible.module_utils.basic import AnsibleModule

TOOL = "rocmlab cluster-check"
TIMEOUT_CODES = {124: "sent SIGTERM", 137: "had to SIGKILL it"}
RENDEZVOUS_FAILED = re.compile(r"\bRendezvous(?:Timeout|Connection|Closed)?Error\b")
EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Interrupt))(?::\s*(.*))?$"
)
OWN_LINE = re.compile(r"^rocmlab(?: allreduce| smoke)?: .+")
# What only a worker prints: rank 0's first lines, rocmlab's own messages, torchrun's account of
# a failed worker. Any of them means that the rendezvous completed.
WORKER_SIGNS = re.compile(
    r"^(?:allreduce: |device: |data: |rocmlab(?: allreduce| smoke)?: )|ChildFailedError", re.M
)
MAX_LINE = 300


def clip(text, limit=MAX_LINE):
    """One line of at most LIMIT characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def last_error(text):
    """What a job's output says went wrong: rocmlab's own message, else the last exception line
    (``Type: message``, without the module path), else the last non-empty line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if OWN_LINE.match(line) and not line.endswith(("PASSED", "FAILED")):
            return clip(line)
    for line in reversed(lines):
        match = EXCEPTION.match(line)
        if match:
            name, detail = match.groups()
            return clip(f"{name}: {detail}" if detail else name)
    return clip(lines[-1]) if lines else "no output"


def read_report(content):
    """(document, problem) from the report's base64 content; (None, None) without one."""
    if content is None:
        return None, None
    try:
        document = json.loads(base64.b64decode(content, validate=True).decode("utf-8"))
    except RecursionError:
        return None, "its report is nested too deep to be one"
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        return None, f"its report is not JSON ({clip(exc, 120)})"
    if not isinstance(document, dict) or not isinstance(document.get("passed"), bool):
        return None, "its report has no boolean 'passed'"
    return document, None


def output_of(job):
    return f"{(job or {}).get('stdout') or ''}\n{(job or {}).get('stderr') or ''}"


def seconds(delta):
    """Whole seconds of the command module's ``delta`` (``H:MM:SS.ffffff``), or None."""
    match = re.fullmatch(r"(\d+):(\d\d):(\d\d(?:\.\d+)?)", str(delta or ""))
    if not match:
        return None
    hours, minutes, secs = match.groups()
    return round(int(hours) * 3600 + int(minutes) * 60 + float(secs))


def outcome(result, timeout):
    """(ok, one line on how the host's job ended)."""
    if not result.get("started"):
        job = result.get("job") or {}
        return False, f"the job could not be started ({clip(job.get('msg') or 'no reason given')})"
    job = result.get("job")
    if job and "finished" not in job:
        return False, f"Ansible could not read its job any more ({clip(job.get('msg'), 160)})"
    if not job or not job.get("finished"):
        return False, "its job was still running when the playbook stopped waiting for it"
    rc = job.get("rc")
    took = seconds(job.get("delta"))
    after = "" if took is None else f" after {took} s"
    if rc == 0:
        return True, f"exit 0{after}"
    if rc in TIMEOUT_CODES:
        return False, (
            f"did not finish within cluster_check_timeout ({timeout} s): `timeout` "
            f"{TIMEOUT_CODES[rc]}; last words: {last_error(output_of(job))}"
        )
    if rc is None:
        return False, f"ended without an exit code ({clip(job.get('msg') or 'no reason given')})"
    return False, f"exit {rc}{after}: {last_error(output_of(job))}"


def never_joined(hosts, results, lost, rdzv_host, endpoint, join_timeout):
    """{host: why} for the hosts the evidence says never joined the rendezvous."""
    named = {host: "Ansible lost it (host down or cut off)" for host in lost}
    for host in hosts:
        result = results.get(host)
        if result is None:
            continue
        reach = result.get("reach") or {}
        job = result.get("job") or {}
        if reach.get("reached") is False:
            named[host] = (
                f"it could not connect to the rendezvous at {endpoint} (on {rdzv_host}) "
                f"within {join_timeout} s"
            )
        elif not result.get("started"):
            named[host] = "its job could not be started"
        elif (
            job.get("finished")
            and job.get("rc") not in (0, *TIMEOUT_CODES)
            and not RENDEZVOUS_FAILED.search(output_of(job))
        ):
            named[host] = f"its torchrun failed before joining: {last_error(output_of(job))}"
    return {host: named[host] for host in hosts if host in named}


def number(value):
    """VALUE when it is a number (a host wrote it), else 0."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def describe_allreduce(doc):
    """One line of a passed report; any field of the wrong shape (a host wrote it) reads as
    absent or 0, never as a crash."""
    sizes = doc.get("sizes") if isinstance(doc.get("sizes"), list) else []
    sizes = [size for size in sizes if isinstance(size, dict)]
    pairs = doc.get("pairs") if isinstance(doc.get("pairs"), list) else []
    parts = [
        clip(
            f"{doc.get('world_size')} rank(s) on {doc.get('nodes')} node(s), "
            f"{doc.get('backend')} on {doc.get('device_type')}"
        )
    ]
    if sizes:
        parts.append(
            f"exact at {len(sizes)} size(s) from {number(sizes[0].get('bytes'))} to "
            f"{number(sizes[-1].get('bytes'))} bytes; peak busbw "
            f"{number(doc.get('peak_busbw_gbps')):.3f} GB/s, latency "
            f"{number(doc.get('latency_us')):.1f} us"
        )
    if doc.get("pairwise"):
        parts.append(f"{len(pairs)} node pair(s) measured, none slow")
    return "; ".join(parts)


def describe_smoke(doc):
    accuracy = doc.get("test_accuracy")
    speed = doc.get("samples_per_second")
    return (
        f"DistributedDataParallel over {doc.get('world_size')} rank(s), {doc.get('backend')}"
        + (f"; test accuracy {accuracy * 100:.2f} %" if isinstance(accuracy, (int, float)) else "")
        + (f", {speed:.0f} samples/s" if isinstance(speed, (int, float)) else "")
    )


def report_findings(kind, doc, hosts):
    """What the kept report says is wrong (empty when it passed)."""
    findings = []
    if doc.get("error"):
        findings.append(clip(doc["error"], 600))
    for check in doc.get("checks") or []:
        if isinstance(check, dict) and check.get("passed") is False:
            findings.append(f"[{check.get('name')}] {clip(check.get('detail'), 400)}")
    wrong = other_nodes(kind, doc, hosts)
    if wrong:
        findings.append(wrong)
    return findings


def other_nodes(kind, doc, hosts):
    """Why an all-reduce report is not of this cluster's hosts (each rank names its host by its
    inventory name), or None."""
    nodes = doc.get("hosts")
    if (
        kind != "allreduce"
        or not isinstance(nodes, list)
        or sorted(map(str, nodes)) == sorted(hosts)
    ):
        return None
    return (
        f"the report's nodes ({', '.join(map(str, nodes)) or 'none'}) are not the cluster's "
        f"hosts ({', '.join(hosts)})"
    )


def judge(params):
    kind, hosts = params["kind"], list(params["hosts"])
    rdzv_host, endpoint = params["rdzv_host"], params["rdzv_endpoint"]
    join_timeout, timeout = params["join_timeout"], params["timeout"]
    results = params["results"] or {}
    label = "the all-reduce" if kind == "allreduce" else "the training across nodes"

    # Gone: not in the play any more (unreachable), or its job's status could not be read.
    lost = [
        host
        for host in hosts
        if host not in results
        or (results[host].get("started") and "finished" not in (results[host].get("job") or {}))
    ]
    outcomes, ok, reports, problems = {}, {}, {}, {}
    for host in hosts:
        if host not in results:
            outcomes[host] = "Ansible lost it during the run (host down or cut off)"
            continue
        ok[host], outcomes[host] = outcome(results[host], timeout)
        document, problem = read_report(results[host].get("report"))
        if document is not None:
            reports[host] = document
        refused = results[host].get("report_refused")
        if refused:
            problem = f"its report was refused ({clip(refused, 300)})"
        if problem:
            problems[host] = problem

    document_host = rdzv_host if rdzv_host in reports else next(iter(reports), None)
    document = reports.get(document_host)
    outputs = "\n".join(output_of(results[h].get("job")) for h in hosts if h in results)
    started = (
        bool(reports) or bool(WORKER_SIGNS.search(outputs)) or not RENDEZVOUS_FAILED.search(outputs)
    )
    joined_not = (
        {} if started else never_joined(hosts, results, lost, rdzv_host, endpoint, join_timeout)
    )

    missing = []
    if kind == "allreduce":
        # Every node's local rank 0 writes its copy: a reachable host without one lost its workers.
        missing = [h for h in hosts if h in results and h not in reports and ok.get(h)]
    passed = (
        not lost
        and all(ok.values())
        and document is not None
        and document.get("passed") is True
        and not other_nodes(kind, document, hosts)
        and not missing
        and not problems
    )

    per_host = "; ".join(f"{host}: {outcomes[host]}" for host in hosts)
    if passed:
        summary = describe_allreduce(document) if kind == "allreduce" else describe_smoke(document)
        message = f"{label.capitalize()} across {len(hosts)} host(s) passed: {summary}."
    elif not started:
        message = (
            f"{label.capitalize()} never started: torchrun's rendezvous at {endpoint} (served by "
            f"{rdzv_host}) needs all {len(hosts)} host(s) within cluster_check_join_timeout "
            f"({join_timeout} s). "
            + (
                "Never joined: "
                + "; ".join(f"{host} ({why})" for host, why in joined_not.items())
                + ". "
                if joined_not
                else "No single host is to blame from what they said; see each one's torchrun. "
            )
            + f"Each host's torchrun: {per_host}".rstrip(".")
            + "."
        )
    else:
        parts = []
        if lost:
            parts.append(
                f"lost during the run: {', '.join(lost)} (Ansible could not reach "
                f"{'it' if len(lost) == 1 else 'them'} any more: host down or cut off)"
            )
        if document is not None:
            parts += [
                f"{document_host}'s report: {f}" for f in report_findings(kind, document, hosts)
            ]
        for host, problem in problems.items():
            parts.append(f"{host}: {problem}")
        for host in missing:
            parts.append(f"{host} wrote no report although its torchrun exited 0")
        if document is None:
            parts.append("no host wrote a report")
        message = (
            f"{label.capitalize()} across {len(hosts)} host(s) failed: "
            + "; ".join(parts)
            + f". Each host's torchrun: {per_host}".rstrip(".")
            + "."
        )

    record = None
    if document is None:
        record = {
            "schema_version": 1,
            "tool": TOOL,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "passed": False,
            "error": message,
            "hosts": hosts,
            "lost_hosts": lost,
            "never_joined": list(joined_not),
        }
    return {
        "passed": passed,
        "message": message,
        "lost": lost,
        "never_joined": list(joined_not),
        "started": started,
        "outcomes": outcomes,
        "document": document,
        "document_host": document_host,
        "record": record,
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "kind": {"type": "str", "choices": ["allreduce", "smoke"], "required": True},
            "hosts": {"type": "list", "elements": "str", "required": True},
            "rdzv_host": {"type": "str", "required": True},
            "rdzv_endpoint": {"type": "str", "required": True},
            "join_timeout": {"type": "int", "required": True},
            "timeout": {"type": "int", "required": True},
            "results": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **judge(module.params))


if __name__ == "__main__":
    main()
