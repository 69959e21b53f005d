"""The cluster check across three hosts: what converge left (an exact all-reduce with bandwidth
and every pair, the training across the three, the reports on the controller), then one run per
case, in this order: check mode, bad input, a second run, a slowed link, a host that cannot reach
the rendezvous, a port held on the rendezvous host, a host stopped mid-run, a host down before
the run (the last two leave host c stopped; destroy removes it)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import testinfra
from playbook_runs import alias_inventory, ansible_env, changed, failures, fleet_report, play, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PLAYBOOK = PROJECT / "playbooks" / "cluster_check.yml"
REPORTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"
CLUSTER_JSON = REPORTS / "fleet" / "cluster.json"
A, B, C = "rocmlab-cluster-a", "rocmlab-cluster-b", "rocmlab-cluster-c"
HOSTS = [A, B, C]
WORK = "/var/lib/rocmlab/cluster"
LOCK = "/run/rocmlab.lock"
# The all-reduce alone, lean: no training, a few small sizes (the slow fraction: molecule.yml).
LEAN = {
    "cluster_check_train": False,
    "cluster_check_allreduce_args": ["--sizes", "1K:4K", "--iters", "5", "--warmup", "1",
                                     "--pair-size", "16K", "--slow-fraction", "0.05"],
}  # fmt: skip
# c's job is under way once its process group is up (after its heartbeats started): gloo has
# then an established connection from c to each of the other hosts on a port other than the
# rendezvous port. Read from /proc/net/tcp{,6} of c's network namespace, which root reads (the
# worker's own /proc/PID files belong to the smoke account; root in the container may not read
# them without CAP_SYS_PTRACE). argv: the rendezvous port, then the other hosts' addresses.
JOB_CONNECTED = """
import ipaddress, sys
port, peers = int(sys.argv[1]), set(sys.argv[2:])
seen = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        local, remote, state = row.split()[1:4]
        if state != "01":  # ESTABLISHED
            continue
        host, remote_port = remote.split(":")
        local_port = int(local.split(":")[1], 16)
        raw = b"".join(bytes.fromhex(host[i:i + 8])[::-1] for i in range(0, len(host), 8))
        ip = ipaddress.ip_address(raw)
        ip = getattr(ip, "ipv4_mapped", None) or ip
        if port not in (int(remote_port, 16), local_port):
            seen.add(str(ip))
