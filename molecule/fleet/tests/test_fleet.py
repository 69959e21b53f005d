"""A lab rollout (playbooks/fleet.yml) over five containers, one ansible-playbook run per case,
each run building on what the one before left (the cases of issue 7, in order):

  bad input  rollout settings out of range: refused before any host is contacted
  run A      case a: the canary breaks on a setting of its own host_vars (its smoke job fails):
             quarantined, the rollout stops, the other hosts untouched; meanwhile case d: one host
             with a GPU compute process in its KFD tree, one with a user logged in: skipped
  run B      cases b and c: a budget that allows one failure, a host broken in the middle of the
             rollout, one container stopped: the others converge (the canary's quarantine lifted);
             the fleet report opened in headless Chromium
  run E1     case e: a new host added with -l: only it changes
  run E2     case e: a full run afterwards: changed=0 on every host
  hostile    a host whose module returns a fleet plan of its own (a command for the controller):
             the fleet_report callback runs nothing of it, its table is the real plan's
  run U      the lab's ROCm moved to 7.1: f, the canary, upgraded from 6.4.2, then b moved from the
             distribution's ROCm to AMD's 7.1; gates passed, known-good records at 7.1.0; a, on
             the distribution's ROCm, changes nothing
  run V      f, then b, moved back to 6.4.2: clean downgrades, known-good 6.4.2 again
  run G      f moved to a release whose health gate fails: rolled back, its venv from its kept copy
  run H      f's venv changed with no kept copy: playbooks/rollback.yml rebuilds it from the
             known-good record's freeze (the wheelhouse, rocmlab's wheel) and swaps it in
  run I      f moved to a release whose upgrade fails (a package's postinst exits 1): rolled back
             from the half-configured state, the failing package and its script's lines recorded

Hosts: a, b and f are Debian 12 (they converge: PyTorch from the harness's wheelhouse, Python
3.11); c and d are Debian 13 (Python 3.13, for which the wheelhouse has no torch): they stand for
the machines that are away or in use, and are never provisioned here, while their preflight is
real. The lab's settings are the demo's (distro ROCm with the runtime tools, the wheelhouse's CPU
torch, one epoch, no GPU expected); gfx_override and TensorFlow are left out with --skip-tags.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import testinfra
from playbook_runs import alias_inventory, ansible_env, changed, failures, play, said

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])

sys.path.insert(0, str(PROJECT / "collections"))
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_release import (  # noqa: E402
    release_of,
)

FLEET = PROJECT / "playbooks" / "fleet.yml"
REPORTS = EPHEMERAL / "reports"
ARTIFACTS = [EPHEMERAL / "fleet.png", PROJECT / ".cache" / "artifacts" / "fleet-rollout.png"]
A, B, C, D, F = (f"rocmlab-fleet-{x}" for x in "abcdf")
QUARANTINE = "/var/lib/rocmlab/quarantine.json"
VENV = "/opt/rocmlab/venvs/pytorch"
# The KFD fixture of host c: the driver (drivers/gpu/drm/amd/amdkfd/kfd_process.c,
# kfd_procfs_init and the per-process kobject) lists each process holding a compute context as
# /sys/class/kfd/kfd/proc/<pid>/ with a pasid file and a queues/ directory. PID 1 is the
# container's `sleep`, so the process is alive.
KFD_ROOT = "/srv/rocmlab-fixture/sys"
# What a refused or skipped host must not see change: apt's configuration, rocmlab's files, the
# venvs, accounts and groups, the packages.
SNAPSHOT = (
    "find /etc/apt /etc/ld.so.conf.d /etc/profile.d /etc/environment.d /etc/rocmlab"
    " /opt/rocmlab /var/lib/rocmlab /run/rocmlab.lock -type f -print0 2>/dev/null"
    " | sort -z | xargs -0 -r sha256sum; ls -la --time-style=+%s /opt /var/lib 2>/dev/null;"
    " cat /etc/group /etc/passwd; dpkg-query -W -f '${Package} ${Version} ${Status}\\n'"
)
LAB = {
    "ansible_connection": "community.docker.docker",
    "ansible_python_interpreter": "/usr/bin/python3",
    "rocm_repo_source": "distro",
    "rocm_packages_list": ["rocminfo", "rocm-smi", "clinfo"],
    "user_groups_users": ["researcher"],
    "pytorch_rocm_version": "2.13.0",
    "pytorch_rocm_rocm_version": "7.2",
    "pytorch_rocm_index_url": "",
    "pytorch_rocm_find_links": os.environ.get("ROCMLAB_WHEELHOUSE_URL", ""),
    "pytorch_rocm_require_rocm_build": False,
    "pytorch_rocm_torchvision": False,
    "smoke_test_mnist_url": os.environ.get("ROCMLAB_DATASETS_URL", "") + "mnist/",
    "smoke_test_args": ["--epochs", "1"],
    "smoke_test_expect_gpus": 0,
    # The smoke job of this checkout takes no --doctor-json yet (smoke report schema 2).
    "smoke_test_doctor": False,
    "rocmlab_reports_dir": str(REPORTS),
    "rocmlab_fleet_connect_timeout": 5,
    "rocmlab_free_space_gib": {"rocm": 1, "venvs": 2, "datasets": 0.1},
}


# The canary alone, then every other host in one batch.
CANARY_THEN_ALL = {"rocmlab_fleet_serial": [1, "100%"]}


def host(name: str):
    return testinfra.get_host(f"docker://{name}")


def inventory(name: str, hosts: dict[str, dict]) -> Path:
    path = EPHEMERAL / f"fleet-{name}.json"
    path.write_text(json.dumps({"all": {"hosts": hosts, "vars": LAB}}, indent=1))
    return path


def rollout(inv: Path, *args: str, extra: dict | None = None) -> subprocess.CompletedProcess:
    """fleet.yml as a lab admin runs it, with the fleet table of the callback at the end."""
    env = dict(ansible_env(), ANSIBLE_CALLBACKS_ENABLED="rocmlab.rocmlab.fleet_report")
    command = ["ansible-playbook", "-i", str(inv), "--skip-tags", "gfx_override,tensorflow_rocm"]
    if extra:
        command += ["-e", json.dumps(extra)]
    run = subprocess.run(
        [*command, *args, str(FLEET)], capture_output=True, text=True, env=env, check=False
    )
    (EPHEMERAL / f"{inv.stem}.log").write_text(run.stdout + run.stderr)
    return run


def recap(run: subprocess.CompletedProcess) -> dict[str, dict[str, int]]:
    """Each host's counts in the run's PLAY RECAP."""
    counts = {}
    for line in run.stdout.split("PLAY RECAP", 1)[1].splitlines():
        if ": ok=" in line:
            name, rest = line.split(":", 1)
            counts[name.strip()] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)}
    return counts


def record(name: str, kind: str = "rollout") -> dict:
    return json.loads((REPORTS / "fleet" / kind / f"{name}.json").read_text())


def snapshot(*names: str) -> dict[str, str]:
    return {name: host(name).check_output(SNAPSHOT) for name in names}


def log_in(name: str, user: str) -> None:
    """A real utmp record of USER on pts/3 (what login or sshd writes), made by util-linux's
    utmpdump on the controller, read back by the controller's `who` (Debian 13's own `who` asks
    systemd-logind, which a container lacks), and copied into the container as /run/utmp. Its
    process is PID 1, which is alive."""
    text = (
        f"[7] [00001] [ts/3] [{user:<8}] [pts/3       ] [10.0.0.5            ]"
        " [10.0.0.5       ] [2025-01-06T09:12:00,000000+00:00]\n"
    )
    utmp = EPHEMERAL / f"utmp-{user}"
    subprocess.run(["utmpdump", "-r", "-o", str(utmp)], input=text, text=True, check=True)
    listed = subprocess.run(["who", str(utmp)], capture_output=True, text=True, check=True)
    assert listed.stdout.split()[:2] == [user, "pts/3"], listed.stdout
    subprocess.run(["docker", "cp", str(utmp), f"{name}:/run/utmp"], check=True)


def log_out(name: str) -> None:
    host(name).run("rm -f /run/utmp")


@pytest.fixture(scope="module")
def fresh() -> dict[str, str]:
    return snapshot(A, B, C, D, F)


# --- bad input: refused before any host is contacted ----------------------------------------
BAD = [
    ("serial-zero", {"rocmlab_fleet_serial": 0}, ["rocmlab_fleet_serial: 0", "no host would ever"]),
    ("serial-negative", {"rocmlab_fleet_serial": -1}, ["rocmlab_fleet_serial: -1"]),
    (
        "serial-over-100",
        {"rocmlab_fleet_serial": "150%"},
        ['rocmlab_fleet_serial: "150%"', "over 100%"],
    ),
    ("serial-zero-share", {"rocmlab_fleet_serial": [1, "0%"]}, ['rocmlab_fleet_serial[1]: "0%"']),
    (
        "budget-negative",
        {"rocmlab_fleet_failure_budget": -5},
        ["rocmlab_fleet_failure_budget: -5", "from 0"],
    ),
    (
        "budget-over-100",
        {"rocmlab_fleet_failure_budget": 101},
        ["rocmlab_fleet_failure_budget: 101"],
    ),
    (
        "slow-zero",
        {"rocmlab_fleet_slow_fraction": 0},
        ["rocmlab_fleet_slow_fraction: 0", "above 0"],
    ),
    ("slow-over-1", {"rocmlab_fleet_slow_fraction": 1.5}, ["rocmlab_fleet_slow_fraction: 1.5"]),
]


def test_bad_rollout_settings_are_refused_before_any_host_is_contacted(fresh) -> None:
    aliases = {
        f"bad-{case}": ((A, B)[i % 2], {**LAB, **values}) for i, (case, values, _) in enumerate(BAD)
    }
    inv = alias_inventory(EPHEMERAL / "fleet-bad.json", aliases)
    run = rollout(inv)
    assert run.returncode != 0
    # "fatal: [alias -> localhost]": the settings are checked on the controller.
    found = {name.split(" -> ")[0]: msg for name, msg in failures(run).items()}
    for case, _values, fragments in BAD:
        message = " ".join(found.get(f"bad-{case}", "").split())
        for fragment in [*fragments, "Use "]:
            assert fragment in message, (case, message)
    assert "PLAY [Preflight" not in run.stdout  # the run ended in the first play
    assert snapshot(A, B) == {name: fresh[name] for name in (A, B)}


# --- run A: the canary breaks on its own setting; hosts in use are skipped -------------------
@pytest.fixture(scope="module")
def run_a(fresh):
    host(C).check_output(f"mkdir -p {KFD_ROOT}/class/kfd/kfd/proc/1/queues")
    host(C).check_output(f"echo 32770 > {KFD_ROOT}/class/kfd/kfd/proc/1/pasid")
    log_in(D, "alice")
    before = snapshot(B, C, D)
    inv = inventory(
        "a",
        {
            # Passes every check, breaks only when the canary's smoke job runs: a gate no
            # one-epoch run reaches.
            A: {"smoke_test_args": ["--epochs", "1", "--min-accuracy", "0.999"]},
            B: {},
            C: {"rocmlab_fleet_sysfs_root": KFD_ROOT},
            D: {},
        },
    )
    return rollout(inv), before


def test_a_preflight_says_one_line_per_host_and_check(run_a) -> None:
    run, _ = run_a
    text = said(run)
    for name in (A, B, C, D):
        for check in ("reachable", "settings", "python", "free_space", "dpkg", "clock", "in_use"):
            assert re.search(rf"{name} (PASS|WARN) {check} ", text), (name, check)
        preflight = record(name, "preflight")
        assert preflight["passed"] is True
        assert {c["name"] for c in preflight["checks"]} >= {
            "reachable", "settings", "python", "free_space", "dpkg", "clock", "in_use",
            "mirror_pytorch_wheelhouse", "mirror_mnist_dataset_mirror",
        }  # fmt: skip
    # Debian's point release comes from /etc/debian_version: "Debian 13" or "Debian 13.2".
    assert re.fullmatch(r"Debian 13(\.\d+)?", record(C, "preflight")["facts"]["distribution"])
    assert record(A, "preflight")["facts"]["python"].startswith("3.11")


def test_a_the_broken_canary_is_quarantined_and_stops_the_rollout(run_a) -> None:
    run, _ = run_a
    assert run.returncode != 0
    canary = record(A)
    assert (canary["state"], canary["batch"]) == ("quarantined", 1)
    assert "accuracy" in canary["reason"]
    # It never passed its gate, so it has no known-good state to go back to.
    assert canary["reason"].endswith(
        "; not rolled back: no known-good record (the host never passed its health gate)"
    )
    state = json.loads(host(A).file(QUARANTINE).content_string)
    assert state["reason"] == canary["reason"] and state["rollout_id"] == canary["rollout_id"]
    # The rollout stopped after the canary's batch: no task of the rollout reached b.
    rollout_play = run.stdout.split("PLAY [Roll out, the canary first", 1)[1]
    assert "PLAY RECAP" in rollout_play and f"[{B}]" not in rollout_play.split("PLAY RECAP")[0]


def test_a_the_other_hosts_are_untouched(run_a) -> None:
    _run, before = run_a
    assert snapshot(B, C, D) == before
    for name in (B, C, D):
        assert not host(name).file(VENV).exists
        assert not host(name).file(QUARANTINE).exists
    untouched = record(B)
    assert untouched["state"] == "not_run" and untouched["batch"] is None
    assert "failure budget" in untouched["reason"]


def test_d_hosts_in_use_are_skipped_with_the_reason(run_a) -> None:
    assert record(C)["state"] == "skipped"
    assert record(C)["reason"] == "GPU compute process running: PID 1 (sleep)"
    assert record(D)["state"] == "skipped"
    assert record(D)["reason"].startswith("user logged in: alice on pts/3 from 10.0.0.5")


def test_a_the_fleet_table_ends_even_a_stopped_rollout(run_a) -> None:
    run, _ = run_a
    table = run.stdout[run.stdout.index("FLEET REPORT") :]
    for name, state in ((A, "QUARANTINED"), (B, "NOT_RUN"), (C, "SKIPPED"), (D, "SKIPPED")):
        assert any(line.split()[:2] == [name, state] for line in table.splitlines()), table
    assert "fleet: 0 of 4 hosts ready" in table


# --- run B: one failure allowed, one host broken mid-rollout, one container stopped ----------
@pytest.fixture(scope="module")
def run_b(run_a):
    subprocess.run(["docker", "stop", "-t", "1", C], check=True, capture_output=True)
    log_out(D)
    inv = inventory(
        "b",
        {
            A: {},
            B: {},
            C: {"rocmlab_fleet_sysfs_root": KFD_ROOT},
            # Passes preflight (a well-formed package name), breaks in the middle of its batch.
            D: {"rocm_packages_list": ["rocminfo", "rocmlab-no-such-package"]},
        },
    )
    run = rollout(inv, extra={"rocmlab_fleet_serial": [1, 2], "rocmlab_fleet_failure_budget": 50})
    kept = EPHEMERAL / "reports-b"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(REPORTS, kept)
    return run, kept


def test_b_the_others_converge_and_the_canary_is_released(run_b) -> None:
    run, _ = run_b
    assert run.returncode != 0
    for name, batch in ((A, 1), (B, 2)):
        rec = record(name)
        assert (rec["state"], rec["reason"], rec["batch"]) == ("ready", None, batch)
        report = json.loads((REPORTS / f"{name}.json").read_text())
        assert report["passed"] is True
        assert host(name).file(f"{VENV}/bin/rocmlab").exists
        assert "researcher" in host(name).group("render").members
    assert not host(A).file(QUARANTINE).exists  # a later successful run lifts the quarantine
    # The wheel is asked for once for the rollout, not once per batch (two batches here).
    # The playbooks apply the roles by their full names, which prefix the task names.
    build = "rocmlab.rocmlab.smoke_test : Find or build the rocmlab wheel on the controller]"
    built = [
        task
        for task in run.stdout.split("TASK [")
        if task.startswith(build) and re.search(r"^(ok|changed): ", task, re.M)
    ]
    assert len(built) == 1, built


def test_b_the_broken_host_is_named_with_its_reason(run_b) -> None:
    run, _ = run_b
    broken = record(D)
    assert (broken["state"], broken["batch"]) == ("failed", 2)
    assert "rocmlab-no-such-package" in broken["reason"]
    assert D in failures(run)


def test_c_the_stopped_container_is_set_aside(run_b) -> None:
    run, _ = run_b
    away = record(C)
    assert away["state"] == "unreachable" and "no answer within 5 s" in away["reason"]
    assert f"{C} is set aside (unreachable): no answer within 5 s" in said(run)


def test_b_the_fleet_report_says_who_is_ready_and_why_not(run_b) -> None:
    _, kept = run_b
    fleet = json.loads((kept / "fleet.json").read_text())
    states = {h["host"]: (h["state"], h["reason"]) for h in fleet["hosts"]}
    assert states[A] == ("ready", None) and states[B] == ("ready", None)
    assert states[C][0] == "unreachable" and states[C][1].startswith("unreachable: no answer")
    assert states[D][0] == "failed" and "rocmlab-no-such-package" in states[D][1]
    assert fleet["ready"] is False and fleet["summary"]["ready"] == 2


def chromium() -> str:
    found = shutil.which("chromium")
    if not found:
        if os.environ.get("ROCMLAB_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is not on PATH and ROCMLAB_REQUIRE_CHROMIUM=1")
        pytest.skip("chromium is not on PATH (apt-get install -y chromium)")
    return found


def headless(*args: str) -> str:
    profile = EPHEMERAL / "chromium-profile"
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               f"--user-data-dir={profile}", *args]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_b_the_html_report_in_a_browser_flags_the_hosts_that_are_not_ready(run_b) -> None:
    _, kept = run_b
    page = (kept / "fleet.html").as_uri()
    dom = headless("--dump-dom", page)
    rows = {}
    for chunk in dom.split("<tr ")[1:]:
        attrs = chunk.split(">", 1)[0]
        if 'data-host="' in attrs:
            name = attrs.split('data-host="', 1)[1].split('"', 1)[0]
            rows[name] = attrs
    assert sorted(rows) == sorted([A, B, C, D])
    for name in (A, B):
        assert 'data-ready="true"' in rows[name]
    for name, state in ((C, "unreachable"), (D, "failed")):
        assert 'data-ready="false"' in rows[name] and f'data-state="{state}"' in rows[name]
        assert "bad" in rows[name].split('class="', 1)[1].split('"', 1)[0].split()
    assert "NOT READY: 2 of 4 hosts ready" in dom
    headless("--window-size=1600,1200", f"--screenshot={ARTIFACTS[0]}", page)
    assert ARTIFACTS[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ARTIFACTS[1].parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ARTIFACTS[0], ARTIFACTS[1])


# --- run E1 and E2: a new host with -l, then a full run with changed=0 ---------------------
# f takes AMD's ROCm from the harness's AMD-layout mirror (the others the distribution's): its
# records hold the release read from it.
AMD_SOURCE = {
    "rocm_repo_source": "amd",
    "rocm_repo_base_url": os.environ.get("ROCMLAB_MIRROR_URL", ""),
    "rocm_repo_key_fingerprint": os.environ.get("ROCMLAB_MIRROR_FINGERPRINT", ""),
    "rocm_packages_list": [],
}
LAB_E = {A: {}, B: {}, C: {"rocmlab_fleet_sysfs_root": KFD_ROOT}, D: {}, F: AMD_SOURCE}
SMOKE_REPORT = "/var/lib/rocmlab/smoke/report.json"


@pytest.fixture(scope="module")
def run_e1(run_b):
    log_in(D, "bob")  # d is in use again: it stays out (the harness has no torch for it)
    before = snapshot(A, B)
    runs_before = {name: host(name).file(SMOKE_REPORT).mtime for name in (A, B)}
    run = rollout(inventory("e", LAB_E), "--limit", F)
    return run, before, runs_before


def test_e_a_new_host_added_with_limit_changes_it_alone(run_e1) -> None:
    run, before, runs_before = run_e1
    assert run.returncode == 0, said(run)[-3000:]
    assert set(recap(run)) - {"localhost"} == {F}
    assert record(F)["state"] == "ready"
    # What f had before (nothing) and after its change, read from f, against the inventory's.
    assert record(F, "preflight")["facts"]["rocm_version"] is None
    assert record(F, "preflight")["facts"]["rocm_configured"] == "6.4.2"
    assert record(F)["rocm"] == {"installed": "6.4.2", "configured": "6.4.2"}
    assert f"{F} PASS release no AMD ROCm installed: will install 6.4.2" in said(run)
    assert snapshot(A, B) == before
    assert {name: host(name).file(SMOKE_REPORT).mtime for name in (A, B)} == runs_before
    # The fleet table covers the whole inventory, not only the host of this run.
    table = run.stdout[run.stdout.index("FLEET REPORT") :]
    assert "fleet: 3 of 5 hosts ready" in table


@pytest.fixture(scope="module")
def run_e2(run_e1):
    return rollout(inventory("e", LAB_E), extra=CANARY_THEN_ALL)


def test_e_a_full_run_afterwards_changes_nothing(run_e2) -> None:
    run = run_e2
    assert changed(run) == 0, said(run)[-3000:]
    for name in (A, B, F):
        assert record(name)["state"] == "ready"
    assert record(F, "preflight")["facts"]["rocm_version"] == "6.4.2"  # read from f
    assert f"{F} PASS release 6.4.2: already the configured 6.4.2" in said(run)
    assert record(A)["rocm"] is None  # the distribution's ROCm: no release configured
    # What the preflight read from a: dpkg's version of Debian's rocminfo, dpkg --audit clean.
    assert re.fullmatch(r"5\.2\.\d+", record(A, "preflight")["facts"]["rocm_version"] or "")
    assert f"{A} PASS dpkg no lock held, dpkg --audit clean" in said(run)
    assert record(C)["state"] == "unreachable"
    assert record(D)["state"] == "skipped" and "bob" in record(D)["reason"]
    assert set(failures(run)) == {C}
    # f's known-good record as the rollout read it from f (written in E1, kept: the same state),
    # in its rollout record, fleet.json and the fleet table.
    known = record(F)["known_good"]
    assert known["release"] == "6.4.2", known
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", known["since"]), known
    assert record(A)["known_good"] is not None  # a must-pass gate on the distribution's ROCm
    fleet = {h["host"]: h for h in json.loads((REPORTS / "fleet.json").read_text())["hosts"]}
    assert fleet[F]["known_good"]["release"] == "6.4.2"
    assert fleet[F]["known_good"]["since"] == known["since"]
    table = run.stdout[run.stdout.index("FLEET REPORT") :]
    assert re.search(r"^HOST +STATE +(HEALTH +)?KNOWN-GOOD +DETAIL$", table, re.M), table
    assert re.search(rf"{F} +READY +6\.4\.2 \d+[smhd] ", table), table


# --- a compromised host returns a fleet plan of its own ------------------------------------
# Its root decides what its modules print: tests/fixtures/hostile_host/hostile_facts.py returns,
# as ansible_facts, a JSON file on the host. The plan in it names a command that would leave a
# marker on the controller, another reports directory and another host. The fleet_report
# callback acts on the plan roles/rocmlab_fleet/tasks/plan.yml made on the controller only.
@pytest.fixture(scope="module")
def hostile_run(run_e2):
    reports, elsewhere = EPHEMERAL / "reports-hostile", EPHEMERAL / "reports-elsewhere"
    for path in (reports, elsewhere):
        shutil.rmtree(path, ignore_errors=True)
    elsewhere.mkdir()
    marker = EPHEMERAL / "controller-ran-the-hosts-command"
    marker.unlink(missing_ok=True)
    forged = {
        "rocmlab_fleet_plan": {
            "rollout_id": "forged",
            "reports_dir": str(elsewhere),
            "check_mode": False,
            "declared": ["evil"],
            "slow_fraction": 0.7,
            "report_argv": ["sh", "-c", f"echo ran > {marker}"],
            "report_env": {},
        }
    }
    host(F).check_output(f"printf %s {shlex.quote(json.dumps(forged))} > /etc/rocmlab-hostile.json")
    playbook = EPHEMERAL / "hostile-facts.json"
    playbook.write_text(
        json.dumps(
            [
                {
                    "name": "Check the rollout's settings and make the plan",
                    "hosts": "all",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Check the settings and plan the rollout",
                            "ansible.builtin.import_role": {
                                "name": "rocmlab_fleet",
                                "tasks_from": "plan",
                            },
                        }
                    ],
                },
                {
                    "name": "A compromised host answers",
                    "hosts": F,
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Run a module whose output the host's root controls",
                            "hostile_facts": {"source": "/etc/rocmlab-hostile.json"},
                        },
                        {
                            "name": "Keep what the host said as its fact",
                            "ansible.builtin.set_fact": {
                                "rocmlab_fleet_plan": "{{ ansible_facts['rocmlab_fleet_plan'] }}"
                            },
                        },
                    ],
                },
            ]
        )
    )
    env = dict(
        ansible_env(),
        ANSIBLE_CALLBACKS_ENABLED="rocmlab.rocmlab.fleet_report",
        ANSIBLE_LIBRARY=str(PROJECT / "tests" / "fixtures" / "hostile_host"),
    )
    here = {"rocmlab_reports_dir": str(reports)}
    inv = inventory("hostile", {A: here, F: here})
    run = subprocess.run(
        ["ansible-playbook", "-i", str(inv), str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    (EPHEMERAL / "hostile-facts.log").write_text(run.stdout + run.stderr)
    return run, reports, elsewhere, marker


def test_a_hosts_fleet_plan_runs_nothing_on_the_controller(hostile_run) -> None:
    run, reports, elsewhere, marker = hostile_run
    assert run.returncode == 0, said(run)[-3000:]
    ran = run.stdout.split("TASK [Run a module whose output the host's root controls]", 1)[1]
    assert f"ok: [{F}]" in ran.split("TASK [", 1)[0], ran[:2000]
    assert "rollout forged" not in run.stdout
    assert not marker.exists()
    assert not (elsewhere / "fleet.json").exists()
    # The table at the end is the real plan's, over the inventory's hosts.
    table = run.stdout[run.stdout.index("FLEET REPORT [rollout ") :]
    assert "fleet: 0 of 2 hosts ready" in table, table
    fleet = json.loads((reports / "fleet.json").read_text())
    assert sorted(h["host"] for h in fleet["hosts"]) == sorted([A, F])


# What the runs from U on read of a host: its apt files, venv, known-good record, AMD packages.
APT_FILES = "find /etc/apt -type f -print0 | sort -z | xargs -0 sha256sum; find /etc/apt -type l"
FREEZE = f"{VENV}/bin/python -m pip freeze"
WHEELS = "/opt/rocmlab/wheels"
KNOWN_GOOD = "/var/lib/rocmlab/known-good.json"
# AMD's packages: their version carries the release (6.4.2.60402-1, 1.0.0.60402-1, 1:6.4.60402-1).
AMD_VERSION = re.compile(r"\.\d{5,6}-")


def amd_packages(name: str) -> list[str]:
    listed = host(name).check_output("dpkg-query -W -f '${Package} ${Version} ${Status}\\n'")
    return sorted(line for line in listed.splitlines() if AMD_VERSION.search(line))


# --- runs U and V: the lab's ROCm moved 6.4.2 -> 7.1 through the rollout, then back -----------
# f (AMD's ROCm from the mirror, on 6.4.2 since E1) is configured 7.1 and put first in the
# inventory, so it is the canary; b, on the distribution's ROCm until now, is moved to AMD's 7.1
# (rocm_packages_replace_distro: Debian's rocminfo and rocm-smi sort above AMD's) and a, which
# stays on the distribution's, has nothing to change: both follow in the second batch. The gate
# (the smoke job) passes on 7.1, so f's and b's known-good records move to 7.1.0. Run V moves f
# and b back to 6.4.2, f first again: a clean downgrade, recorded the same way. Both runs leave f
# in the state run G starts from (6.4.2, known-good 6.4.2).
LAB_U = {
    F: {**AMD_SOURCE, "rocm_repo_version": "7.1"},
    A: {},
    B: {**AMD_SOURCE, "rocm_repo_version": "7.1", "rocm_packages_replace_distro": True},
    C: LAB_E[C],
    D: LAB_E[D],
}
LAB_V = {**LAB_U, F: AMD_SOURCE, B: {**LAB_U[B], "rocm_repo_version": "6.4.2"}}


def amd_releases(name: str) -> set[str]:
    """The releases AMD's installed packages belong to, read from their versions by the
    collection's own rule (rocm_release.release_of: 6.4.2.60402-1 -> 6.4.2)."""
    return {release_of(line.split()[1]) for line in amd_packages(name)}


