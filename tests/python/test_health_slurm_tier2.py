"""Tier 2 under Slurm (rocmlab.health.slurm_tier2): which job ends call for it, the cooldown,
the lock, the report read as hostile input, the drain and the resume, an operator's drain kept,
maintenance. The commands are a fake scontrol that keeps one node's and one job's state in the
shape Slurm 22.05's `scontrol show node -o` / `show job -o` print them (see test_health_slurm.py
for the node line's source); the slurm Molecule scenario runs the same code against a real
slurmctld."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_health_slurm import line as node_line

from rocmlab.health import drains
from rocmlab.health import slurm_tier2 as t2
from rocmlab.health.drains import Drain
from rocmlab.health.slurm import DRAIN, NONE, RESUME, Node
from rocmlab.health.table import AFTER, CHECKS

# The shape of Slurm 22.05's `scontrol show job -o ID` (one line; fields cut to those read and
# their neighbours).
JOB = (
    "JobId={id} JobName=wrap UserId=researcher(1000) GroupId=researcher(1000) MCS_label=N/A "
    "Priority=1 Nice=0 Account=(null) QOS=(null) JobState={state} Reason=NonZeroExitCode "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode={code} "
    "RunTime=00:00:01 TimeLimit=00:10:00 NodeList=gpu1 BatchHost=gpu1"
)
UID = os.getuid()
REPO = Path(__file__).resolve().parents[2]
TIER0 = [spec.name for spec in CHECKS if spec.tier == 0] + list(AFTER)
GPU = [spec.name for spec in CHECKS if spec.tier >= 1]


def doc(tier: int, failed: dict[str, str] | None = None) -> dict:
    """A report of ``tier`` as rocmlab health writes one (names, statuses, fixes), every check
    passing but ``failed`` (name -> fix)."""
    names = TIER0 + (GPU if tier == 2 else [])
    failed = failed or {}
    checks = [
        {"name": n, "status": "fail" if n in failed else "pass", "fix": failed.get(n)}
        for n in names
    ]
    return {"tier": tier, "verdict": "fail" if failed else "pass", "checks": checks}


class Slurm:
    """A fake scontrol (and tier 2) for one node and one job."""

    def __init__(self, tmp: Path, states=("FAILED",), code="1:0", node="IDLE", reason=""):
        self.tmp = tmp
        self.job_states = list(states)
        self.code = code
        self.node, self.reason = node, reason
        self.calls: list[list[str]] = []
        self.report: object = doc(2)  # the account's tier 2
        self.root_report: dict = doc(0)  # root's own tier 0 after it
        self.during_tier2 = None  # a callable: what an operator does while tier 2 runs

    def __call__(self, argv):
        argv = list(argv)
        self.calls.append(argv)
        ok = SimpleNamespace(returncode=0, stdout="", stderr="")
        if argv[:3] == ["scontrol", "show", "job"]:
            state = self.job_states.pop(0) if len(self.job_states) > 1 else self.job_states[0]
            ok.stdout = JOB.format(id=argv[-1], state=state, code=self.code) + "\n"
        elif argv[:3] == ["scontrol", "show", "node"]:
            ok.stdout = node_line(self.node, self.reason).replace("gpu1", argv[-1]) + "\n"
        elif argv[:2] == ["scontrol", "update"]:
            if "State=DRAIN" in argv:
                self.node = self.node.split("+")[0] + "+DRAIN"
                self.reason = argv[-1].removeprefix("Reason=")
            elif "State=RESUME" in argv:
                self.node, self.reason = self.node.split("+")[0], ""
        elif argv[:2] == ["scontrol", "reboot"]:
            pass
        elif argv[0] == "env":
            if self.during_tier2:
                self.during_tier2(self)
            report = Path(argv[argv.index("--json") + 1])
            if isinstance(self.report, (dict, list)):
                report.write_text(json.dumps(self.report))
            elif callable(self.report):
                self.report(report)
        elif argv[1:5] == ["-I", "-m", "rocmlab", "health"]:  # root's tier 0
            assert argv[argv.index("--tier") + 1] == "0"
            Path(argv[argv.index("--json") + 1]).write_text(json.dumps(self.root_report))
            ok.returncode = 1 if self.root_report["verdict"] == "fail" else 0
        else:
            raise AssertionError(argv)
        return ok

    def updates(self):
        return [c for c in self.calls if c[1] in ("update", "reboot")]


@pytest.fixture
def setup(tmp_path):
    state, reports = tmp_path / "state", tmp_path / "tier2"
    state.mkdir()
    reports.mkdir()
    s = t2.Settings(
        node="gpu1", state_dir=state, report_dir=reports, account="researcher",
        account_uid=UID, rocmlab="/opt/rocmlab/venvs/pytorch/bin/rocmlab",
        tier2_args=("--expect-gpus", "4"), cooldown=3600, job_wait=30, idle_wait=60,
    )  # fmt: skip
    clock = {"t": 1_000_000.0}
    said: list[str] = []

    def make(fake):
        return t2.Io(
            run=fake,
            now=lambda: clock["t"],
            sleep=lambda sec: clock.__setitem__("t", clock["t"] + sec),
            say=said.append,
            boot_id=lambda: clock.get("boot", "boot-1"),
        )

    return SimpleNamespace(s=s, clock=clock, said=said, io=make, tmp=tmp_path)


@pytest.mark.parametrize(
    ("state", "code", "go"),
    [
        ("FAILED", "1:0", True),
        ("FAILED", "0:11", True),  # the script died of SIGSEGV: Slurm says FAILED
        ("COMPLETED", "0:0", False),
        ("CANCELLED", "0:15", False),
        ("TIMEOUT", "0:15", False),
        ("PREEMPTED", "0:15", False),
        ("NODE_FAIL", "0:0", False),
        ("OUT_OF_MEMORY", "0:125", False),
        ("BOOT_FAIL", "0:0", False),
        ("DEADLINE", "0:0", False),
    ],
)
def test_only_a_failed_job_calls_for_tier_2(state, code, go):
    job = t2.parse_job(JOB.format(id="42", state=state, code=code), "42")
    assert (job.state, f"{job.exit_code}:{job.signal}") == (state, code)
    assert t2.triggers(job)[0] is go


@pytest.mark.parametrize(
    "text",
    [
        JOB.format(id="43", state="FAILED", code="1:0"),  # another job
        JOB.format(id="42", state="EXPLODED", code="1:0"),  # not Slurm's state
        JOB.format(id="42", state="FAILED", code="one"),
        "",
        "JobId=42 " + "x" * (70 * 1024) + " JobState=FAILED ExitCode=1:0",  # past the bound
    ],
)
def test_scontrol_show_job_output_is_read_as_hostile_input(text):
    with pytest.raises(t2.Tier2Error):
        t2.parse_job(text, "42")


FORGED = (
    " UserId=researcher(1000) GroupId=researcher(1000) MCS_label=N/A Priority=1 Nice=0 "
    "Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) "
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=1:0"
)


def test_a_job_name_holding_jobstate_failed_is_not_the_jobs_state():
    # sbatch -J accepts spaces and "=": the name comes before Slurm's own JobState.
    shown = JOB.format(id="42", state="COMPLETED", code="0:0")
    named = shown.replace("JobName=wrap", "JobName=x JobState=FAILED ExitCode=1:0 y")
    job = t2.parse_job(named, "42")
    assert (job.state, job.exit_code) == ("COMPLETED", 0)
    assert t2.triggers(job)[0] is False


@pytest.mark.parametrize(
    "where",
    [
        lambda s: s.replace("JobName=wrap", "JobName=wrap" + FORGED),  # the whole run in the name
        lambda s: s + " Comment=x" + FORGED,  # or in a field after Slurm's
        lambda s: s.replace("JobName=wrap", "JobName=wrap\nJobId=42 JobName=y" + FORGED),
    ],
)
def test_a_job_whose_text_repeats_slurms_fields_is_refused(where):
    shown = JOB.format(id="42", state="COMPLETED", code="0:0")
    with pytest.raises(t2.Tier2Error, match="a job name or comment that holds them is refused"):
        t2.parse_job(where(shown), "42")


@pytest.mark.parametrize("bad", ["0", "-1", "42;reboot", "4 2", "1234567890123", ""])
def test_a_job_id_that_is_not_one_is_refused(bad):
    with pytest.raises(t2.Tier2Error, match="job id"):
        t2.job_id(bad)


def test_cooldown():
    assert t2.cooldown_left(None, 100.0, 3600) == 0
    assert t2.cooldown_left(100.0, 700.0, 3600) == 3000
    assert t2.cooldown_left(100.0, 3700.0, 3600) == 0
    assert t2.cooldown_left(5000.0, 100.0, 3600) == 0  # clock set back: not stuck


def test_the_drain_reason_names_no_check_so_only_tier_2_clears_it():
    reason = t2.job_reason(t2.Job("123456789012", "FAILED", 255, 0))
    assert reason == "rocmlab: job_failed: job 123456789012 exit 255:0, tier 2 runs"
    assert len(reason) <= 80
    from rocmlab.health.slurm import held_back

    for drained in (reason, t2.MAINTENANCE_REASON):
        record = drains.made("gpu1", drained, None, 2, t2.tiers(), "boot-1")
        assert record.needs == 2
        assert "needs tier 2" in held_back(doc(0), record)
        assert held_back(t2.merge(doc(0), doc(2)), record) == ""


@pytest.mark.parametrize(
    ("state", "reason", "kind"),
    [
        ("IDLE", "", DRAIN),
        ("MIXED", "", DRAIN),
        ("IDLE+DRAIN", "fan swap, ticket 4711", NONE),
        ("DOWN", "Not responding", NONE),
        ("IDLE+FAIL", "bad", NONE),
        ("IDLE+DRAIN", "rocmlab: gpu_count: reseat", NONE),
    ],
)
def test_drain_before_tier_2_only_a_node_in_service(state, reason, kind):
    base, *flags = state.split("+")
    node = Node("gpu1", base, frozenset(flags), reason)
    assert t2.drain_decision(node, "rocmlab: job_failed: x").kind == kind


def test_a_failed_job_drains_runs_tier_2_as_the_account_and_a_pass_resumes(setup):
    fake = Slurm(setup.tmp, states=("COMPLETING", "COMPLETING", "FAILED"))
    assert t2.after_job("42", setup.s, setup.io(fake)) == RESUME
    updates = fake.updates()
    assert updates[0][:4] == ["scontrol", "update", "NodeName=gpu1", "State=DRAIN"]
    assert updates[0][4] == "Reason=rocmlab: job_failed: job 42 exit 1:0, tier 2 runs"
    assert updates[1] == ["scontrol", "update", "NodeName=gpu1", "State=RESUME"]
    tier2 = next(c for c in fake.calls if c[0] == "env")
    assert tier2[:7] == ["env", "-i", f"PATH={t2.TIER2_PATH}", "LANG=C.UTF-8", "runuser", "-u",
                         "researcher"]  # fmt: skip
    assert tier2[tier2.index("--tier") + 1] == "2" and tier2[-2:] == ["--expect-gpus", "4"]
    assert (fake.node, fake.reason) == ("IDLE", "")
    saved = json.loads((setup.s.state_dir / t2.STATE_FILE).read_text())
    assert saved["last_tier2"] == setup.clock["t"]


def test_a_successful_or_cancelled_job_does_nothing(setup):
    for state, code in (("COMPLETED", "0:0"), ("CANCELLED", "0:15")):
        fake = Slurm(setup.tmp, states=(state,), code=code)
        assert t2.after_job("42", setup.s, setup.io(fake)) == "nothing"
        assert fake.updates() == [] and not any(c[0] == "env" for c in fake.calls)


def test_a_job_that_never_ends_is_given_up_on(setup):
    fake = Slurm(setup.tmp, states=("COMPLETING",))
    with pytest.raises(t2.Tier2Error, match="still COMPLETING after 30 s"):
        t2.after_job("42", setup.s, setup.io(fake))
    assert fake.updates() == []


def test_a_failing_tier_2_drains_with_its_check(setup):
    fake = Slurm(setup.tmp)
    fake.report = doc(2, {"smoke": "read docs/smoke-job.md"})
    assert t2.after_job("42", setup.s, setup.io(fake)) == DRAIN
    assert fake.reason == "rocmlab: smoke: read docs/smoke-job.md"
    kept, _ = drains.load(setup.s.state_dir, "gpu1")  # recorded: only tier 2 with smoke clears it
    assert kept is not None and kept.checks == ("smoke",) and kept.needs == 2


def test_cooldown_skips_a_second_failed_job(setup):
    fake = Slurm(setup.tmp)
    io = setup.io(fake)
    assert t2.after_job("42", setup.s, io) == RESUME
    setup.clock["t"] += 600
    second = Slurm(setup.tmp)
    assert t2.after_job("43", setup.s, setup.io(second)) == "cooldown"
    assert second.updates() == []
    assert any("next in 3000 s" in x for x in setup.said)
    setup.clock["t"] += 3000
    assert t2.after_job("44", setup.s, setup.io(Slurm(setup.tmp))) == RESUME


def test_an_operators_drain_made_while_tier_2_runs_is_kept(setup):
    fake = Slurm(setup.tmp)

    def operator(f):
        f.node, f.reason = "IDLE+DRAIN", "fan swap, ticket 4711"

    fake.during_tier2 = operator
    assert t2.after_job("42", setup.s, setup.io(fake)) == NONE
    assert (fake.node, fake.reason) == ("IDLE+DRAIN", "fan swap, ticket 4711")
    assert [c for c in fake.updates() if "State=RESUME" in c] == []


def test_an_operators_drain_before_the_job_ended_is_kept_and_tier_2_still_runs(setup):
    fake = Slurm(setup.tmp, node="IDLE+DRAIN", reason="fan swap, ticket 4711")
    assert t2.after_job("42", setup.s, setup.io(fake)) == NONE
    assert fake.updates() == [] and any(c[0] == "env" for c in fake.calls)
    assert fake.reason == "fan swap, ticket 4711"


def test_tier_2_waits_until_the_drained_node_runs_no_job(setup):
    fake = Slurm(setup.tmp, node="MIXED")
    states = iter(["MIXED+DRAIN", "MIXED+DRAIN", "IDLE+DRAIN"])
    real = fake.__call__

    def run(argv):
        if argv[:3] == ["scontrol", "show", "node"] and fake.node.endswith("DRAIN"):
            fake.node = next(states, fake.node)
        return real(argv)

    assert t2.after_job("42", setup.s, setup.io(run)) == RESUME


def test_a_node_still_busy_after_the_wait_stays_drained(setup):
    fake = Slurm(setup.tmp, node="ALLOCATED")
    with pytest.raises(t2.Tier2Error, match="still runs jobs after 60 s") as raised:
        t2.after_job("42", setup.s, setup.io(fake))
    assert fake.reason.startswith("rocmlab: job_failed:")
    assert not any(c[0] == "env" for c in fake.calls)
    # The command it names is one the maintenance helper the role installs accepts.
    helper = REPO / "roles" / "slurm_health" / "templates" / "rocmlab-slurm-maintenance.sh.j2"
    assert "run rocmlab-slurm-maintenance --after later" in str(raised.value)
    assert "\n--after) exec" in helper.read_text()


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: p.symlink_to("/etc/passwd"), "symbolic link"),
        (lambda p: p.write_bytes(b"{" + b" " * t2.REPORT_LIMIT + b"}"), "over"),
        (lambda p: p.write_text("not json"), "not JSON"),
        (lambda p: p.write_text('{"tier": 0, "verdict": "pass", "checks": []}'), "tier-2"),
        (lambda p: p.write_text('{"tier": 2, "verdict": "great", "checks": []}'), "verdict"),
        (lambda p: p.write_text('{"tier": 2, "verdict": "pass", "checks": 3}'), "no checks"),
        (lambda p: p.write_text("[1]"), "tier-2"),
        (lambda p: os.mkfifo(p), "FIFO"),
        (lambda p: None, "wrote no report"),
    ],
)
def test_a_report_that_is_not_tier_2s_is_refused_and_the_node_stays_drained(setup, make, why):
    fake = Slurm(setup.tmp)
    fake.report = make
    with pytest.raises(t2.Tier2Error, match=why):
        t2.after_job("42", setup.s, setup.io(fake))
    assert fake.reason.startswith("rocmlab: job_failed:")
    assert [c for c in fake.updates() if "State=RESUME" in c] == []


def test_a_directory_where_the_report_goes_is_refused(setup):
    (setup.s.report_dir / t2.REPORT).mkdir()
    fake = Slurm(setup.tmp)
    with pytest.raises(t2.Tier2Error, match="cannot remove the old report"):
        t2.after_job("42", setup.s, setup.io(fake))
    assert not any(c[0] == "env" for c in fake.calls)
    assert fake.reason.startswith("rocmlab: job_failed:")


def test_main_says_why_when_the_state_directory_is_missing(tmp_path, capsys):
    account = __import__("pwd").getpwuid(UID if UID else 65534).pw_name
    rc = t2.main(["after-job", "--job", "1", "--state-dir", str(tmp_path / "none"),
                  "--report-dir", str(tmp_path), "--account", account,
                  "--rocmlab", "rocmlab"])  # fmt: skip
    assert rc == 1
    assert "stopped: " in capsys.readouterr().out


def test_a_report_of_another_account_is_refused(setup):
    report = setup.s.report_dir / t2.REPORT
    report.write_text(json.dumps(doc(2)))
    with pytest.raises(t2.Tier2Error, match=f"not the smoke account's {UID + 1}"):
        t2.read_report(report, UID + 1)
    assert t2.read_report(report, UID)["verdict"] == "pass"


def test_a_report_of_another_account_is_never_opened(setup, monkeypatch):
    report = setup.s.report_dir / t2.REPORT
    report.write_text(json.dumps(doc(2)))
    opened = []
    real_open = os.open

    def watch(path, *args, **kwargs):  # records the opens; opens as before
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(t2.os, "open", watch)
    with pytest.raises(t2.Tier2Error, match="not the smoke account's"):
        t2.read_report(report, UID + 1)
    assert str(report) not in opened
    t2.read_report(report, UID)
    assert str(report) in opened  # the spy sees the opens it is meant to


def test_an_old_report_does_not_stand_for_this_run(setup):
    (setup.s.report_dir / t2.REPORT).write_text(json.dumps(doc(2)))
    fake = Slurm(setup.tmp)
    fake.report = lambda p: None  # tier 2 died before writing
    with pytest.raises(t2.Tier2Error, match="wrote no report"):
        t2.after_job("42", setup.s, setup.io(fake))


def test_the_lock_lets_one_run_at_a_time(tmp_path):
    first = t2.lock(tmp_path / "tier2.lock")
    assert first is not None
    assert t2.lock(tmp_path / "tier2.lock") is None
    os.close(first)
    again = t2.lock(tmp_path / "tier2.lock")
    assert again is not None
    os.close(again)
    (tmp_path / "link.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        t2.lock(tmp_path / "link.lock")
    assert not (tmp_path / "elsewhere").exists()


def test_a_corrupt_state_file_counts_as_none(setup):
    path = setup.s.state_dir / t2.STATE_FILE
    for text in ("not json", "[1, 2]", '{"last_tier2": "soon"}'):
        path.write_text(text)
        fake = Slurm(setup.tmp)
        assert t2.after_job("42", setup.s, setup.io(fake)) == RESUME
        setup.clock["t"] += 7200


def test_maintenance_drains_asks_a_plain_reboot_and_tier_2_after_the_boot_resumes(setup):
    fake = Slurm(setup.tmp)
    io = setup.io(fake)
    assert t2.maintenance(setup.s, io) == "reboot"
    assert fake.updates() == [
        ["scontrol", "update", "NodeName=gpu1", "State=DRAIN", f"Reason={t2.MAINTENANCE_REASON}"],
        ["scontrol", "reboot", "gpu1"],  # no ASAP, no nextstate: the drain outlives the boot
    ]
    # The health check runs after-boot every interval: before the reboot, nothing.
    assert t2.after_boot(setup.s, io) == "waiting"
    assert not any(c[0] == "env" for c in fake.calls)
    setup.clock["boot"] = "boot-2"
    assert t2.after_boot(setup.s, io) == RESUME
    assert (fake.node, fake.reason) == ("IDLE", "")
    assert t2.after_boot(setup.s, io) == "nothing"  # done once


def test_maintenance_without_reboot_and_a_failing_tier_2_keeps_it_out(setup):
    fake = Slurm(setup.tmp)
    fake.report = doc(2, {"gpu_matmul": "reboot"})
    io = setup.io(fake)
    assert t2.maintenance(setup.s, io, reboot=False) == "drained"
    assert not any(c[1] == "reboot" for c in fake.calls)
    assert t2.after_boot(setup.s, io, now=True) == DRAIN
    assert fake.reason == "rocmlab: gpu_matmul: reboot"


def test_maintenance_refuses_a_node_an_operator_drained(setup):
    fake = Slurm(setup.tmp, node="IDLE+DRAIN", reason="fan swap")
    with pytest.raises(t2.Tier2Error, match="drained by someone else"):
        t2.maintenance(setup.s, setup.io(fake))
    assert fake.updates() == []


def test_main_refuses_root_as_the_account(tmp_path, capsys):
    rc = t2.main(["after-job", "--job", "1", "--state-dir", str(tmp_path), "--report-dir",
                  str(tmp_path), "--account", "root", "--rocmlab", "rocmlab"])  # fmt: skip
    assert rc == 1
    assert re.search(r"tier 2 never runs as root", capsys.readouterr().out)


def test_a_run_while_another_holds_the_lock_is_skipped(tmp_path, capsys):
    account = __import__("pwd").getpwuid(UID if UID else 65534).pw_name
    held = t2.lock(tmp_path / "tier2.lock")
    base = ["--state-dir", str(tmp_path), "--report-dir", str(tmp_path), "--account", account,
            "--rocmlab", "rocmlab", "--scontrol", "/nonexistent/scontrol"]  # fmt: skip
    try:
        assert t2.main(["after-job", "--job", "7", *base]) == 0  # the Epilog's: quiet
        assert t2.main(["maintenance", *base]) == 1  # an operator's: told
        assert t2.main(["after-boot", "--now", *base]) == 1
    finally:
        os.close(held)
    out = capsys.readouterr().out
    assert out.count("another tier-2 run holds the lock: skipped") == 3, out


# ---------------------------------------------------------------- root's verdicts are root's

GPU_COUNT_REASON = "rocmlab: gpu_count: the kernel log"


def root_drained(setup, fake, reason: str, check: str | None, tier: int = 0) -> Drain:
    """The node drained by root's health check (tier 0) for ``check``, as the gate records it."""
    fake.node, fake.reason = "IDLE+DRAIN", reason
    kept = drains.made("gpu1", reason, check, tier, t2.tiers(), "boot-1")
    drains.save(setup.s.state_dir, kept)
    return kept


