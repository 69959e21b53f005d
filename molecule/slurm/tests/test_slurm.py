"""Role slurm_health against a real Slurm: what converge left (slurm.conf's lines, the wrapper,
gres.conf), then slurmd started on the two GPU nodes, and in order: a GPU missing from gpu1's
KFD topology drains it within one interval with a rocmlab reason naming gpu_count, and putting
it back resumes it; a /dev/kfd the render group cannot open (mode 0600) drains gpu1 and the
mode put back resumes it; an operator's drain of gpu2 stays through the health runs, also one
whose reason starts with "rocmlab:"; a job with
--gres=gpu:1 runs the smoke job on an allocated node and playbooks/health.yml brings its report
to the fleet report; a hanging check on gpu2 is cut and neither drains it nor stalls slurmd; bad
input is refused before any change. The Epilog: a job that exits 1 drains its node, tier 2 runs
as researcher and its pass resumes the node; a second failed job within the cooldown and a job
that succeeds do nothing; an operator's drain made while the failing job ran stays, although its
reason starts with "rocmlab:"; maintenance keeps the node drained through tier 0 until tier 2
passes after its (stood-for) boot; an amdgpu reset failure in the kernel log drains the node, the
log of a new boot does not bring it back by tier 0, and `rocmlab-slurm-maintenance --after`
(docs/lab.md, "Slurm": the way back) does. Every wait is bounded (HealthCheckInterval is 5 s
here)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import testinfra
from playbook_runs import fleet_report, play, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
HEAD, GPU1, GPU2 = "rocmlab-slurm-head", "rocmlab-slurm-gpu1", "rocmlab-slurm-gpu2"
INTERVAL = 5
STATE = "/var/lib/rocmlab/health/slurm"
RECORD = f"{STATE}/slurm-drain.json"
WRAPPER = "/usr/local/sbin/rocmlab-slurm-health"
TOPOLOGY = "/srv/rocmlab-fixture/machine/sys/class/kfd/kfd/topology/nodes"
KFD = "/srv/rocmlab-fixture/machine/dev/kfd"
KERNEL_LOG = "/srv/rocmlab-fixture/kernel.log"
SMOKE_REPORT = "/var/lib/rocmlab/smoke/report.json"
REPORTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"


def node(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def shown(name: str) -> dict[str, str]:
    """State and reason of a node, as scontrol on the head says."""
    line = node(HEAD).check_output(f"scontrol show node -o {name}")
    state = re.search(r"\sState=(\S+)", line)[1]
    reason = re.search(r"\sReason=(.*?)(?: \[[^\]]+@[^\]]+\]|$)", line)
    return {"state": state, "reason": reason[1] if reason else ""}


def wait_for(what: str, test, bound: float):
    """Poll ``test`` every half second until it returns something true, at most ``bound`` s."""
    deadline = time.monotonic() + bound
    while True:
        found = test()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound:g} s: {what}")
        time.sleep(0.5)


def gate_runs(name: str) -> float:
    """When the wrapper's last run on ``name`` ended (its gate.log), 0 when none."""
    host = node(name)
    out = host.run(f"stat -c %Y {STATE}/gate.log")
    return float(out.stdout) if out.rc == 0 else 0.0


def next_run(name: str, bound: float = 3 * INTERVAL + 10) -> str:
    """Wait for a health run on ``name`` that starts after now and ends; its gate.log."""
    start = time.time()
    wait_for(f"a health run on {name}", lambda: gate_runs(name) > start + 0.5, bound)
    time.sleep(0.5)  # the gate's last line follows the report
    return node(name).file(f"{STATE}/gate.log").content_string


@pytest.fixture(scope="module", autouse=True)
def slurmd():
    """slurmd on both GPU nodes (gres.conf is the role's), both idle."""
    for name in (GPU1, GPU2):
        node(name).run_expect([0], "pgrep -x slurmd || slurmd")
    wait_for(
        "both GPU nodes idle",
        lambda: all(shown(n)["state"] == "IDLE" for n in (GPU1, GPU2)),
        40,
    )