def assert_on(name: str, release: str, gone: str) -> None:
    """NAME runs RELEASE of AMD's ROCm, nothing of release GONE is left, and the record of the
    rollout and the known-good record read it from the host."""
    h = host(name)
    assert amd_releases(name) == {release}, amd_packages(name)
    assert h.file("/opt/rocm").linked_to == f"/opt/rocm-{release}"
    assert not h.file(f"/opt/rocm-{gone}").exists
    upgradable = h.check_output("apt list --upgradable 2>/dev/null")
    assert not AMD_VERSION.search(upgradable), upgradable
    rec = record(name)
    assert rec["rocm"]["installed"] == release, rec
    assert rec["known_good"]["release"] == release, rec
    assert json.loads(h.file(KNOWN_GOOD).content_string)["rocm_version"] == release


@pytest.fixture(scope="module")
def run_u(run_e2):
    before = {name: record(name) for name in (A, B, F)}
    apt_before = host(F).check_output(APT_FILES)
    run = rollout(inventory("u", LAB_U), "--limit", f"{F},{A},{B}", extra=CANARY_THEN_ALL)
    return run, before, apt_before


def test_u_the_canary_is_upgraded_through_the_rollout_and_the_rest_follow(run_u) -> None:
    run, before, apt_before = run_u
    text = said(run)
    assert run.returncode == 0, text[-3000:]
    assert f"{F} PASS release will change 6.4.2 \u2192 7.1.0 (upgrade)" in text, text[-3000:]
    assert f"{B} PASS release no AMD ROCm installed: will install 7.1.0" in text, text[-3000:]
    assert re.search(r"6\.4\.2 \u2192 7\.1\.0: \d+ packages change \(", text), text[-3000:]
    # The canary first, alone; the rest once its gate passed.
    for name, batch in ((F, 1), (A, 2), (B, 2)):
        rec = record(name)
        assert (rec["state"], rec["batch"], rec["reason"]) == ("ready", batch, None), rec
    for name in (F, B):
        assert_on(name, "7.1.0", "6.4.2")
        assert record(name)["rocm"] == {"installed": "7.1.0", "configured": "7.1"}
    assert host(F).check_output(APT_FILES) != apt_before
    assert record(F)["known_good"]["since"] > before[F]["known_good"]["since"]
    # b's Debian ROCm tools made way for AMD's; a, on the distribution's, changed nothing.
    assert "5.2.3" not in host(B).check_output("dpkg-query -W -f '${Version}' rocminfo")
    counts = recap(run)
    assert counts[A]["changed"] == 0 and counts[A]["failed"] == 0, counts
    assert record(A)["rocm"] is None and record(A)["known_good"] == before[A]["known_good"]
    fleet = {h["host"]: h for h in json.loads((REPORTS / "fleet.json").read_text())["hosts"]}
    assert fleet[F]["known_good"]["release"] == fleet[B]["known_good"]["release"] == "7.1.0"
    table = run.stdout[run.stdout.index("FLEET REPORT") :]
    for name in (F, B):
        assert re.search(rf"{name} +READY +7\.1\.0 \d+[smhd] ", table), table