def test_the_accounts_empty_pass_is_refused_and_roots_drain_stays(setup):
    fake = Slurm(setup.tmp)
    root_drained(setup, fake, GPU_COUNT_REASON, "gpu_count")
    fake.report = {"tier": 2, "verdict": "pass", "checks": []}
    with pytest.raises(t2.Tier2Error, match="not a whole tier-2 report: no gpu_matmul, smoke"):
        t2.after_boot(setup.s, setup.io(fake), now=True)
    assert (fake.node, fake.reason) == ("IDLE+DRAIN", GPU_COUNT_REASON)


def test_roots_failure_stands_over_the_accounts_pass(setup):
    fake = Slurm(setup.tmp)
    root_drained(setup, fake, GPU_COUNT_REASON, "gpu_count")
    fake.root_report = doc(0, {"gpu_count": "the kernel log; reseat the card"})
    fake.report = doc(2)  # the account says every check passed, gpu_count too
    assert t2.after_boot(setup.s, setup.io(fake), now=True) == NONE
    assert (fake.node, fake.reason) == ("IDLE+DRAIN", GPU_COUNT_REASON)
    assert any("root's tier 0 verdict: fail; together: fail" in x for x in setup.said)
    # The GPU back: root's own tier 0 passes gpu_count, and the node comes back.
    fake.root_report = doc(0)
    assert t2.after_boot(setup.s, setup.io(fake), now=True) == RESUME
    assert (fake.node, fake.reason) == ("IDLE", "")
    assert drains.load(setup.s.state_dir, "gpu1") == (None, "")


