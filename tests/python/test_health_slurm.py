"""The Slurm health gate (rocmlab.health.slurm, ``rocmlab health --slurm-gate``): what a verdict
does to a node in each state Slurm can show, the reason it writes, and scontrol's output read as
hostile input. The slurm Molecule scenario runs the same gate against a real slurmctld."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
from health_testutil import health, machine

from rocmlab.doctor.context import CommandResult
from rocmlab.health import drains, slurm
from rocmlab.health.drains import Drain
from rocmlab.health.slurm import DRAIN, NONE, RESUME, Node, SlurmGateError
from rocmlab.health.table import AFTER, CHECKS, resume_tiers

TIERS = resume_tiers()

# The shape of Slurm 22.05's `scontrol show node -o NAME` (slurm_sprint_node_table: one line,
# "Reason=TEXT [USER@TIME]" near its end), as Debian 12's slurmctld printed it for a drained
# node in the slurm scenario; the OS field carries the node's own uname text.
LINE = (
    "NodeName=gpu1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.51 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:2 NodeAddr=gpu1 NodeHostName=gpu1 "
    "Version=22.05.8 OS=Linux 6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 "
    "RealMemory=1000 AllocMem=0 FreeMem=19000 Sockets=2 Boards=1 State={state} "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu "
    "BootTime=2026-12-04T08:00:00 SlurmdStartTime=2026-12-04T20:00:00 "
    "LastBusyTime=2026-12-04T20:00:00 CfgTRES=cpu=2,mem=1000M,billing=2,gres/gpu=2 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s{reason}"
)


def line(state: str, reason: str = "") -> str:
    tail = f" Reason={reason} [root@2026-12-04T20:01:02]" if reason else ""
    return LINE.format(state=state, reason=tail) + "\n"


def report(verdict: str, tier: int = 0, failed: tuple[str, str] | None = None, **status) -> dict:
    """A report of ``tier`` with every check of the table up to that tier (and the run's own),
    passing unless ``failed`` (then it and disk_space fail) or ``status`` says otherwise."""
    names = [spec.name for spec in CHECKS if spec.tier <= tier] + list(AFTER)
    fails = {failed[0]: failed[1], "disk_space": "apt-get clean"} if failed else {}
    checks = [
        {"name": n, "status": status.get(n, "fail" if n in fails else "pass"), "fix": fails.get(n)}
        for n in names
    ]
    return {"verdict": verdict, "tier": tier, "checks": checks}


def recorded(reason: str, tier: int = 0) -> Drain:
    """Root's record of rocmlab's drain of gpu1 with ``reason`` (its check from the reason, as
    the gate records the failed check), made by a report of ``tier``."""
    named = re.match(r"rocmlab: ([a-z][a-z0-9_]*):", reason)
    check = named[1] if named and named[1] in [*TIERS, *AFTER] else None
    return drains.made("gpu1", reason, check, tier, TIERS, "boot-1")


GPU_COUNT = ("gpu_count", "the kernel log; reseat the card, check its power; then reboot")
REASON = "rocmlab: gpu_count: the kernel log"


# ---------------------------------------------------------------- scontrol's output


def test_a_drained_node_is_read_with_its_reason() -> None:
    node = slurm.parse_node(line("IDLE+DRAIN", "rocmlab: gpu_count: reseat it"), "gpu1")
    assert node == Node("gpu1", "IDLE", frozenset({"DRAIN"}), "rocmlab: gpu_count: reseat it")
    assert node.drained and node.state == "IDLE+DRAIN"
    # rocmlab's only with root's record of that drain: the words prove nothing.
    assert not slurm.ours(node, None)
    assert slurm.ours(node, recorded("rocmlab: gpu_count: reseat it"))
    assert not slurm.ours(node, recorded("rocmlab: gpu_count: reseat"))


def test_an_idle_node_has_no_reason_and_flags_are_kept() -> None:
    node = slurm.parse_node(line("MIXED+RESERVED"), "gpu1")
    assert (node.base, node.flags, node.reason) == ("MIXED", frozenset({"RESERVED"}), "")
    assert slurm.parse_node(line("DOWN*+DRAIN", "x"), "gpu1").base == "DOWN"


def test_a_state_word_slurm_does_not_have_is_refused() -> None:
    with pytest.raises(SlurmGateError, match="is not a state this gate knows"):
        slurm.parse_node(line("IDLE+$(reboot)"), "gpu1")


def test_another_nodes_line_or_nothing_is_refused() -> None:
    with pytest.raises(SlurmGateError, match="did not describe node gpu1"):
        slurm.parse_node(line("IDLE").replace("NodeName=gpu1", "NodeName=gpu10"), "gpu1")
    with pytest.raises(SlurmGateError, match="printed 'nothing'"):
        slurm.parse_node("", "gpu1")


def test_only_the_first_64_kib_are_read() -> None:
    huge = "x" * (slurm.OUTPUT_LIMIT + 10) + "\n" + line("IDLE")
    with pytest.raises(SlurmGateError, match="did not describe"):
        slurm.parse_node(huge, "gpu1")


def test_a_reason_with_fields_inside_is_read_up_to_slurms_marker() -> None:
    node = slurm.parse_node(line("IDLE+DRAIN", "fan State=IDLE broken"), "gpu1")
    assert node.reason == "fan State=IDLE broken" and node.base == "IDLE"


@pytest.mark.parametrize("name", ["", "-x", "a b", "gpu1;reboot", "g" * 64, "gpu\n1"])
def test_node_names_outside_slurms_are_refused(name: str) -> None:
    with pytest.raises(SlurmGateError, match="is not accepted"):
        slurm.node_name(name)


# ---------------------------------------------------------------- the reason


def test_the_reason_names_the_first_failed_check_and_the_start_of_its_fix() -> None:
    assert slurm.reason_for(report("fail", failed=GPU_COUNT)) == REASON


def test_a_long_fix_is_cut_to_the_bound_and_characters_are_cleaned() -> None:
    fix = "`user_groups_udev_rules: true` (role user_groups)=\x1b[31m " + "x" * 200
    reason = slurm.reason_for(report("fail", failed=("node_group", fix)))
    assert len(reason) == slurm.REASON_MAX and reason.endswith("...")
    assert reason.startswith("rocmlab: node_group: user_groups_udev_rules: true (role user_groups)")
    assert not re.search(r"[`=\x00-\x1f\"]", reason)


def test_a_check_without_fix_or_with_a_strange_name_still_gives_a_reason() -> None:
    doc = {"verdict": "fail", "tier": 0, "checks": [{"name": "Bad Name!", "status": "fail"}]}
    assert slurm.reason_for(doc) == "rocmlab: health: see the host's health report"


# ---------------------------------------------------------------- the decisions

FAIL, PASS, WARN = report("fail", failed=GPU_COUNT), report("pass"), report("warn")
PASS2 = report("pass", tier=2)
OPERATOR = "replacing fan, ticket 4711"
OURS = object()  # root's record of the drain with the node's reason


@pytest.mark.parametrize(
    ("doc", "state", "reason", "record", "kind"),
    [
        (FAIL, "IDLE", "", None, DRAIN),
        (FAIL, "ALLOCATED", "", None, DRAIN),  # draining: the running job finishes
        (FAIL, "MIXED+RESERVED", "", None, DRAIN),  # a reservation keeps no broken node in use
        (FAIL, "IDLE+DRAIN", REASON, OURS, NONE),  # already right
        (FAIL, "IDLE+DRAIN", "rocmlab: disk_space: apt-get clean", OURS, DRAIN),  # updated
        (FAIL, "IDLE+DRAIN", "rocmlab: disk_space: apt-get clean", None, NONE),  # no record
        (FAIL, "IDLE+DRAIN", OPERATOR, None, NONE),  # the operator's drain stays as it is
        (FAIL, "IDLE+DRAIN", "rocmlab:ops firmware update", None, NONE),  # an operator's too
        (FAIL, "DOWN", "Not responding", None, NONE),
        (FAIL, "IDLE+FAIL", OPERATOR, None, NONE),
        (PASS, "IDLE+DRAIN", REASON, OURS, RESUME),
        (WARN, "ALLOCATED+DRAIN", REASON, OURS, RESUME),  # a warning does not keep it out
        (PASS, "IDLE+DRAIN", REASON, None, NONE),  # rocmlab's words, no record: not resumed
        (PASS, "IDLE+DRAIN", "rocmlab:ops firmware update", None, NONE),
        (PASS2, "IDLE+DRAIN", "rocmlab:ops firmware update", None, NONE),
        (PASS, "IDLE+DRAIN", OPERATOR, None, NONE),
        (PASS, "IDLE+DRAIN", "rocmlab: health: see the report", OURS, NONE),  # no check: tier 2
        (PASS, "DOWN", "Not responding", None, NONE),
        (PASS, "IDLE+RESERVED", "", None, NONE),
        (PASS, "IDLE+MAINTENANCE+RESERVED", "", None, NONE),
        (PASS, "IDLE", "", None, NONE),
        (PASS, "IDLE+DRAIN", "rocmlab: smoke: docs/smoke-job.md", OURS, NONE),  # tier 2 drained
        (PASS2, "IDLE+DRAIN", "rocmlab: smoke: docs/smoke-job.md", OURS, RESUME),
        (PASS, "IDLE+DRAIN", "rocmlab: ras_errors: drain and reboot", OURS, NONE),  # rose
        (PASS2, "IDLE+DRAIN", "rocmlab: ras_errors: drain and reboot", OURS, RESUME),
        (PASS2, "IDLE+DRAIN", "rocmlab: maintenance: reboot", OURS, RESUME),
        # Slurm appends to the reason at a reboot (scontrol(1)): still the recorded drain.
        (PASS, "IDLE+DRAIN", f"{REASON} : reboot issued", OURS, RESUME),
    ],
)
def test_what_a_verdict_does_to_a_node(doc, state, reason, record, kind) -> None:
    node = slurm.parse_node(line(state, reason), "gpu1")
    if record is OURS:
        record = recorded(reason.removesuffix(" : reboot issued"))
    action = slurm.decide(doc, node, TIERS, record)
    assert action.kind == kind, action.why
    if kind == DRAIN:
        assert action.reason == REASON and action.check == "gpu_count"


def test_a_drain_resumes_only_on_a_report_of_its_tier_holding_its_checks_passing() -> None:
    node = slurm.parse_node(line("IDLE+DRAIN", REASON), "gpu1")
    by_tier_2 = recorded(REASON, tier=2)  # the tier-2 runner drained it for gpu_count
    assert by_tier_2.needs == 2
    assert slurm.decide(PASS, node, TIERS, by_tier_2).kind == NONE  # tier 0: not its tier
    assert slurm.decide(PASS2, node, TIERS, by_tier_2).kind == RESUME
    # A report without the check, or with it not passing, resumes nothing, whatever its verdict.
    empty = {"tier": 2, "verdict": "pass", "checks": []}
    for doc in (empty, report("pass", tier=2, gpu_count="skip")):
        action = slurm.decide(doc, node, TIERS, by_tier_2)
        assert action.kind == NONE and "gpu_count must pass again" in action.why, action.why
    # Drained again for another check while drained: both must pass.
    both = drains.made("gpu1", "rocmlab: disk_space: x", "disk_space", 0, TIERS, "b", by_tier_2)
    assert both.checks == ("gpu_count", "disk_space") and both.needs == 2
    again = slurm.parse_node(line("IDLE+DRAIN", "rocmlab: disk_space: x"), "gpu1")
    assert slurm.decide(report("pass", tier=2, gpu_count="error"), again, TIERS, both).kind == NONE
    assert slurm.decide(PASS2, again, TIERS, both).kind == RESUME


@pytest.mark.parametrize("doc", [{}, {"verdict": "fail"}, {"verdict": "ok", "tier": 0}])
def test_a_document_that_is_no_health_report_changes_nothing(doc: dict) -> None:
    with pytest.raises(SlurmGateError, match="not a report rocmlab health writes"):
        slurm.decide(doc, slurm.parse_node(line("IDLE"), "gpu1"), TIERS)


def test_the_commands_of_each_action() -> None:
    drain = slurm.Action(DRAIN, "", REASON)
    assert slurm.command(drain, "gpu1") == [
        "scontrol", "update", "NodeName=gpu1", "State=DRAIN", f"Reason={REASON}"
    ]  # fmt: skip
    assert slurm.command(slurm.Action(RESUME, ""), "gpu1")[3] == "State=RESUME"
    assert slurm.command(slurm.Action(NONE, ""), "gpu1") is None


# ---------------------------------------------------------------- gate(): the commands run


class Scontrol:
    """Slurm as the gate sees it: what `show node` prints and what `update` answers."""

    def __init__(self, shown: CommandResult | None, update_rc: int = 0) -> None:
        self.shown, self.update_rc, self.calls = shown, update_rc, []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[1] == "show":
            return self.shown
        return CommandResult(self.update_rc, "", "slurm_update error: Invalid node name")


def test_gate_drains_and_runs_nothing_else() -> None:
    run = Scontrol(CommandResult(0, line("IDLE")))
    assert slurm.gate(FAIL, "gpu1", run, TIERS).kind == DRAIN
    assert run.calls == [
        ["scontrol", "show", "node", "-o", "gpu1"],
        ["scontrol", "update", "NodeName=gpu1", "State=DRAIN", f"Reason={REASON}"],
    ]


def test_gate_records_its_drain_and_forgets_it_on_resume(tmp_path: Path) -> None:
    run = Scontrol(CommandResult(0, line("IDLE")))
    assert slurm.gate(FAIL, "gpu1", run, TIERS, state_dir=tmp_path, boot_id="b1").kind == DRAIN
    kept, problem = drains.load(tmp_path, "gpu1")
    assert problem == "" and kept is not None
    assert (kept.reason, kept.checks, kept.tier, kept.needs, kept.boot_id) == (
        REASON, ("gpu_count",), 0, 0, "b1"
    )  # fmt: skip
    record = tmp_path / drains.RECORD
    assert record.stat().st_mode & 0o777 == 0o600
    assert '"needs": 0' in record.read_text()  # the health check wrapper greps for "needs": 2
    run = Scontrol(CommandResult(0, line("IDLE+DRAIN", REASON)))
    assert slurm.gate(PASS, "gpu1", run, TIERS, state_dir=tmp_path).kind == RESUME
    assert not record.exists()


def test_a_record_of_a_drain_an_operator_took_over_is_forgotten(tmp_path: Path) -> None:
    drains.save(tmp_path, recorded(REASON))
    for shown in (line("IDLE"), line("IDLE+DRAIN", OPERATOR)):  # resumed, or drained anew
        run = Scontrol(CommandResult(0, shown))
        assert slurm.gate(PASS, "gpu1", run, TIERS, state_dir=tmp_path).kind == NONE
        assert not (tmp_path / drains.RECORD).exists()
        drains.save(tmp_path, recorded(REASON))


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        (lambda p: p.chmod(0o666), "others may write it"),
        (lambda p: os.chown(p, os.getuid() + 1, -1), "not by uid"),
        (lambda p: (p.rename(p.with_name("x")), p.symlink_to(p.with_name("x"))), "symbolic link"),
        (lambda p: os.link(p, p.with_name("second")), "2 links"),
        (lambda p: p.write_text('{"schema_version": 1, "node": "gpu1"}'), "not a rocmlab drain"),
    ],
)
def test_a_record_root_cannot_trust_is_no_record(tmp_path: Path, plant, why: str) -> None:
    if "not by uid" in why and os.getuid() != 0:
        pytest.skip("only root can give a file to another account")
    drains.save(tmp_path, recorded(REASON))
    plant(tmp_path / drains.RECORD)
    kept, problem = drains.load(tmp_path, "gpu1")
    assert kept is None and why in problem, problem
    run = Scontrol(CommandResult(0, line("IDLE+DRAIN", REASON)))
    action = slurm.gate(PASS, "gpu1", run, TIERS, state_dir=tmp_path)
    assert action.kind == NONE and why in action.why, action.why


def test_gate_says_when_scontrol_is_missing_fails_or_refuses() -> None:
    with pytest.raises(SlurmGateError, match="not installed"):
        slurm.gate(FAIL, "gpu1", Scontrol(None), TIERS)
    with pytest.raises(SlurmGateError, match="exited 1: Unable to contact slurm controller"):
        said = CommandResult(1, "", "Unable to contact slurm controller\x1b")
        slurm.gate(FAIL, "gpu1", Scontrol(said), TIERS)
    run = Scontrol(CommandResult(0, line("IDLE")), update_rc=1)
    with pytest.raises(SlurmGateError, match="update NodeName=gpu1 State=DRAIN failed"):
        slurm.gate(FAIL, "gpu1", run, TIERS)


# ---------------------------------------------------------------- the command line


def fake_scontrol(tmp: Path, state: str, reason: str = "") -> tuple[Path, Path]:
    """An scontrol that prints the node's line and logs its arguments (one JSON list a line)."""
    calls = tmp / "calls.jsonl"
    (tmp / "shown.txt").write_text(line(state, reason).replace("gpu1", "node7"))
    script = tmp / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f"python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' \"$@\" >> {calls}\n"
        f'[ "$1" = show ] && cat {tmp / "shown.txt"}\n'
        "exit 0\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, calls


def calls_of(path: Path) -> list[list[str]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_failed_tier_0_drains_the_node_through_scontrol(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    group = m.root("etc/group")
    group.write_text(re.sub(r"^(render:x:\d+):alice$", r"\1:", group.read_text(), flags=re.M))
    scontrol, calls = fake_scontrol(tmp_path, "IDLE")
    code, out, doc = health(
        m, "--account", "alice", "--slurm-gate", "--scontrol", str(scontrol),
        env={"SLURMD_NODENAME": "node7"},
    )  # fmt: skip
    assert code == 1, out
    reason = "rocmlab: gpu_groups: user_groups_users (role user_groups)"
    assert calls_of(calls)[-1][:3] == ["update", "NodeName=node7", "State=DRAIN"], out
    assert calls_of(calls)[-1][3].startswith(f"Reason={reason}"), calls_of(calls)
    assert f"slurm: drain node7: {calls_of(calls)[-1][3][7:]}" in out
    assert doc["verdict"] == "fail"  # the report keeps the whole verdict
    kept, _ = drains.load(m.state, "node7")  # root's record, in the state directory
    assert kept is not None and kept.reason == calls_of(calls)[-1][3][7:]
    assert kept.checks == ("gpu_groups",) and kept.needs == 0


def test_a_pass_resumes_only_rocmlabs_drain(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", ("provisioned",))
    m.state.mkdir()
    ours = "rocmlab: gpu_groups: x"
    drains.save(m.state, drains.made("node7", ours, "gpu_groups", 0, TIERS, "b"))
    scontrol, calls = fake_scontrol(tmp_path, "IDLE+DRAIN", ours)
    code, out, _ = health(m, "--account", "alice", "--slurm-gate", "--slurm-node", "node7",
                          "--scontrol", str(scontrol))  # fmt: skip
    assert code == 0, out
    assert calls_of(calls)[-1] == ["update", "NodeName=node7", "State=RESUME"], out
    assert not (m.state / drains.RECORD).exists()
    # An operator's drain, also one whose reason starts with "rocmlab:", stays.
    for theirs in (OPERATOR, "rocmlab:ops firmware update", ours):
        scontrol, calls = fake_scontrol(tmp_path, "IDLE+DRAIN", theirs)
        os.remove(tmp_path / "calls.jsonl")
        code, out, _ = health(m, "--account", "alice", "--slurm-gate", "--slurm-node", "node7",
                              "--scontrol", str(scontrol))  # fmt: skip
        assert code == 0, out
        assert calls_of(calls) == [["show", "node", "-o", "node7"]], out
        assert "is not rocmlab's" in out


def test_an_scontrol_that_fails_is_exit_6_after_the_verdict(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", ("provisioned",))
    broken = tmp_path / "scontrol"
    broken.write_text("#!/bin/sh\necho 'Unable to contact slurm controller' >&2\nexit 1\n")
    broken.chmod(0o755)
    code, out, doc = health(m, "--account", "alice", "--slurm-gate", "--slurm-node", "node7",
                            "--scontrol", str(broken))  # fmt: skip
    assert code == 6, out
    assert "verdict: PASS" in out and "Unable to contact slurm controller" in out
    assert doc is not None  # the report is written first


def test_a_bad_node_name_is_refused_before_any_check(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    code, out, doc = health(m, "--slurm-gate", env={"SLURMD_NODENAME": "gpu1;reboot"})
    assert code == 2 and doc is None, out
    assert "SLURMD_NODENAME: node name 'gpu1;reboot' is not accepted" in out