def test_converge_configured_slurm_and_the_nodes_run_the_check():
    conf = node(GPU1).file("/etc/slurm/slurm.conf").content_string
    assert f"HealthCheckProgram={WRAPPER}" in conf.splitlines()
    assert f"HealthCheckInterval={INTERVAL}" in conf.splitlines()
    assert "HealthCheckNodeState=IDLE,CYCLE" in conf.splitlines()
    assert "Epilog=/usr/local/sbin/rocmlab-slurm-epilog" in conf.splitlines()
    assert node(HEAD).file("/etc/slurm/slurm.conf").content_string == conf
    assert not node(HEAD).file(WRAPPER).exists  # the controller has no GPU
    gres = node(GPU1).file("/etc/slurm/gres.conf").content_string.splitlines()
    assert [x.split("  #")[0] for x in gres if not x.startswith("#")] == [
        f"NodeName={GPU1} Name=gpu File=/dev/dri/renderD128",
        f"NodeName={GPU1} Name=gpu File=/dev/dri/renderD129",
    ]
    wrapper = node(GPU1).file(WRAPPER)
    assert (wrapper.user, wrapper.mode) == ("root", 0o755)
    assert "Gres=gpu:2" in node(HEAD).check_output(f"scontrol show node -o {GPU1}")
    log = next_run(GPU1)
    assert "verdict: WARN" in log or "verdict: PASS" in log, log
    assert f"slurm: {GPU1} is IDLE: nothing to resume" in log, log


def test_a_gpu_missing_drains_the_node_within_an_interval_and_the_fix_resumes_it():
    gpu1 = node(GPU1)
    # The second MI210's KFD node (the last GPU node of the topology) disappears.
    gpu1.run_expect([0], f"mkdir -p /srv/gone && mv {TOPOLOGY}/2 /srv/gone/")
    start = time.monotonic()
    found = wait_for(
        "gpu1 drained by rocmlab",
        lambda: (s := shown(GPU1))["reason"].startswith("rocmlab: gpu_count:") and s,
        2 * INTERVAL + 10,
    )
    drained_after = time.monotonic() - start
    assert "DRAIN" in found["state"], found
    assert len(found["reason"]) <= 80, found
    assert drained_after <= 2 * INTERVAL + 10
    log = gpu1.file(f"{STATE}/gate.log").content_string
    report = json.loads(gpu1.file(f"{STATE}/tier0.json").content_string)
    count = next(c for c in report["checks"] if c["name"] == "gpu_count")
    assert count["status"] == "fail" and "2 expected" in count["saw"]  # the whole verdict
    assert f"slurm: drain {GPU1}: rocmlab: gpu_count:" in log, log
    # Root recorded the drain: that, not the reason's words, makes it rocmlab's.
    record = json.loads(gpu1.file(RECORD).content_string)
    assert record["reason"] == found["reason"] and record["checks"] == ["gpu_count"], record
    assert (gpu1.file(RECORD).user, gpu1.file(RECORD).mode) == ("root", 0o600)
    # The fix: the GPU is back.
    gpu1.run_expect([0], f"mv /srv/gone/2 {TOPOLOGY}/")
    wait_for("gpu1 resumed", lambda: shown(GPU1)["state"] == "IDLE", 2 * INTERVAL + 10)
    assert shown(GPU1)["reason"] == ""
    assert not gpu1.file(RECORD).exists


def test_a_kfd_the_render_group_cannot_open_drains_the_node_and_the_fix_resumes_it():
    gpu1 = node(GPU1)
    before = gpu1.check_output(f"stat -c %a {KFD}")
    gpu1.run_expect([0], f"chmod 0600 {KFD}")  # still group render: only its mode changed
    try:
        found = wait_for(
            "gpu1 drained for node_group",
            lambda: (s := shown(GPU1))["reason"].startswith("rocmlab: node_group:") and s,
            2 * INTERVAL + 10,
        )
        assert "DRAIN" in found["state"], found
        report = json.loads(gpu1.file(f"{STATE}/tier0.json").content_string)
        group = next(c for c in report["checks"] if c["name"] == "node_group")
        assert group["status"] == "fail" and "render may not read and write it" in group["saw"]
    finally:
        gpu1.run_expect([0], f"chmod {before} {KFD}")
    wait_for("gpu1 resumed", lambda: shown(GPU1)["state"] == "IDLE", 2 * INTERVAL + 10)


@pytest.mark.parametrize("reason", ["fan swap, ticket 4711", "rocmlab:ops firmware update"])
def test_an_operators_drain_is_not_resumed(reason):
    head = node(HEAD)
    head.run_expect([0], f"scontrol update NodeName={GPU2} State=DRAIN Reason='{reason}'")
    try:
        log = next_run(GPU2)
        log = next_run(GPU2)  # two runs that passed
        assert "verdict: WARN" in log or "verdict: PASS" in log, log
        assert "is not rocmlab's" in log, log
        assert shown(GPU2) == {"state": "IDLE+DRAIN", "reason": reason}
    finally:
        head.run_expect([0], f"scontrol update NodeName={GPU2} State=RESUME")