def test_a_ras_drain_waits_for_roots_own_counters_after_tier_2(setup):
    fake = Slurm(setup.tmp)
    reason = "rocmlab: ras_errors: uncorrectable errors: drain the node and reboot it"
    assert root_drained(setup, fake, reason, "ras_errors").needs == 2
    fake.root_report = doc(0, {"ras_errors": "drain and reboot"})  # rose during the GPU work
    fake.report = doc(2)
    assert t2.after_boot(setup.s, setup.io(fake), now=True) == DRAIN  # the new reason
    assert fake.reason.startswith("rocmlab: ras_errors:") and fake.node == "IDLE+DRAIN"


def test_the_account_can_add_a_failure_root_did_not_see(setup):
    fake = Slurm(setup.tmp)
    fake.report = doc(2, {"disk_space": "apt-get clean"})  # root's tier 0 passed it
    assert t2.after_job("42", setup.s, setup.io(fake)) == DRAIN
    assert fake.reason == "rocmlab: disk_space: apt-get clean"
    merged = t2.merge(doc(0), doc(2, {"disk_space": "x"}))
    assert merged["verdict"] == "fail" and merged["tier"] == 2


def test_the_verdict_is_roots_count_not_the_accounts_word(setup):
    lying = doc(2, {"smoke": "docs/smoke-job.md"})
    lying["verdict"] = "pass"
    assert t2.merge(doc(0), lying)["verdict"] == "fail"


