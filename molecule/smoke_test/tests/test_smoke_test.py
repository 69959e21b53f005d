"""The smoke job ran on the host as the researcher and its report reached the controller."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
from playbook_runs import changed, failures, fleet_report, play, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")
REPORTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"
DATA = "/var/lib/rocmlab/datasets/mnist"
VENV = "/opt/rocmlab/venvs/pytorch"
PLAYBOOKS = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "playbooks"
COLLECT = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "collect.yml"
WORK = "/var/lib/rocmlab/smoke"


@pytest.fixture(scope="module")
def report(host):
    name = host.backend.get_hostname()
    return json.loads((REPORTS / f"{name}.json").read_text())


def test_report_reached_the_controller_and_passed(report):
    assert report["passed"] is True
    assert report["checks"] and all(check["passed"] for check in report["checks"])


def test_report_tells_the_truth_about_the_device(report):
    # A CPU wheel in a container without a GPU: the report must say so, not claim a GPU.
    assert report["backend"] == "cpu"
    assert report["hip_version"] is None
    assert report["torch_version"].startswith("2.13.0")


def test_report_shows_real_training(report):
    assert report["dataset"] == "mnist"
    assert report["epochs"] == 1
    assert report["test_accuracy"] >= 0.9  # the tutorial's MLP after one epoch on real MNIST
    assert report["samples_per_second"] > 0


@pytest.mark.parametrize(
    "name",
    [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ],
)
def test_dataset_is_staged_and_root_owned(host, name):
    staged = host.file(f"{DATA}/{name}")
    assert staged.exists
    assert (staged.user, staged.mode) == ("root", 0o644)


def test_job_ran_as_the_researcher(host):
    report_file = host.file("/var/lib/rocmlab/smoke/report.json")
    assert report_file.user == "researcher"


def test_rocmlab_is_installed_in_the_pytorch_venv_only(host):
    assert host.run(f"{VENV}/bin/rocmlab --help").rc == 0
    assert host.run("python3 -c 'import rocmlab'").rc != 0


def test_the_passing_job_recorded_the_hosts_known_good_state(host):
    # Written by root after the job passed (converge), kept as it was by the idempotence run.
    record = host.file("/var/lib/rocmlab/known-good.json")
    assert (record.user, record.group, record.mode) == ("root", "root", 0o600)
    data = json.loads(record.content_string)
    assert data["format"] == 2 and data["since"].endswith("Z")
    assert re.fullmatch(r"[0-9a-f]{64}", data["digest"])  # over the whole record
    assert data["kernel"] == host.check_output("uname -r")
    # No ROCm on this host: no AMD package, no release; the venv the job ran in, frozen.
    assert data["packages"] == {} and data["rocm_version"] is None
    frozen = data["venvs"][VENV]
    assert any(line.startswith("torch==") for line in frozen), frozen
    assert data["rocmlab_version"] == "0.1.0"


def test_an_altered_dataset_fails_the_job_naming_the_file(host):
    labels = f"{DATA}/t10k-labels-idx1-ubyte"
    host.run_expect([0], f"cp {labels} /tmp/labels.bak")
    host.run_expect([0], f"printf 'x' | dd of={labels} bs=1 seek=100 conv=notrunc")
    try:
        result = host.run(
            "runuser --login researcher --command "
            f"'{VENV}/bin/rocmlab smoke --data {DATA} --epochs 1 --json /tmp/r.json'"
        )
        assert result.rc == 3
        assert "t10k-labels-idx1-ubyte" in result.stdout + result.stderr
    finally:
        host.run_expect([0], f"cp /tmp/labels.bak {labels}")


def test_check_mode_on_the_converged_host_changes_nothing():
    run = play(Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml", {}, "--check")
    assert run.returncode == 0, said(run)[-3000:]
    assert changed(run) == 0, said(run)[-3000:]


def test_the_doctor_ran_first_as_the_researcher_and_its_verdict_is_in_the_report(report):
    doctor = report["doctor"]
    assert doctor["tool"] == "rocmlab doctor"
    assert doctor["user"] == "researcher"
    assert doctor["verdict"] in ("pass", "warn")
    names = [check["name"] for check in doctor["checks"]]
    assert {"gpu_groups", "torch_build", "dev_shm"} <= set(names)
    torch_build = next(check for check in doctor["checks"] if check["name"] == "torch_build")
    assert torch_build["status"] == "pass" and "CPU" in torch_build["saw"]


def test_a_host_the_doctor_fails_stops_before_training_with_the_fix(host):
    # A GPU is now expected on a host that has none: the doctor FAILs, and the role stops the
    # host with the doctor's own fix before any training starts.
    report_file = "/var/lib/rocmlab/smoke/report.json"
    host.run_expect([0], f"rm -f {report_file}")
    run = play(PLAYBOOKS / "smoke.yml", {"smoke_test_expect_gpus": 1})
    assert run.returncode != 0
    message = said(run)
    assert "rocmlab doctor found what stops" in message, message[-3000:]
    assert "Fix:" in message
    assert not host.file(report_file).exists  # the smoke job never started


@pytest.mark.parametrize("playbook", ["smoke.yml", "frameworks.yml"])
def test_each_playbook_works_on_its_own(playbook):
    # smoke.yml alone finds its account from user_groups_users (no user_groups run needed), and
    # frameworks.yml alone on the converged host changes nothing.
    run = play(PLAYBOOKS / playbook, {})
    assert run.returncode == 0, said(run)[-3000:]
    if playbook == "frameworks.yml":
        assert changed(run) == 0, said(run)[-3000:]


def test_the_cnn_and_the_techniques_run_and_their_report_and_trace_reach_the_controller(host):
    run = play(
        PLAYBOOKS / "smoke.yml",
        {
            "smoke_test_model": "cnn",
            "smoke_test_techniques": ["accumulation", "checkpoint", "amp", "profile"],
        },
    )
    assert run.returncode == 0, said(run)[-3000:]
    name = host.backend.get_hostname()
    report = json.loads((REPORTS / f"{name}.json").read_text())
    assert report["model"] == "cnn" and report["passed"] is True
    assert report["test_accuracy"] >= 0.95
    checks = {check["name"]: check for check in report["checks"]}
    for technique in ("accumulation", "checkpoint", "amp", "profile"):
        assert checks[technique]["passed"], checks[technique]
    assert "not applicable" in checks["amp"]["detail"] and report["amp_speedup"] is None  # a CPU
    assert report["profile"]["top_kernels"]
    trace = json.loads((REPORTS / f"{name}.trace.json").read_text())
    assert trace["traceEvents"]


# --- the account is hostile (prepare.yml planted shell functions; the cases below plant files) ---
def test_the_accounts_shell_functions_never_ran_and_its_report_is_its_own(host, report):
    # Every run of this scenario so far (converge, idempotence, check mode, each playbook, the
    # CNN with the techniques) had functions named timeout, rocmlab, env, rm and cd in the
    # researcher's ~/.profile and ~/.bashrc, which a login shell would have run.
    assert "timeout()" in host.file("/home/researcher/.profile").content_string
    assert not host.file("/home/researcher/hijacked").exists
    report_file = host.file(f"{WORK}/report.json")
    assert report_file.is_file and not report_file.is_symlink
    assert report_file.user == "researcher"
    assert report["passed"] is True


# What the researcher puts in its working directory after the job, and what root must say when it
# collects the report and trace (roles/smoke_test/tasks/collect.yml through collect.yml).
PLANTED = [
    (
        "report-link",
        "ln -s /etc/shadow report.json",
        {},
        "report.json is a symbolic link (to '/etc/shadow'), which root does not follow",
    ),
    (
        "trace-link",
        """printf '{"own": 1}' > report.json && ln -s /etc/shadow report.trace.json""",
        {"smoke_test_techniques": ["profile"]},
        "report.trace.json is a symbolic link (to '/etc/shadow'), which root does not follow",
    ),
    ("report-fifo", "mkfifo report.json", {}, "report.json is a FIFO (named pipe), not a regular"),
    ("report-huge", "truncate -s 5M report.json", {}, "report.json is 5242880 bytes, more than"),
]


@pytest.fixture
def planted(host):
    """Clears the job's files before and after a case (as root, outside the role)."""
    files = " ".join(f"{WORK}/{name}" for name in ("report.json", "report.trace.json"))
    host.run_expect([0], f"rm -f {files}")
    yield
    host.run_expect([0], f"rm -f {files}")