def test_a_job_with_a_gpu_runs_the_smoke_job_and_its_report_reaches_the_fleet_report():
    head = node(HEAD)
    # The smoke account's report, where the smoke_test role leaves it and playbooks/health.yml
    # reads it (docs/lab.md, "Slurm").
    script = (
        "hostname; /opt/rocmlab/venvs/pytorch/bin/rocmlab smoke --epochs 1 "
        f"--data /var/lib/rocmlab/datasets/mnist --json {SMOKE_REPORT}"
    )
    for name in (GPU1, GPU2):  # the converged image's report is not the job's
        node(name).run_expect([0], f"rm -f {SMOKE_REPORT}")
    job = head.run(
        "cd /tmp && timeout 150 runuser -u researcher -- sbatch --parsable --wait --gres=gpu:1 "
        f"-o /tmp/slurm-smoke-%j.out --wrap '{script}'"
    )
    assert job.rc == 0, job.stdout + job.stderr
    job_id = job.stdout.strip().split(";")[0]
    shown_job = head.check_output(f"scontrol show job -o {job_id}")
    assert "JobState=COMPLETED" in shown_job and "TresPerNode=gres:gpu:1" in shown_job, shown_job
    ran_on = re.search(r"\sNodeList=(\S+)", shown_job)[1]
    assert ran_on in (GPU1, GPU2), shown_job
    report = node(ran_on).file(SMOKE_REPORT)
    assert report.user == "researcher"
    doc = json.loads(report.content_string)
    assert doc["passed"] is True, doc
    # The controller brings it (as root, bounded, never through a link) and the fleet report
    # shows that node's verdict from that job.
    kept = REPORTS / f"{ran_on}.json"
    kept.unlink(missing_ok=True)
    run = play(PROJECT / "playbooks" / "health.yml", {}, "-l", ran_on)
    assert run.returncode == 0, said(run)[-3000:]
    assert json.loads(kept.read_text()) == doc
    fleet = fleet_report(REPORTS, [ran_on])
    assert fleet.returncode == 0, fleet.stdout + fleet.stderr
    line = next(ln for ln in fleet.stdout.splitlines() if ln.startswith(ran_on))
    assert re.match(rf"{ran_on}\s+READY\s+.*accuracy {doc['test_accuracy']:.4f}", line), line


def test_a_hanging_check_is_cut_and_neither_drains_nor_stalls_slurmd():
    gpu2 = node(GPU2)
    # The MI210 fixture's amdgpu is AMD's DKMS build: tier 0 runs `dkms status`, which hangs.
    gpu2.run_expect(
        [0], "printf '#!/bin/sh\\nexec sleep 170\\n' > /usr/sbin/dkms && chmod 755 /usr/sbin/dkms"
    )
    try:
        started = time.monotonic()
        log = next_run(GPU2)
        assert re.search(r"ERROR dkms_headers: stopped after 4\.\d s", log), log
        took = re.search(r"verdict: WARN \(.*\) in ([\d.]+) s \(tier 0, budget 5 s\)", log)
        assert took and float(took[1]) < 6, log
        assert shown(GPU2)["state"] == "IDLE", shown(GPU2)
        # slurmd answered all along: the node never stopped responding, and a job runs there.
        assert time.monotonic() - started < 3 * INTERVAL + 15
        ran = node(HEAD).run(f"timeout 60 srun -w {GPU2} -t 1 hostname")
        assert ran.rc == 0 and ran.stdout.strip() == GPU2, ran.stdout + ran.stderr
    finally:
        gpu2.run_expect([0], "rm -f /usr/sbin/dkms")
    # Every hung `dkms` a run started was killed at that run's cut: once a run has ended after
    # the hanging command was taken away, none is left (each would otherwise live 170 s).
    next_run(GPU2)
    left = gpu2.run("ps -eo stat=,args= | awk '$1 !~ /^Z/ && /sleep 170/' | grep -v awk")
    assert left.stdout.strip() == "", left.stdout


TIER2_LOG = f"{STATE}/tier2.log"
TIER2_BOUND = 240  # the job's end, a few seconds; tier 2 on two shared cores, well under this


def tier2_log(name: str) -> str:
    out = node(name).run(f"cat {TIER2_LOG}")
    return out.stdout if out.rc == 0 else ""


def submit(script: str, on: str, wait: bool = True):
    """A batch job of researcher's on node ``on``; with ``wait``, sbatch returns when it ended
    (its exit status is the job's). Returns the run and the job id."""
    flags = "--wait " if wait else ""
    ran = node(HEAD).run(
        f"cd /tmp && timeout 60 runuser -u researcher -- sbatch --parsable {flags}-w {on} "
        f"-t 2 -o /dev/null --wrap '{script}'"
    )
    job_id = ran.stdout.strip().split(";")[0]
    assert re.fullmatch(r"\d+", job_id), ran.stdout + ran.stderr
    return ran, job_id