@pytest.fixture(scope="module")
def run_v(run_u):
    return rollout(inventory("v", LAB_V), "--limit", f"{F},{B}", extra=CANARY_THEN_ALL)


def test_v_going_back_through_the_rollout_downgrades_cleanly(run_v) -> None:
    run = run_v
    text = said(run)
    assert run.returncode == 0, text[-3000:]
    for name in (F, B):
        line = f"{name} PASS release will change 7.1.0 \u2192 6.4.2 (downgrade)"
        assert line in text, text[-3000:]
    assert re.search(r"7\.1\.0 \u2192 6\.4\.2: \d+ packages change \(", text), text[-3000:]
    # AMD's own 7.1 packages, no longer offered by any source, are not taken for Debian's.
    assert "the distribution's ROCm packages are installed in versions above AMD's" not in text
    for name, batch in ((F, 1), (B, 2)):
        rec = record(name)
        assert (rec["state"], rec["batch"], rec["reason"]) == ("ready", batch, None), rec
        assert rec["rocm"] == {"installed": "6.4.2", "configured": "6.4.2"}, rec
        assert_on(name, "6.4.2", "7.1.0")


# --- run G: f moved to ROCm 7.1.1, whose health gate fails: the rollout rolls f back ----------
# 7.1.1 is the mirror's broken release (tests/fixtures/amd_mirror/build.sh): its OpenCL runtime
# registers an ICD whose library it does not ship, so `clinfo -l` lists no platform and the
# doctor, which the smoke job runs first, fails (check opencl). f passed its gate on 6.4.2 in runs
# E1, E2 and V, which recorded that state as its known-good one.
def newer_wheel() -> Path:
    """A rocmlab wheel of a later version (0.1.0.post1) built on the controller from this
    checkout, as an admin upgrading rocmlab together with ROCm hands the rollout one."""
    copy = EPHEMERAL / "rocmlab-next"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(PROJECT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT / "README.md", copy)
    pyproject = (PROJECT / "pyproject.toml").read_text()
    assert '\nversion = "0.1.0"\n' in pyproject
    (copy / "pyproject.toml").write_text(
        pyproject.replace('\nversion = "0.1.0"\n', '\nversion = "0.1.0.post1"\n')
    )
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "--wheel-dir", str(copy / "dist"), str(copy)], check=True)
    (wheel,) = (copy / "dist").glob("rocmlab-0.1.0.post1-*.whl")
    return wheel


