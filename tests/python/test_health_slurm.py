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
from rocmlab.health import slurm
from rocmlab.health.slurm import DRAIN, NONE, RESUME, Node, SlurmGateError
from rocmlab.health.table import CHECKS, STATEFUL

TIERS = {spec.name: 2 if spec.name in STATEFUL else spec.tier for spec in CHECKS}

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


def report(verdict: str, tier: int = 0, failed: tuple[str, str] | None = None) -> dict:
    checks = [{"name": "amdgpu_driver", "status": "pass", "fix": None}]
    if failed:
        checks.append({"name": failed[0], "status": "fail", "fix": failed[1]})
        checks.append({"name": "disk_space", "status": "fail", "fix": "apt-get clean"})
    return {"verdict": verdict, "tier": tier, "checks": checks}


GPU_COUNT = ("gpu_count", "the kernel log; reseat the card, check its power; then reboot")
REASON = "rocmlab: gpu_count: the kernel log"


# ---------------------------------------------------------------- scontrol's output


def test_a_drained_node_is_read_with_its_reason() -> None:
    node = slurm.parse_node(line("IDLE+DRAIN", "rocmlab: gpu_count: reseat it"), "gpu1")
    assert node == Node("gpu1", "IDLE", frozenset({"DRAIN"}), "rocmlab: gpu_count: reseat it")
    assert node.drained and node.ours and node.state == "IDLE+DRAIN"


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
OPERATOR = "replacing fan, ticket 4711"


@pytest.mark.parametrize(
    ("doc", "state", "reason", "kind"),
    [
        (FAIL, "IDLE", "", DRAIN),
        (FAIL, "ALLOCATED", "", DRAIN),  # draining: the running job finishes
        (FAIL, "MIXED+RESERVED", "", DRAIN),  # a reservation does not keep a broken node in use
        (FAIL, "IDLE+DRAIN", REASON, NONE),  # already right
        (FAIL, "IDLE+DRAIN", "rocmlab: disk_space: apt-get clean", DRAIN),  # the reason updated
        (FAIL, "IDLE+DRAIN", OPERATOR, NONE),  # the operator's drain stays as it is
        (FAIL, "DOWN", "Not responding", NONE),
        (FAIL, "IDLE+FAIL", OPERATOR, NONE),
        (PASS, "IDLE+DRAIN", REASON, RESUME),
        (WARN, "ALLOCATED+DRAIN", REASON, RESUME),  # a warning does not keep it out
        (PASS, "IDLE+DRAIN", OPERATOR, NONE),
        (PASS, "IDLE+DRAIN", "rocmlab:x", NONE),  # names no check: needs tier 2
        (PASS, "DOWN", "Not responding", NONE),
        (PASS, "IDLE+RESERVED", "", NONE),
        (PASS, "IDLE+MAINTENANCE+RESERVED", "", NONE),
        (PASS, "IDLE", "", NONE),
        (PASS, "IDLE+DRAIN", "rocmlab: smoke: docs/smoke-job.md", NONE),  # tier 2 drained it
        (report("pass", tier=2), "IDLE+DRAIN", "rocmlab: smoke: docs/smoke-job.md", RESUME),
        (PASS, "IDLE+DRAIN", "rocmlab: ras_errors: drain and reboot", NONE),  # rose since the last
        (report("pass", tier=2), "IDLE+DRAIN", "rocmlab: maintenance: reboot", RESUME),
    ],
)
def test_what_a_verdict_does_to_a_node(doc: dict, state: str, reason: str, kind: str) -> None:
    node = slurm.parse_node(line(state, reason), "gpu1")
    action = slurm.decide(doc, node, TIERS)
    assert action.kind == kind, action.why
    if kind == DRAIN:
        assert action.reason == REASON


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


def test_a_pass_resumes_only_rocmlabs_drain(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", ("provisioned",))
    scontrol, calls = fake_scontrol(tmp_path, "IDLE+DRAIN", "rocmlab: gpu_groups: x")
    code, out, _ = health(m, "--account", "alice", "--slurm-gate", "--slurm-node", "node7",
                          "--scontrol", str(scontrol))  # fmt: skip
    assert code == 0, out
    assert calls_of(calls)[-1] == ["update", "NodeName=node7", "State=RESUME"], out
    scontrol, calls = fake_scontrol(tmp_path, "IDLE+DRAIN", OPERATOR)
    os.remove(tmp_path / "calls.jsonl")
    code, out, _ = health(m, "--account", "alice", "--slurm-gate", "--slurm-node", "node7",
                          "--scontrol", str(scontrol))  # fmt: skip
    assert code == 0, out
    assert calls_of(calls) == [["show", "node", "-o", "node7"]], out
    assert "is not rocmlab's" in out


def test_an_scontrol_that_fails_is_exit_3_after_the_verdict(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", ("provisioned",))
    broken = tmp_path / "scontrol"
    broken.write_text("#!/bin/sh\necho 'Unable to contact slurm controller' >&2\nexit 1\n")
    broken.chmod(0o755)
    code, out, doc = health(m, "--account", "alice", "--slurm-gate", "--slurm-node", "node7",
                            "--scontrol", str(broken))  # fmt: skip
    assert code == 3, out
    assert "verdict: PASS" in out and "Unable to contact slurm controller" in out
    assert doc is not None  # the report is written first


def test_a_bad_node_name_is_refused_before_any_check(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    code, out, doc = health(m, "--slurm-gate", env={"SLURMD_NODENAME": "gpu1;reboot"})
    assert code == 2 and doc is None, out
    assert "SLURMD_NODENAME: node name 'gpu1;reboot' is not accepted" in out