@pytest.mark.parametrize(
    ("case", "plant", "extra", "fragment"), PLANTED, ids=[case[0] for case in PLANTED]
)
def test_what_the_account_plants_is_refused_or_is_its_own_file(
    host, planted, case, plant, extra, fragment
):
    name = host.backend.get_hostname()
    for kept in (REPORTS / f"{name}.json", REPORTS / f"{name}.trace.json"):
        kept.unlink(missing_ok=True)
    host.run_expect([0], f"cd {WORK} && runuser -u researcher -- sh -c {shlex.quote(plant)}")
    run = play(COLLECT, extra)
    assert run.returncode != 0, said(run)[-3000:]
    message = " ".join(failures(run)[name].split())
    assert message.startswith(f"Refused to read {WORK}/"), message
    assert f"{WORK}/{fragment}" in message and "Nothing of it was read." in message, message
    if case == "trace-link":
        # The report beside it is the researcher's own regular file: that one arrives.
        assert json.loads((REPORTS / f"{name}.json").read_text()) == {"own": 1}
    else:
        assert not (REPORTS / f"{name}.json").exists()
    assert not (REPORTS / f"{name}.trace.json").exists()
    shadow = [line for line in host.check_output("cat /etc/shadow").splitlines() if line]
    for kept in REPORTS.rglob("*"):
        if kept.is_file():
            text = kept.read_text(errors="replace")
            assert not any(line in text for line in shadow), kept
    assert not any(line in said(run) for line in shadow)