def what_a_rollback_keeps(name: str) -> dict[str, object]:
    """NAME's apt files, AMD packages, venv and known-good record, as a rollback must leave them."""
    h = host(name)
    return {
        "apt": h.check_output(APT_FILES),
        "amd": amd_packages(name),
        "venv": h.check_output(FREEZE),
        "known_good": h.check_output(f"sha256sum {KNOWN_GOOD}"),
    }


@pytest.fixture(scope="module")
def run_g(run_v):
    before = {**what_a_rollback_keeps(F), "record": record(F)}
    others = snapshot(A, B)
    lab = {**LAB_E, F: {**AMD_SOURCE, "rocm_repo_version": "7.1.1", "smoke_test_doctor": True}}
    # rocmlab moves on with ROCm: the smoke job installs the newer wheel into the venv before
    # the gate fails, so the venv the rollback must put back really changed.
    wheel = newer_wheel()
    run = rollout(inventory("g", lab), "--limit", F, extra={"smoke_test_wheel": str(wheel)})
    return run, before, others


def test_g_a_host_whose_gate_fails_after_the_change_is_rolled_back(run_g) -> None:
    run, before, others = run_g
    assert run.returncode != 0
    text = said(run)
    assert f"{F} PASS release will change 6.4.2 \u2192 7.1.1 (upgrade)" in text, text[-3000:]
    rec = record(F)
    assert rec["state"] == "rolled_back", rec
    assert rec["reason"].startswith("health gate failed on ROCm 7.1.1 ("), rec["reason"]
    assert (
        "opencl: ICD amdocl64_70101.icd present but `clinfo -l` lists no platform" in rec["reason"]
    )
    assert "rolled back to ROCm 6.4.2, the known-good state since " in rec["reason"]
    assert rec["reason"].endswith("where the smoke job passed again"), rec["reason"]
    assert rec["rocm"] == {"installed": "6.4.2", "configured": "7.1.1"}
    f = host(F)
    # Back in the known-good state: the same AMD packages at the same versions, the apt files'
    # bytes, the venv, the record itself; nothing of 7.1.1 left, no quarantine.
    assert amd_packages(F) == before["amd"]
    assert f.check_output(APT_FILES) == before["apt"]
    # The venv: the rollout changed it (rocmlab 0.1.0 -> 0.1.0.post1, after a copy of it was
    # kept beside it), the rollback put that copy back: the same freeze, no copy left.
    assert f"rocmlab @ file://{WHEELS}/rocmlab-0.1.0-py3-none-any.whl" in before["venv"]
    kept = r"Keep the venv's known-good state beside it before the wheel changes it\] \**"
    assert re.search(kept + rf" changed: \[{F}\]", text), text[-3000:]
    assert f.file(f"{WHEELS}/rocmlab-0.1.0.post1-py3-none-any.whl").exists
    assert f"venvs put back from their kept copies: {VENV}" in text, text[-3000:]
    assert f.check_output(FREEZE) == before["venv"]
    assert "0.1.0.post1" not in f.check_output(FREEZE)
    assert f.check_output(f"ls -A {os.path.dirname(VENV)}").split() == ["pytorch"]
    assert f.check_output(f"sha256sum {KNOWN_GOOD}") == before["known_good"]
    assert f.file("/opt/rocm").linked_to == "/opt/rocm-6.4.2"
    assert not f.file("/opt/rocm-7.1.1").exists
    assert not f.file("/etc/OpenCL/vendors/amdocl64_70101.icd").exists
    assert not f.file(QUARANTINE).exists
    # The gate run again on the known-good state passed: its report is the one on the controller.
    assert json.loads((REPORTS / f"{F}.json").read_text())["passed"] is True
    assert snapshot(A, B) == others
    table = run.stdout[run.stdout.index("FLEET REPORT") :]
    assert re.search(rf"{F} +ROLLED_BACK .*rolled back: health gate failed on ROCm 7\.1\.1", table)
    # The known-good state it went back to, as the rollback plan read it: the one of run V.
    assert rec["known_good"] == before["record"]["known_good"]
    assert rec["known_good"]["release"] == "6.4.2"
    assert re.search(rf"{F} +ROLLED_BACK +6\.4\.2 \d+[smhd] ", table), table
    fleet = {h["host"]: h for h in json.loads((REPORTS / "fleet.json").read_text())["hosts"]}
    assert fleet[F]["known_good"]["release"] == "6.4.2"