def settles_at(name: str, expected: dict[str, str], bound: float = 30) -> None:
    """The node's state and reason become ``expected`` (slurmctld may mark a busy slurmd
    NOT_RESPONDING for a moment while tier 2 loads its two cores)."""
    wait_for(f"{name} {expected}", lambda: shown(name) == expected, bound)


def test_a_failed_job_drains_its_node_runs_tier_2_as_the_account_and_a_pass_resumes_it():
    ran, job = submit("exit 1", GPU1)
    assert ran.rc == 1, ran.stdout + ran.stderr
    wait_for(
        "the runner's gate on gpu1",
        lambda: f"slurm: resume {GPU1}: tier 2 verdict" in tier2_log(GPU1),
        TIER2_BOUND,
    )
    settles_at(GPU1, {"state": "IDLE", "reason": ""})
    log = tier2_log(GPU1)
    assert f"job {job} ended FAILED (exit 1:0): tier 2 checks the node" in log, log
    assert f"drain {GPU1}: rocmlab: job_failed: job {job} exit 1:0, tier 2 runs" in log, log
    assert re.search(r"tier 2 verdict: (pass|warn)", log), log
    # slurmctld's own word: the node was drained with rocmlab's reason (no new job could land
    # during tier 2), then resumed.
    ctld = node(HEAD).file("/var/log/slurm/slurmctld.log").content_string
    drained = ctld.find(
        f"update_node: node {GPU1} reason set to: rocmlab: job_failed: job {job} exit 1:0"
    )
    assert drained >= 0, ctld[-3000:]
    assert re.search(rf"update_node: node {GPU1} state set to DRAIN", ctld[drained:]), ctld[-3000:]
    assert re.search(rf"update_node: node {GPU1} state set to IDLE", ctld[drained:]), ctld[-3000:]
    report = node(GPU1).file("/var/lib/rocmlab/health/slurm-tier2/tier2.json")
    assert report.user == "researcher"  # tier 2 ran as the account, not root
    doc = json.loads(report.content_string)
    assert doc["tier"] == 2 and doc["user"] == "researcher", doc
    assert next(c for c in doc["checks"] if c["name"] == "smoke")["status"] == "pass", doc


def test_a_second_failed_job_within_the_cooldown_and_a_job_that_succeeds_do_nothing():
    _, failed = submit("exit 3", GPU1)
    _, done = submit("true", GPU1)
    wait_for(
        "the runner's word on both jobs",
        lambda: f"job {done} ended COMPLETED (exit 0:0): nothing to do" in tier2_log(GPU1),
        30,
    )
    log = tier2_log(GPU1)
    assert f"job {failed} ended FAILED (exit 3:0): tier 2 checks the node" in log, log
    assert re.search(r"cooldown: tier 2 ran \d+ s ago, next in \d+ s: skipped", log), log
    assert f"drain {GPU1}: rocmlab: job_failed: job {failed}" not in log, log
    settles_at(GPU1, {"state": "IDLE", "reason": ""}, 10)


def test_an_operators_drain_made_while_the_failing_job_ran_is_kept_through_tier_2():
    """Its reason starts with "rocmlab:" (an operator may type that): it stays all the same."""
    gpu2, head = node(GPU2), node(HEAD)
    theirs = "rocmlab:ops firmware update"
    gpu2.run_expect([0], "rm -f /tmp/rocmlab-go")
    # The job fails when the test says so: the operator's drain comes first, deterministically.
    _, job = submit("while [ ! -e /tmp/rocmlab-go ]; do sleep 0.2; done; exit 1", GPU2, False)
    wait_for(
        "the job running on gpu2",
        lambda: "JobState=RUNNING" in head.check_output(f"scontrol show job -o {job}"),
        30,
    )
    head.run_expect([0], f"scontrol update NodeName={GPU2} State=DRAIN Reason='{theirs}'")
    try:
        gpu2.run_expect([0], "touch /tmp/rocmlab-go")
        wait_for(
            "the runner's gate on gpu2",
            lambda: re.search(rf"slurm: .*'{theirs}'", tier2_log(GPU2)),
            TIER2_BOUND,
        )
        log = tier2_log(GPU2)
        assert f"job {job} ended FAILED (exit 1:0)" in log, log
        assert f"is drained by someone else ('{theirs}'): left as it is" in log, log
        assert "is not rocmlab's" in log, log  # tier 2 ran; its pass resumed nothing
        assert "root's tier 0 verdict: " in log, log  # root checked the node itself too
        settles_at(GPU2, {"state": "IDLE+DRAIN", "reason": theirs})
    finally:
        head.run_expect([0], f"scontrol update NodeName={GPU2} State=RESUME")