# --- the health timer (smoke_test_health_timer): on, its tier-0 run, the report fetched, off ---
TIMER = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "health-timer.yml"
UNITS = "/etc/systemd/system"
HEALTH = "/var/lib/rocmlab/health"
TIMER_ON = {
    "smoke_test_health_timer": True,
    "smoke_test_health_interval": 7,
    "smoke_test_health_daily_at": "03:30",
}


def unit_lines(host, name: str) -> dict[str, list[str]]:
    """KEY -> its values, of the lines of an installed unit file."""
    lines: dict[str, list[str]] = {}
    for line in host.file(f"{UNITS}/{name}").content_string.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            lines.setdefault(key, []).append(value)
    return lines


@pytest.fixture(scope="module")
def timer_on(host):
    run = play(TIMER, TIMER_ON)
    assert run.returncode == 0, said(run)[-3000:]
    return run


def test_the_health_timer_is_refused_with_a_bad_time_before_anything_changes(host):
    run = play(TIMER, dict(TIMER_ON, smoke_test_health_daily_at="4:61"))
    assert run.returncode != 0
    message = " ".join(failures(run)[host.backend.get_hostname()].split())
    assert 'smoke_test_health_daily_at: "4:61" is not accepted' in message, message
    assert "Use a time of day as HH:MM (24 hours)" in message, message
    assert not host.file(f"{UNITS}/rocmlab-health-tier0.timer").exists