# --- run H: f's venv changed with no kept copy; playbooks/rollback.yml rebuilds it --------------
# After run G f is in its known-good state again, with no kept copy of its venv. Its venv is
# changed by hand (the newer rocmlab wheel, which G left on f), so no copy is kept: the rollback
# rebuilds the venv beside it from the record's freeze - torch and its dependencies from the
# wheelhouse the inventory names (pytorch_rocm_find_links), rocmlab from its wheel in
# /opt/rocmlab/wheels - and swaps it in once its freeze is the record's.
ROLLBACK = PROJECT / "playbooks" / "rollback.yml"
VENV_STAT = f"stat -c '%U %G %a %i' {VENV}"
GFX_BLOCK = f"grep -c '^# BEGIN rocmlab: GPU override' {VENV}/bin/activate || true"


@pytest.fixture(scope="module")
def run_h(run_g):
    f = host(F)
    before = {
        "venv": f.check_output(FREEZE),
        "stat": f.check_output(VENV_STAT).split(),
        "gfx": f.check_output(GFX_BLOCK),
        "known_good": f.check_output(f"sha256sum {KNOWN_GOOD}"),
    }
    f.run_expect(
        [0],
        f"{VENV}/bin/python -m pip install --quiet --no-index --no-deps --force-reinstall"
        f" {WHEELS}/rocmlab-0.1.0.post1-py3-none-any.whl",
    )
    changed_venv = f.check_output(FREEZE)
    run = play(ROLLBACK, {}, "--limit", F, inventory=inventory("h", LAB_E))
    (EPHEMERAL / "fleet-h.log").write_text(run.stdout + run.stderr)
    return run, before, changed_venv