sys.exit(0 if peers <= seen else 1)
"""

sys.path.insert(0, str(PROJECT / "src"))
from rocmlab.allreduce.report import ALLREDUCE_SCHEMA  # noqa: E402 (after the path)


def node(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout


def address(name: str) -> str:
    return docker(
        "inspect", "-f", '{{(index .NetworkSettings.Networks "rocmlab-test").IPAddress}}', name
    ).strip()


def cluster_json() -> dict:
    return json.loads(CLUSTER_JSON.read_text())


def message_of(run: subprocess.CompletedProcess) -> str:
    """The cluster check's one message: its failed assert, the run's last failure (a host killed
    mid-run may fail an earlier task with Ansible's own error first)."""
    found = failures(run)
    assert found, said(run)[-3000:]
    return " ".join(list(found.values())[-1].split())


# -- what converge left ----------------------------------------------------------------------------
def test_the_allreduce_was_exact_on_three_nodes_with_bandwidth():
    report = cluster_json()
    jsonschema.validate(report, ALLREDUCE_SCHEMA)
    assert report["passed"] is True and report["exit_code"] == 0 and report["error"] is None
    assert (report["backend"], report["device_type"]) == ("gloo", "cpu")
    assert (report["world_size"], report["nodes"]) == (3, 3)
    assert sorted(report["hosts"]) == HOSTS  # inventory names (ROCMLAB_HOST_NAME)
    assert sorted(r["host"] for r in report["ranks"]) == HOSTS
    assert report["host"] == A  # the rendezvous host's copy
    assert [s["bytes"] for s in report["sizes"]] == [1024 * 2**i for i in range(7)]
    for size in report["sizes"]:
        assert size["correct"] and size["wrong_elements"] == 0 and size["max_abs_error"] == 0
        assert size["busbw_gbps"] > 0
        assert size["busbw_gbps"] == pytest.approx(size["algbw_gbps"] * 2 * 2 / 3)
    assert report["latency_us"] > 0 and report["peak_busbw_gbps"] > 0
    pairs = sorted(tuple(sorted(p["hosts"])) for p in report["pairs"])
    assert pairs == [(A, B), (A, C), (B, C)]
    assert all(p["correct"] and not p["slow"] for p in report["pairs"])
    assert all(check["passed"] for check in report["checks"])


def test_every_node_wrote_its_copy_and_the_controller_has_them():
    copies = {
        h: json.loads((REPORTS / "fleet/cluster/allreduce" / f"{h}.json").read_text())
        for h in HOSTS
    }
    assert {h: c["host"] for h, c in copies.items()} == {h: h for h in HOSTS}
    assert sorted(c["written_by_rank"] for c in copies.values()) == [0, 1, 2]
    assert all(c["passed"] for c in copies.values())
    for name in HOSTS:
        on_host = node(name).file(f"{WORK}/allreduce.json")
        assert on_host.user == "researcher"  # the job ran as the lab's account
        assert json.loads(on_host.content_string) == copies[name]


def test_the_training_ran_across_the_three_hosts():
    report = json.loads((REPORTS / "fleet/cluster/smoke.json").read_text())
    assert report["passed"] is True, report["checks"]
    # --nnodes 3 with one process each: one rank on every host.
    assert report["world_size"] == 3
    assert sorted(r["rank"] for r in report["ranks"]) == [0, 1, 2]
    assert all(r["device"] == "cpu" for r in report["ranks"])
    if report["schema_version"] >= 2:  # the smoke report names every rank's host from schema 2
        assert sorted(r["host"] for r in report["ranks"]) == HOSTS
    assert any(c["name"] == "allreduce" and c["passed"] for c in report["checks"])
    assert report["epochs"] == 1 and report["test_accuracy"] >= 0.9


def test_fleet_report_shows_the_cluster_check():
    run = fleet_report(REPORTS, HOSTS)
    assert run.returncode == 1, run.stderr  # the hosts have no smoke reports of their own
    assert "cluster check: pass" in run.stdout
    fleet = json.loads((REPORTS / "fleet.json").read_text())
    assert fleet["cluster"]["verdict"] == "pass" and fleet["cluster"]["world_size"] == 3


@pytest.mark.parametrize("name", HOSTS)
def test_the_lock_was_given_back(name):
    assert not node(name).file(LOCK).exists


# -- check mode, bad input, a second run ----------------------------------------------------------
def test_check_mode_starts_nothing_and_changes_nothing():
    before = node(A).file(f"{WORK}/allreduce.json").mtime
    run = play(PLAYBOOK, {}, "--check")
    assert run.returncode == 0, said(run)[-3000:]
    assert changed(run) == 0, said(run)[-3000:]
    assert node(A).file(f"{WORK}/allreduce.json").mtime == before


SNAPSHOT = (
    f"find {WORK} /opt/rocmlab/wheels {LOCK} -type f -print0 2>/dev/null | sort -z"
    " | xargs -0 -r sha256sum; ls /tmp"
)
# (alias, variables, what the refusal must say). All aliases are host a.
HOSTILE = [
    ("port-low", {"cluster_check_port": 80}, ["cluster_check_port", "80", "1024 to 65535"]),
    ("port-shell", {"cluster_check_port": "29400; touch /tmp/pwned"}, ["cluster_check_port"]),
    (
        "iface-shell",
        {"cluster_check_iface": "eth0;touch /tmp/pwned"},
        ["cluster_check_iface", "interface name"],
    ),
    (
        "iface-absent",
        {"cluster_check_iface": "eth9"},
        ["cluster_check_iface", "eth9", "is not a network interface"],
    ),
    ("nproc-auto", {"cluster_check_nproc_per_node": "auto"}, ["cluster_check_nproc_per_node"]),
    ("nproc-zero", {"cluster_check_nproc_per_node": 0}, ["cluster_check_nproc_per_node", "1 to"]),
    ("join-zero", {"cluster_check_join_timeout": 0}, ["cluster_check_join_timeout", "5 to 86400"]),
    (
        "timeout-short",
        {"cluster_check_timeout": 30, "cluster_check_join_timeout": 60},
        ["cluster_check_timeout", "not more than cluster_check_join_timeout"],
    ),
    (
        "allreduce-json",
        {"cluster_check_allreduce_args": ["--js=/etc/passwd"]},
        ["cluster_check_allreduce_args[0]", "--json"],
    ),
    (
        "allreduce-timeout",
        {"cluster_check_allreduce_args": ["--time", "5"]},
        ["cluster_check_allreduce_args[0]", "--timeout", "cluster_check_step_timeout"],
    ),
    (
        "allreduce-string",
        {"cluster_check_allreduce_args": "--sizes 1K; touch /tmp/pwned"},
        ["cluster_check_allreduce_args", "not a list"],
    ),
    (
        "smoke-data",
        {"cluster_check_smoke_args": ["--data=/etc"]},
        ["cluster_check_smoke_args[0]", "--data"],
    ),
    (
        "rdzv-unknown",
        {"cluster_check_rdzv_host": "node-x"},
        ["cluster_check_rdzv_host", "node-x", "is not a host of this play"],
    ),
    (
        "report-dir-newline",
        {"rocmlab_reports_dir": "/tmp/reports\n"},
        ["rocmlab_reports_dir", "control character"],
    ),
]  # fmt: skip
COMMON = {
    "user_groups_users": ["researcher"],
    "cluster_check_iface": "eth0",
    "cluster_check_nproc_per_node": 1,
    "cluster_check_train": False,
}


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """One run of the playbook over every hostile alias (all host a), a's snapshot around it."""
    inventory = alias_inventory(
        tmp_path_factory.mktemp("hostile") / "inventory.json",
        {alias: (A, {**COMMON, **extra}) for alias, extra, _ in HOSTILE},
    )
    before = node(A).check_output(SNAPSHOT)
    run = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), "--forks", "16", str(PLAYBOOK)],
        capture_output=True,
        text=True,
        env=ansible_env(),
        check=False,
    )
    return run, failures(run), before, node(A).check_output(SNAPSHOT)