def test_the_health_timers_tier_0_run_lands_on_the_host_and_in_the_fleet_report(host, timer_on):
    assert "systemd is not running on" in said(timer_on)
    for name in ("tier0.service", "tier0.timer", "tier2.service", "tier2.timer"):
        unit = host.file(f"{UNITS}/rocmlab-health-{name}")
        assert (unit.user, unit.group, unit.mode) == ("root", "root", 0o644), name
    tier0_timer = unit_lines(host, "rocmlab-health-tier0.timer")
    assert tier0_timer["OnUnitActiveSec"] == ["7min"] and tier0_timer["RandomizedDelaySec"] == [
        "84"
    ]
    tier2_timer = unit_lines(host, "rocmlab-health-tier2.timer")
    assert tier2_timer["OnCalendar"] == ["*-*-* 03:30:00"] and tier2_timer["Persistent"] == ["true"]
    tier2 = unit_lines(host, "rocmlab-health-tier2.service")
    assert tier2["User"] == ["researcher"]  # training never runs as root
    assert "--smoke-arg=--epochs --smoke-arg=1" in tier2["ExecStart"][0]
    tier0 = unit_lines(host, "rocmlab-health-tier0.service")
    assert "User" not in tier0  # root: the kernel log, root's known-good record
    argv = shlex.split(tier0["ExecStart"][0])
    assert argv[:5] == ["/usr/bin/flock", "-n", "-E", "75", f"{HEALTH}/tier0.lock"], argv
    assert argv[6:9] == ["-I", "-m", "rocmlab"], argv  # root's Python, isolated
    lock = host.file(f"{HEALTH}/tier0.lock")
    assert (lock.user, lock.group, lock.mode) == ("root", "root", 0o600)  # root's alone
    assert not host.file(f"{HEALTH}/timer.lock").exists  # the lock both tiers shared before
    assert "SuccessExitStatus" not in tier0 and "SuccessExitStatus" not in tier2
    assert shlex.split(tier2["ExecStart"][0])[4] == f"{HEALTH}/tier2/tier2.lock"  # the account's

    # Run the tier-0 service's command as the timer would (no systemd in the container).
    command = " ".join(shlex.quote(word) for word in argv)
    host.run_expect([0], f"rm -f {HEALTH}/tier0.json")
    ran = host.run(command)
    assert ran.rc in (0, 1), ran.stdout + ran.stderr
    report_file = host.file(f"{HEALTH}/tier0.json")
    assert (report_file.user, report_file.mode) == ("root", 0o644)
    on_host = json.loads(report_file.content_string)
    assert on_host["tool"] == "rocmlab health" and on_host["tier"] == 0
    assert on_host["exit_code"] == ran.rc
    prom = host.file("/var/lib/prometheus/node-exporter/rocmlab-health-tier0.prom").content_string
    assert 'rocmlab_health_healthy{tier="0"}' in prom

    # While a run holds the lock, the next one is skipped (exit 75, a failure of the unit: no
    # SuccessExitStatus) and writes nothing.
    before = report_file.mtime
    held = host.run(f"flock {HEALTH}/tier0.lock {command}")
    assert held.rc == 75, held.stdout + held.stderr
    assert host.file(f"{HEALTH}/tier0.json").mtime == before

    # The controller fetches it (playbooks/health.yml) and the fleet report shows it with its age.
    name = host.backend.get_hostname()
    fetched = REPORTS / "health" / f"{name}.json"
    fetched.unlink(missing_ok=True)
    run = play(PLAYBOOKS / "health.yml", {})
    assert run.returncode == 0, said(run)[-3000:]
    assert json.loads(fetched.read_text()) == on_host
    said_words = " ".join(said(run).split())
    assert f"{name}: tier 0, {on_host['verdict']}, finished {on_host['finished']}" in said_words
    shown = fleet_report(REPORTS, [name])
    assert shown.returncode in (0, 1), shown.stdout + shown.stderr
    line = next(line for line in shown.stdout.splitlines() if line.startswith(name))
    assert re.search(rf"\b{on_host['verdict'].upper()} \d+[sm]\b", line), shown.stdout


def test_the_health_units_pass_systemd_analyze_verify(host, timer_on):
    if not host.exists("systemd-analyze"):
        pytest.skip(
            "systemd-analyze is not installed in this container (no systemd): the units are "
            "verified by tests/python/test_health_timer.py on the controller instead"
        )
    units = " ".join(
        f"{UNITS}/rocmlab-health-{n}"
        for n in ("tier0.service", "tier0.timer", "tier2.service", "tier2.timer")
    )
    verified = host.run(f"systemd-analyze verify {units}")
    assert verified.rc == 0, verified.stdout + verified.stderr


def test_the_health_timer_off_removes_its_units(host, timer_on):
    run = play(TIMER, {"smoke_test_health_timer": False})
    assert run.returncode == 0, said(run)[-3000:]
    assert changed(run) >= 1
    for name in ("tier0.service", "tier0.timer", "tier2.service", "tier2.timer"):
        assert not host.file(f"{UNITS}/rocmlab-health-{name}").exists, name
    # The reports stay, for the record.
    assert host.file(f"{HEALTH}/tier0.json").exists