def test_h_a_venv_without_a_kept_copy_is_rebuilt_to_its_recorded_freeze(run_h) -> None:
    run, before, changed_venv = run_h
    assert "0.1.0.post1" in changed_venv and changed_venv != before["venv"]
    text = said(run)
    assert run.returncode == 0, text[-3000:]
    assert f"venvs rebuilt from their recorded freeze (no kept copy to put back): {VENV}" in text, (
        text[-3000:]
    )
    f = host(F)
    assert f.check_output(FREEZE) == before["venv"]
    owner, group, mode, inode = f.check_output(VENV_STAT).split()
    assert [owner, group, mode] == before["stat"][:3]
    assert inode != before["stat"][3]  # a new venv, not the changed one
    assert f.check_output(f"ls -A {os.path.dirname(VENV)}").split() == ["pytorch"]
    # Its scripts name the venv where it is; activate sources the GPU override as before.
    assert "usage" in f.check_output(f"{VENV}/bin/rocmlab --help").lower()
    assert f.check_output(f"head -c 200 {VENV}/bin/rocmlab").startswith(f"#!{VENV}/bin/python")
    assert f.check_output(GFX_BLOCK) == before["gfx"]
    assert f.check_output(f"sha256sum {KNOWN_GOOD}") == before["known_good"]