def test_no_bad_value_changes_the_host(hostile_run):
    run, _, before, after = hostile_run
    assert run.returncode != 0
    assert after == before
    assert not node(A).file("/tmp/pwned").exists


@pytest.mark.parametrize(("alias", "extra", "expected"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_each_bad_value_is_refused_naming_it(hostile_run, alias, extra, expected):
    _, failed, _, _ = hostile_run
    assert alias in failed, f"{alias} was not refused; refused: {sorted(failed)}"
    message = " ".join(failed[alias].split())
    for fragment in expected:
        assert fragment in message, (fragment, message)


def test_a_second_run_changes_nothing():
    run = play(PLAYBOOK, LEAN)
    assert run.returncode == 0, said(run)[-3000:]
    assert changed(run) == 0, said(run)[-3000:]
    assert "The all-reduce across 3 host(s) passed" in said(run)
    report = cluster_json()
    assert report["passed"] is True and [s["bytes"] for s in report["sizes"]] == [1024, 2048, 4096]


# -- what the check names -------------------------------------------------------------------------
def test_a_slowed_link_is_flagged_with_its_host():
    # One host's link at 256 kbit/s (tbf: this kernel has no netem), a queue of 2 s that holds a
    # whole 16 KiB message: its two pairs are slow (molecule.yml says why not 1 Mbit/s).
    node(C).run_expect([0], "tc qdisc add dev eth0 root tbf rate 256kbit burst 32kbit latency 2s")
    try:
        run = play(PLAYBOOK, LEAN)
    finally:
        node(C).run_expect([0], "tc qdisc del dev eth0 root")
    # Each pair's bus bandwidth beside the reference, for a run that did not flag the link.
    report = cluster_json()
    measured = [(p["hosts"], p["busbw_gbps"], p["slow"]) for p in report["pairs"]]
    assert run.returncode != 0, (report["pairwise"]["reference_busbw_gbps"], measured)
    message = message_of(run)
    assert "[slow_pairs]" in message and C in message, message
    assert report["passed"] is False and report["suspect_hosts"] == [C]
    slow = {tuple(sorted(p["hosts"])): p["slow"] for p in report["pairs"]}
    assert slow == {(A, B): False, (A, C): True, (B, C): True}
    assert all(C in s["hosts"] for s in report["slow_pairs"])
    assert all(p["correct"] for p in report["pairs"])  # slow, but exact
    for name in HOSTS:
        assert not node(name).file(LOCK).exists


def test_a_host_that_cannot_reach_the_rendezvous_is_named():
    join_timeout = 15
    route = f"unreachable {address(A)}/32"
    node(C).run_expect([0], f"ip route add {route}")
    try:
        run = play(PLAYBOOK, {**LEAN, "cluster_check_join_timeout": join_timeout})
    finally:
        node(C).run_expect([0], f"ip route del {route}")
    assert run.returncode != 0
    message = message_of(run)
    assert "The all-reduce never started" in message, message
    assert (
        f"Never joined: {C} (it could not connect to the rendezvous at {address(A)}:29400"
        in message
    )
    # Every torchrun ended by itself after the join timeout, long before `timeout` (300 s) would
    # have: the margin is torch's import, slow when three hosts start it on two busy cores.
    for name in HOSTS:
        assert f"{name}: exit 1 after " in message, message
    took = [int(t) for t in re.findall(r": exit 1 after (\d+) s", message)]
    assert len(took) == 3 and max(took) <= join_timeout + 45, message
    record = cluster_json()
    assert record["tool"] == "rocmlab cluster-check" and record["passed"] is False
    assert record["never_joined"] == [C] and record["error"] == message
    for name in HOSTS:
        assert not node(name).file(LOCK).exists


HOLD_PORT = """
import os, socket, time
open("/tmp/rocmlab-held-port.pid", "w").write(str(os.getpid()))
s = socket.socket()
# As torch's store does: the earlier cases' connections to this port may still be in TIME_WAIT.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", 29400))
s.listen()
time.sleep(600)
"""


def test_a_held_rendezvous_port_is_named_and_no_job_starts():
    # Another process listens on the rendezvous port of a (the rendezvous host): the run stops
    # before any torchrun starts, naming the setting, the port and the host, instead of leaving
    # b and c waiting for a rendezvous that never comes.
    # A marker where each host's report goes: a job that started would remove it first.
    marker = "written by the test: no job may start"
    for name in HOSTS:
        node(name).run_expect([0], f"echo '{marker}' > {WORK}/allreduce.json")
    node(A).run_expect(
        [0], f"setsid python3 -c {shlex.quote(HOLD_PORT)} </dev/null >/dev/null 2>&1 &"
    )
    try:
        deadline = time.monotonic() + 30
        while (
            node(A)
            .run("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 29400))'")
            .rc
        ):
            assert time.monotonic() < deadline, "the listener did not start"
            time.sleep(0.5)
        run = play(PLAYBOOK, LEAN)
    finally:
        node(A).run("kill $(cat /tmp/rocmlab-held-port.pid)")
    assert run.returncode != 0
    message = message_of(run)
    assert f"cluster_check_port: 29400 is already in use on the rendezvous host {A}" in message
    assert "No allreduce job was started on any host" in message, message
    for name in HOSTS:
        assert node(name).file(f"{WORK}/allreduce.json").content_string.strip() == marker
        assert not node(name).file(LOCK).exists


def test_a_host_stopped_mid_run_ends_the_others_naming_it():
    step_timeout = 10
    extra = {
        "cluster_check_train": False,
        "cluster_check_pairwise": False,
        "cluster_check_step_timeout": step_timeout,
        # Long enough to be cut short: every size takes about 2 x step_timeout / 8.
        "cluster_check_allreduce_args": ["--sizes", "1K:16M", "--iters", "1000000"],
    }
    command = ["ansible-playbook", "-i", INVENTORY, "-e", json.dumps(extra), str(PLAYBOOK)]
    playbook = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ansible_env(),
        start_new_session=True,  # killed below with its forked workers, not only the parent
    )
    try:
        deadline = time.monotonic() + 240
        connected = f"python3 -c {shlex.quote(JOB_CONNECTED)} 29400 {address(A)} {address(B)}"
        while node(C).run(connected).rc != 0:
            assert playbook.poll() is None, playbook.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the all-reduce did not connect c to a and b"
            time.sleep(1)
        time.sleep(4)  # inside the run: the sizes take about 40 s
        docker("kill", C)
        killed = time.time()
        out, err = playbook.communicate(timeout=step_timeout + 120)
    finally:
        if playbook.poll() is None:
            # Killed here, the run cannot give the hosts back: do it, so that the next case
            # fails on its own account, not on this run's locks.
            os.killpg(playbook.pid, signal.SIGKILL)
            for name in (A, B):
                node(name).run(f"rm -f {LOCK}")
    run = subprocess.CompletedProcess(command, playbook.returncode, out, err)
    assert run.returncode != 0
    message = message_of(run)
    assert f"lost during the run: {C}" in message, message
    assert f"host {C})" in message, message  # the survivors' own diagnosis
    for name in (A, B):
        report = json.loads((REPORTS / "fleet/cluster/allreduce" / f"{name}.json").read_text())
        jsonschema.validate(report, ALLREDUCE_SCHEMA)
        assert report["passed"] is False and report["exit_code"] == 1
        assert [lost["host"] for lost in report["lost_ranks"]] == [C], report["error"]
        # Each survivor wrote its report as it left: within the step timeout and the diagnosis.
        written = node(name).file(f"{WORK}/allreduce.json").mtime.timestamp()
        assert written - killed < step_timeout + 25, (name, written - killed)
        assert not node(name).file(LOCK).exists


def test_a_host_down_before_the_run_stops_it_before_anything_starts():
    # c is still stopped: nothing may start on a and b, whose job would wait for c.
    before = {name: node(name).file(f"{WORK}/allreduce.json").mtime for name in (A, B)}
    run = play(PLAYBOOK, LEAN)
    assert run.returncode != 0
    text = said(run)
    assert f"and {C} failed or could not be reached earlier in this run" in text, text[-3000:]
    assert "no job was started on any host" in text
    for name in (A, B):
        assert node(name).file(f"{WORK}/allreduce.json").mtime == before[name]
        assert not node(name).file(LOCK).exists