def test_root_runs_tier_0_itself_isolated_with_the_health_checks_arguments(setup):
    setup.s.tier0_args = ("--expect-gpus", "4")
    fake = Slurm(setup.tmp)
    t2.after_job("42", setup.s, setup.io(fake))
    root = next(c for c in fake.calls if c[1:3] == ["-I", "-m"])
    assert root[0] == setup.s.python and root[3:7] == ["rocmlab", "health", "--tier", "0"]
    assert root[-2:] == ["--expect-gpus", "4"]
    assert str(setup.s.state_dir / t2.ROOT_REPORT) in root
    # After the account's tier 2, so that its counters cover the GPU work.
    assert fake.calls.index(root) > next(i for i, c in enumerate(fake.calls) if c[0] == "env")


# ---------------------------------------------------------------- rocmlab's drains and the way back


def test_an_operators_rocmlab_prefixed_drain_survives_tier_2(setup):
    fake = Slurm(setup.tmp, node="IDLE+DRAIN", reason="rocmlab:ops firmware update")
    assert t2.after_job("42", setup.s, setup.io(fake)) == NONE
    assert any(c[0] == "env" for c in fake.calls)  # tier 2 ran, and passed
    assert (fake.node, fake.reason) == ("IDLE+DRAIN", "rocmlab:ops firmware update")
    with pytest.raises(t2.Tier2Error, match="drained by someone else"):
        t2.maintenance(setup.s, setup.io(fake))
    assert t2.after_boot(setup.s, setup.io(fake), now=True) == "nothing"
    assert fake.reason == "rocmlab:ops firmware update"