def test_maintenance_keeps_the_node_out_until_tier_2_passes_after_its_boot():
    gpu1 = node(GPU1)
    # Containers cannot reboot (slurmctld compares the node's boot time, which is the host's):
    # the helper drains without the reboot, and the boot is stood for by the boot id it noted.
    gpu1.run_expect([0], f"rm -f {STATE}/tier2-state.json {RECORD}")
    said = gpu1.run_expect([0], "/usr/local/sbin/rocmlab-slurm-maintenance --no-reboot")
    assert "rocmlab: maintenance:" in said.stdout, said.stdout
    reason = "rocmlab: maintenance: back in service when tier 2 passes"
    settles_at(GPU1, {"state": "IDLE+DRAIN", "reason": reason})
    next_run(GPU1)
    log = next_run(GPU1)  # tier 0 passes and does not resume it; no boot since: no tier 2
    assert f"slurm: {GPU1} stays drained" in log, log
    wait_for(
        "the health check's word on the pending maintenance",
        lambda: f"'{reason}' waits for tier 2 after a reboot" in tier2_log(GPU1),
        15,
    )
    settles_at(GPU1, {"state": "IDLE+DRAIN", "reason": reason})
    # "The node booted": the boot id root recorded with the drain is not this boot's. The
    # health check's next run starts tier 2, whose pass resumes the node.
    gpu1.run_expect(
        [0],
        f'sed -i \'s/"boot_id": "[^"]*"/"boot_id": "earlier"/\' {RECORD} '
        f"&& grep -q earlier {RECORD}",
    )
    wait_for(
        "the runner's gate after the boot",
        lambda: f"after-boot: slurm: resume {GPU1}" in tier2_log(GPU1),
        TIER2_BOUND,
    )
    settles_at(GPU1, {"state": "IDLE", "reason": ""})


def test_a_reset_failure_in_the_kernel_log_drains_and_comes_back_by_the_documented_path():
    gpu1 = node(GPU1)
    gpu1.run_expect([0], f"cp -p {KERNEL_LOG} {KERNEL_LOG}.boot")
    # amdgpu's line for a reset that failed (amdgpu_device.c's format, dev_err's prefix).
    failed = (
        "amdgpu 0000:03:00.0: amdgpu: ASIC reset failed with error, -110 for drm dev, 0000:03:00.0"
    )
    gpu1.run_expect([0], f"echo '[  950.818199] {failed}' >> {KERNEL_LOG}")
    try:
        found = wait_for(
            "gpu1 drained for kernel_log",
            lambda: (s := shown(GPU1))["reason"].startswith("rocmlab: kernel_log:") and s,
            2 * INTERVAL + 10,
        )
        assert "reboot" in found["reason"] and "DRAIN" in found["state"], found
        assert json.loads(gpu1.file(RECORD).content_string)["needs"] == 2
    finally:
        # The log of the node's next boot, without the failure.
        gpu1.run_expect([0], f"cp -p {KERNEL_LOG}.boot {KERNEL_LOG}")
    log = next_run(GPU1)
    log = next_run(GPU1)  # tier 0 passes now, and does not bring it back
    assert "PASS  kernel_log" in log and f"slurm: {GPU1} stays drained" in log, log
    assert shown(GPU1)["reason"].startswith("rocmlab: kernel_log:")
    # The way back without a reboot (docs/lab.md, "Slurm"): tier 2 now, and its pass resumes
    # the node.
    ran = gpu1.run("timeout 600 /usr/local/sbin/rocmlab-slurm-maintenance --after")
    assert ran.rc == 0, ran.stdout + ran.stderr
    assert f"after-boot: slurm: resume {GPU1}" in ran.stdout, ran.stdout
    settles_at(GPU1, {"state": "IDLE", "reason": ""})
    assert not gpu1.file(RECORD).exists


def test_bad_input_is_refused_before_anything_changes():
    before = node(GPU1).file("/etc/slurm/slurm.conf").content_string
    run = play(PROJECT / "playbooks" / "slurm_health.yml", {"slurm_health_timeout": 90})
    assert run.returncode != 0
    message = said(run)
    assert (
        "slurm_health_timeout: 90 is out of range. Use a number of seconds from 10 to 55" in message
    ), message[-2000:]
    assert node(GPU1).file("/etc/slurm/slurm.conf").content_string == before