# --- run I: f moved to ROCm 7.1.2, whose upgrade itself fails: the rollout rolls f back -------
# 7.1.2 is the mirror's other broken release: its rocm-hip-runtime's postinst exits 1, so the
# upgrade task fails with it half-configured and what depends on it unpacked. The rollout rolls
# the host back from there (the dpkg guard lets exactly those packages through), runs the gate
# again on the known-good state, and its record names the package and what its script said.
@pytest.fixture(scope="module")
def run_i(run_h):
    before = what_a_rollback_keeps(F)
    lab = {**LAB_E, F: {**AMD_SOURCE, "rocm_repo_version": "7.1.2"}}
    run = rollout(inventory("i", lab), "--limit", F)
    return run, before


def test_i_a_host_whose_upgrade_fails_is_rolled_back_with_the_failing_script_named(run_i) -> None:
    run, before = run_i
    assert run.returncode != 0
    text = said(run)
    assert f"{F} PASS release will change 6.4.2 \u2192 7.1.2 (upgrade)" in text, text[-3000:]
    rec = record(F)
    assert rec["state"] == "rolled_back", rec
    assert rec["reason"].startswith("the change failed on ROCm 7.1.2 (Move AMD's packages"), rec
    assert (
        "rocm-hip-runtime (--configure): installed rocm-hip-runtime package post-installation"
        " script subprocess returned error exit status 1; it said: rocm-hip-runtime: registering"
        " the HIP runtime of ROCm 7.1.2 | rocm-hip-runtime: cannot register /opt/rocm-7.1.2/lib"
        " (rocmlab fixture: fails on purpose)"
    ) in rec["reason"], rec["reason"]
    assert "apt-get" not in rec["reason"]
    assert rec["reason"].endswith("where the smoke job passed again"), rec["reason"]
    assert rec["rocm"] == {"installed": "6.4.2", "configured": "7.1.2"}
    f = host(F)
    assert f.check_output("dpkg --audit") == ""
    assert amd_packages(F) == before["amd"]
    assert f.check_output(APT_FILES) == before["apt"]
    assert f.check_output(FREEZE) == before["venv"]
    assert f.check_output(f"sha256sum {KNOWN_GOOD}") == before["known_good"]
    assert f.file("/opt/rocm").linked_to == "/opt/rocm-6.4.2"
    assert not f.file("/opt/rocm-7.1.2").exists and not f.file(QUARANTINE).exists
    table = run.stdout[run.stdout.index("FLEET REPORT") :]
    assert re.search(rf"{F} +ROLLED_BACK .*rolled back: the change failed on ROCm 7\.1\.2", table)