def test_a_kernel_log_drain_comes_back_by_tier_2_after_a_reboot(setup):
    fake = Slurm(setup.tmp)
    reason = "rocmlab: kernel_log: reboot"
    assert root_drained(setup, fake, reason, "kernel_log").needs == 2
    io = setup.io(fake)
    assert t2.after_boot(setup.s, io) == "waiting"  # the wrapper's run: no reboot yet
    assert not any(c[0] == "env" for c in fake.calls)
    setup.clock["boot"] = "boot-2"
    assert t2.after_boot(setup.s, io) == RESUME
    assert (fake.node, fake.reason) == ("IDLE", "")
    assert t2.after_boot(setup.s, io) == "nothing"


def test_a_kernel_log_drain_comes_back_by_the_maintenance_helpers_after(setup):
    fake = Slurm(setup.tmp)
    root_drained(setup, fake, "rocmlab: kernel_log: reboot", "kernel_log")
    assert t2.after_boot(setup.s, setup.io(fake), now=True) == RESUME  # --after, no reboot
    assert (fake.node, fake.reason) == ("IDLE", "")


def test_a_drain_an_operator_resumed_is_forgotten_by_after_boot(setup):
    fake = Slurm(setup.tmp)
    root_drained(setup, fake, "rocmlab: kernel_log: reboot", "kernel_log")
    fake.node, fake.reason = "IDLE", ""
    setup.clock["boot"] = "boot-2"
    assert t2.after_boot(setup.s, setup.io(fake)) == "nothing"
    assert not any(c[0] == "env" for c in fake.calls)
    assert drains.load(setup.s.state_dir, "gpu1") == (None, "")


def test_a_maintenance_an_older_version_noted_still_comes_back(setup):
    fake = Slurm(setup.tmp, node="IDLE+DRAIN", reason=t2.MAINTENANCE_REASON)
    state = setup.s.state_dir / t2.STATE_FILE
    state.write_text(json.dumps({"maintenance_boot": "boot-0", "last_tier2": 5.0}))
    assert t2.after_boot(setup.s, setup.io(fake)) == RESUME
    assert "maintenance_boot" not in json.loads(state.read_text())
