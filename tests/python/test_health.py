"""``rocmlab health`` on the doctor's fixture machines (tests/fixtures/doctor/) with the health
overlays (tests/fixtures/health/, see its README): every tier-0 check, what changed between two
runs, the budgets (a check that hangs is cut, the run ends in time), tier 1 and 2 on the CPU,
the JSON report, the node_exporter textfile (parsed back, and `promtool check metrics`), the
exit codes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from doctor_fixtures import FIXTURES, build
from health_testutil import Machine, checks, health, machine, status
from rocmlab_testutil import REPO, run_cli

from rocmlab.doctor.model import ERROR, FAIL, PASS, SKIP, WARN
from rocmlab.health import textfile
from rocmlab.health.checks_gpu import Ran, check_gpu_matmul, judge_probe
from rocmlab.health.context import HealthContext
from rocmlab.health.report import HEALTH_SCHEMA
from rocmlab.health.runner import Task, run_tasks
from rocmlab.health.table import AFTER, CHECKS, PHASES, tier_budget

LOGS = FIXTURES / "doctor" / "kernel-logs"
TIER0 = [spec.name for spec in CHECKS if spec.tier == 0] + ["host_files", "health_state"]


# ---------------------------------------------------------------- a healthy node


def test_a_healthy_node_passes_tier_0_with_every_check_named(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", ("provisioned",))
    code, out, doc = health(m, "--account", "alice")
    assert code == 0, out
    assert [c["name"] for c in doc["checks"]] == TIER0
    statuses = {name: c["status"] for name, c in checks(doc).items()}
    # Inbox amdgpu (no DKMS), a Radeon (no RAS).
    skipped = {"dkms_headers", "dkms_next_kernel", "pcie_replays", "ras_errors"}
    assert statuses == {name: SKIP if name in skipped else PASS for name in TIER0}, out
    assert doc["verdict"] == "pass" and doc["exit_code"] == 0 and doc["tier"] == 0
    assert doc["duration_seconds"] < tier_budget(0) and doc["budget_seconds"] == 5
    assert all(c["tier"] == 0 for c in doc["checks"])
    assert "verdict: PASS" in out and "(tier 0, budget 5 s)" in out
    assert "torch 2.8.0+rocm6.4 in /opt/rocmlab/venvs/pytorch, as provisioned" in out


def test_tier_0_stays_passive_and_fast(tmp_path: Path) -> None:
    m = machine(tmp_path, "instinct-healthy", ("mi210-counters",),
                kernel_log="doctor/kernel-logs/radeon-7900xtx-boot.log")  # fmt: skip
    started = time.monotonic()
    code, out, doc = health(m, "--account", "alice")
    assert time.monotonic() - started < tier_budget(0), out
    assert code == 0, out
    assert "gpu_matmul" not in checks(doc) and "smoke" not in checks(doc)


# ---------------------------------------------------------------- device nodes and accounts


def test_a_gpu_missing_from_the_count_fails(tmp_path: Path) -> None:
    m = machine(
        tmp_path, "instinct-healthy", kernel_log="doctor/kernel-logs/radeon-7900xtx-boot.log"
    )
    nodes = m.sys("class/kfd/kfd/topology/nodes")
    gpu_nodes = [
        n for n in sorted(nodes.iterdir()) if "simd_count 0" not in (n / "properties").read_text()
    ]
    shutil.rmtree(gpu_nodes[-1])  # the second MI210 did not come up
    code, out, doc = health(m)
    assert code == 1, out
    count = checks(doc)["gpu_count"]
    assert count["status"] == FAIL and "1 GPU(s) in the KFD topology, 2 expected" in count["saw"]
    assert "reseat" in count["fix"]
    assert doc["verdict"] == "fail"


def test_a_node_recreated_with_the_wrong_group_fails(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    group = m.root("etc/group")
    gid = os.stat(m.ctx.dev("kfd")).st_gid
    lines = []
    for line in group.read_text().splitlines():
        name, x, number, members = line.split(":")
        if name == "render":
            number = "60992"  # render is another group now ...
        elif name == "video":
            number = str(gid)  # ... and the nodes' group is video
        lines.append(":".join([name, x, number, members]))
    group.write_text("\n".join(lines) + "\n")
    code, out, doc = health(m, "--account", "alice")
    assert code == 1, out
    found = checks(doc)["node_group"]
    assert found["status"] == FAIL
    assert "kfd belongs to group video" in found["saw"] and "not render" in found["saw"]
    assert "user_groups_udev_rules: true" in found["fix"]


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o620])
def test_a_kfd_the_gpu_group_cannot_open_fails(tmp_path: Path, mode: int) -> None:
    m = machine(tmp_path, "radeon-healthy")
    os.chmod(m.ctx.dev("kfd"), mode)  # still group render: only its mode changed
    code, out, doc = health(m, "--account", "alice")
    assert code == 1 and doc["verdict"] == "fail", out
    found = checks(doc)["node_group"]
    assert found["status"] == FAIL, found
    assert "group render may not read and write it" in found["saw"], found
    assert "members of render cannot open it" in found["saw"]
    assert "user_groups_udev_rules: true" in found["fix"]
    os.chmod(m.ctx.dev("kfd"), 0o666)  # open to every account: fine whatever its group
    assert status(health(m, "--account", "alice")[2], "node_group") == PASS


def test_an_account_dropped_from_render_fails(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    group = m.root("etc/group")
    group.write_text(re.sub(r"^(render:x:\d+):alice$", r"\1:", group.read_text(), flags=re.M))
    code, out, doc = health(m, "--account", "alice", "--account", "nobody-here")
    assert code == 1, out
    found = checks(doc)["gpu_groups"]
    assert found["status"] == FAIL
    assert "alice (uid 1000) is not in render" in found["saw"]
    assert "the account nobody-here does not exist" in found["saw"]
    assert "user_groups_users" in found["fix"]


def test_root_without_accounts_names_the_option(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("the case of a run as root")
    m = machine(tmp_path, "radeon-healthy")
    _, _, doc = health(m)
    found = checks(doc)["gpu_groups"]
    assert found["status"] == SKIP and "--account" in found["saw"]


# ---------------------------------------------------------------- the kernel log between runs


def test_new_kernel_log_lines_warn_once(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    boot = m.log.read_text()
    code, out, doc = health(m)
    assert code == 0 and status(doc, "kernel_log") == PASS, out
    assert "this boot (no earlier run)" in checks(doc)["kernel_log"]["saw"]
    hang = (LOGS / "ring-timeout-vram-lost.log").read_text()
    m.log.write_text(boot + hang)  # the GPU hung and was reset since
    code, out, doc = health(m)
    found = checks(doc)["kernel_log"]
    assert code == 0 and found["status"] == WARN, out
    assert "new amdgpu line(s) since the last run" in found["saw"]
    assert "ring timeout" in found["saw"] and found["evidence"]
    code, out, doc = health(m)  # nothing new since
    found = checks(doc)["kernel_log"]
    assert found["status"] == PASS and "seen before" in found["saw"], out


def test_a_reboot_starts_the_kernel_log_over(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    boot_id = m.root("proc/sys/kernel/random/boot_id")
    boot_id.parent.mkdir(parents=True, exist_ok=True)
    boot_id.write_text("0f4b8a52-4c8e-4a50-9a5e-0d3c9a1b2c3d\n")
    m.log.write_text(m.log.read_text() + (LOGS / "ring-timeout-vram-lost.log").read_text())
    assert status(health(m)[2], "kernel_log") == WARN
    assert status(health(m)[2], "kernel_log") == PASS
    boot_id.write_text("7d2e1c90-1f6a-4b3c-8d9e-2a4b6c8d0e1f\n")  # the same lines, another boot
    assert status(health(m)[2], "kernel_log") == WARN


def test_a_failure_that_needs_a_reboot_keeps_failing(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", kernel_log="doctor/kernel-logs/psp-hw-init-failed.log")
    code, out, doc = health(m)
    assert code == 1 and status(doc, "kernel_log") == FAIL, out
    code, out, doc = health(m)
    found = checks(doc)["kernel_log"]
    assert code == 1 and found["status"] == FAIL, out
    assert "earlier this boot" in found["saw"] and "reboot" in found["fix"]


# Each line alone as amdgpu prints it: dev_err's "amdgpu <PCI address>: amdgpu: " prefix (or
# DRM_WARN's "[drm] " in older kernels) and the message of the format strings in
# drivers/gpu/drm/amd/amdgpu (amdgpu_device.c: amdgpu_device_gpu_recover, amdgpu_do_asic_reset,
# amdgpu_device_xgmi_reset_func, amdgpu_device_init, amdgpu_device_mode1_reset; nv.c, soc21.c:
# the mode-2 reset; amdgpu_smu.c and the SMU 13 code: "Mode2 reset failed!", "Failed to mode
# reset!"), with example values for the %d and %s. Not copied from a log.
DEV = "amdgpu 0000:03:00.0: amdgpu: "
RESET_FAILURES = [
    f"{DEV}ASIC reset failed with error, -110 for drm dev, 0000:03:00.0",
    "[drm] ASIC reset failed with error, -110 for drm dev, 0000:03:00.0",
    "ASIC reset failed with error, -110",
    f"{DEV}GPU reset(2) failed",
    f"{DEV}GPU Recovery Failed: -110",
    f"{DEV}asic reset on init failed",
    f"{DEV}GPU pre asic reset failed with err, -110 for drm dev, 0000:03:00.0 ",
    f"{DEV}GPU mode1 reset failed",
    f"{DEV}GPU mode2 reset failed",
    f"{DEV}Mode2 reset failed!",
    "amdgpu 0000:03:00.0: Failed to mode reset!",
    f"{DEV}GPU BACO reset failed",  # no line amdgpu prints today: the catch-all for others
]


@pytest.mark.parametrize("line", RESET_FAILURES)
def test_every_amdgpu_reset_failure_fails(tmp_path: Path, line: str) -> None:
    m = machine(tmp_path, "radeon-healthy")
    m.log.write_text(m.log.read_text() + f"[  950.818199] {line}\n")
    code, out, doc = health(m)
    found = checks(doc)["kernel_log"]
    assert code == 1 and found["status"] == FAIL, out
    assert "GPU reset failed" in found["saw"] and "reboot" in found["fix"], found
    assert found["evidence"] == [f"[  950.818199] {line}".strip()]


def test_a_ring_reset_that_failed_warns_when_the_full_reset_succeeds(tmp_path: Path) -> None:
    # amdgpu_job.c's per-ring reset first; when it fails the driver resets the whole GPU.
    m = machine(tmp_path, "radeon-healthy")
    steps = [
        f"{DEV}ring gfx_0.0.0 timeout, signaled seq=2662395, emitted seq=2662397",
        f"{DEV}Ring gfx_0.0.0 reset failed",
        f"{DEV}GPU reset begin!",
        f"{DEV}soft reset failed, will fallback to full reset!",
        f"{DEV}MODE2 reset",
        f"{DEV}GPU reset succeeded, trying to resume",
    ]
    m.log.write_text(m.log.read_text() + "".join(f"{s}\n" for s in steps))
    code, out, doc = health(m)
    found = checks(doc)["kernel_log"]
    assert code == 0 and found["status"] == WARN, out
    assert "ring reset failed" in found["saw"]
    m.log.write_text(m.log.read_text() + f"{DEV}GPU Recovery Failed: -62\n")  # then it did not
    assert status(health(m)[2], "kernel_log") == FAIL


# ---------------------------------------------------------------- counters between runs


def write_ras(
    m: Machine, address: str, block: str, ue: int, ce: int, de: int | None = None
) -> None:
    """The counter file in amdgpu's format (tests/fixtures/health/README.md)."""
    text = f"ue: {ue}\nce: {ce}\n" + (f"de: {de}\n" if de is not None else "")
    m.sys(f"bus/pci/devices/{address}/ras/{block}_err_count").write_text(text)


def instinct(tmp: Path) -> Machine:
    return machine(tmp, "instinct-healthy", ("mi210-counters",),
                   kernel_log="doctor/kernel-logs/radeon-7900xtx-boot.log")  # fmt: skip


def test_ras_counters_that_rise_between_runs(tmp_path: Path) -> None:
    m = instinct(tmp_path)
    code, out, doc = health(m)
    assert code == 0 and status(doc, "ras_errors") == PASS, out
    assert "0000:01:00.0 umc: ue 0, ce 0, de 0" in checks(doc)["ras_errors"]["saw"]
    write_ras(m, "0000:02:00.0", "umc", ue=0, ce=3, de=0)
    code, out, doc = health(m)
    found = checks(doc)["ras_errors"]
    assert code == 0 and found["status"] == WARN, out
    assert "0000:02:00.0 umc: ce +3 (now 3)" in found["saw"]
    code, out, doc = health(m)
    assert status(doc, "ras_errors") == PASS, out  # the same 3: nothing new
    write_ras(m, "0000:01:00.0", "gfx", ue=1, ce=0)
    code, out, doc = health(m)
    found = checks(doc)["ras_errors"]
    assert code == 1 and found["status"] == FAIL, out
    assert "uncorrectable" in found["saw"] and "0000:01:00.0 gfx: ue +1 (now 1)" in found["saw"]
    assert "reboot" in found["fix"]
    write_ras(m, "0000:02:00.0", "umc", ue=0, ce=3, de=2)
    assert status(health(m)[2], "ras_errors") == FAIL  # deferred errors are uncorrected


def test_ras_counters_that_cannot_be_queried_warn(tmp_path: Path) -> None:
    m = instinct(tmp_path)
    m.sys("bus/pci/devices/0000:01:00.0/ras/umc_err_count").write_text(
        "Query currently inaccessible\n"
    )
    _, out, doc = health(m)
    found = checks(doc)["ras_errors"]
    assert found["status"] == WARN and "Query currently inaccessible" in found["saw"], out


def test_pcie_replays_that_rise_between_runs(tmp_path: Path) -> None:
    m = instinct(tmp_path)
    _, out, doc = health(m)
    assert status(doc, "pcie_replays") == PASS and "first reading" in out
    m.sys("bus/pci/devices/0000:02:00.0/pcie_replay_count").write_text("17\n")
    code, out, doc = health(m)
    found = checks(doc)["pcie_replays"]
    assert code == 0 and found["status"] == WARN, out
    assert "0000:02:00.0 +17 (now 17)" in found["saw"] and "reseat" in found["fix"]
    assert status(health(m)[2], "pcie_replays") == PASS


def test_a_link_trained_down_fails(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    card = m.sys("bus/pci/devices/0000:86:00.0")
    (card / "current_link_speed").write_text("Unknown\n")  # pci_speed_string() of a dead link
    (card / "current_link_width").write_text("0\n")
    code, out, doc = health(m)
    assert code == 1 and status(doc, "pcie_link") == FAIL, out
    narrow = machine(tmp_path / "x4", "pcie-x4")
    assert status(health(narrow)[2], "pcie_link") == WARN


# ---------------------------------------------------------------- the state file


def test_a_corrupt_state_file_is_no_earlier_run_and_a_warning(tmp_path: Path) -> None:
    m = instinct(tmp_path)
    m.state.mkdir()
    (m.state / "state.json").write_text('{"schema_version": 1, "checks": {"ras_errors": [')
    code, out, doc = health(m)
    found = checks(doc)["health_state"]
    assert code == 0 and found["status"] == WARN, out
    assert "not valid JSON" in found["saw"] and "taken as no earlier run" in found["saw"]
    assert status(doc, "ras_errors") == PASS
    assert status(health(m)[2], "health_state") == PASS  # rewritten whole


def test_a_fifo_as_state_file_does_not_block(tmp_path: Path) -> None:
    m = instinct(tmp_path)
    m.state.mkdir()
    os.mkfifo(m.state / "state.json")
    _, out, doc = health(m, timeout=30)
    found = checks(doc)["health_state"]
    assert found["status"] == WARN and "a FIFO, not a regular file" in found["saw"], out


def test_a_state_dir_that_cannot_be_written_warns(tmp_path: Path) -> None:
    m = instinct(tmp_path)
    code, out, doc = health(m, "--state-dir", "/proc/rocmlab-health-state")
    found = checks(doc)["health_state"]
    assert code == 0 and found["status"] == WARN and "cannot save the state" in found["saw"], out


def test_a_state_lock_held_by_another_process_warns_instead_of_hanging_the_run(
    tmp_path: Path,
) -> None:
    import fcntl

    m = instinct(tmp_path)
    m.state.mkdir()
    lock = m.state / ".lock"
    lock.write_text("")
    lock.chmod(0o644)  # as an older version made it: another account could open it
    held = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        code, out, doc = health(m, timeout=60)  # a hang would be cut here, and fail
    finally:
        os.close(held)
    found = checks(doc)["health_state"]
    assert code == 0 and found["status"] == WARN, out
    assert "is held by another process for over 1 s" in found["saw"], found
    assert lock.stat().st_mode & 0o777 == 0o600  # root's alone from now on
    assert status(health(m)[2], "health_state") == PASS


# ---------------------------------------------------------------- versions and space


def provisioned(tmp: Path) -> Machine:
    return machine(tmp, "radeon-healthy", ("provisioned",))


def test_a_framework_changed_or_gone_since_provisioning(tmp_path: Path) -> None:
    m = provisioned(tmp_path)
    meta = m.root(
        "opt/rocmlab/venvs/pytorch/lib/python3.12/site-packages/torch-2.8.0+rocm6.4.dist-info/METADATA"
    )
    meta.write_text(meta.read_text().replace("Version: 2.8.0+rocm6.4", "Version: 2.9.1+rocm6.4"))
    code, out, doc = health(m)
    found = checks(doc)["framework_versions"]
    assert code == 0 and found["status"] == WARN, out
    assert (
        "torch 2.9.1+rocm6.4 is installed" in found["saw"]
        and "2.8.0+rocm6.4 was provisioned" in found["saw"]
    )
    assert "pytorch_rocm role" in found["fix"]
    shutil.rmtree(m.root("opt/rocmlab/venvs/tensorflow"))
    code, out, doc = health(m)
    found = checks(doc)["framework_versions"]
    assert code == 1 and found["status"] == FAIL, out
    assert "the tensorflow-rocm venv /opt/rocmlab/venvs/tensorflow is gone" in found["saw"]


def test_rocm_changed_under_the_frameworks(tmp_path: Path) -> None:
    m = provisioned(tmp_path)
    m.root("opt/rocm/.info/version").write_text("7.0.2-56\n")  # upgraded outside rocmlab
    code, out, doc = health(m)
    found = checks(doc)["rocm_version"]
    assert code == 1 and found["status"] == FAIL, out
    assert "ROCm 7.0.2 installed, TensorFlow was installed for ROCm 6.4" in found["saw"]
    assert "torch was installed for ROCm 6.4" in found["saw"]


def test_rocm_against_the_known_good_record(tmp_path: Path) -> None:
    m = provisioned(tmp_path)
    known = m.root("var/lib/rocmlab/known-good.json")
    known.parent.mkdir(parents=True, exist_ok=True)
    known.write_text(json.dumps({"rocm_version": "6.4.2", "kernel": "6.11.0-29-generic"}))
    _, out, doc = health(m)
    assert status(doc, "rocm_version") == PASS and "known-good 6.4.2" in out
    known.write_text(json.dumps({"rocm_version": "6.3.4"}))
    code, out, doc = health(m)
    found = checks(doc)["rocm_version"]
    assert code == 1 and "known-good release is 6.3.4" in found["saw"], out
    known.write_text("{not json")
    code, out, doc = health(m)
    found = checks(doc)["rocm_version"]
    assert code == 0 and found["status"] == WARN and "not valid JSON" in found["saw"], out


def test_free_space_thresholds(tmp_path: Path) -> None:
    m = provisioned(tmp_path)
    info = os.statvfs(m.root("opt/rocm"))
    free = info.f_bavail * info.f_frsize
    code, out, doc = health(m, "--min-free", str(free * 2), "--min-free-boot", "1K")
    found = checks(doc)["disk_space"]
    assert code == 0 and found["status"] == WARN and "low on space" in found["saw"], out
    assert "/opt/rocm and /opt/rocmlab/venvs and /boot" in found["saw"]
    code, out, doc = health(m, "--min-free", str(free * 8), "--min-free-boot", "1K")
    assert code == 1 and status(doc, "disk_space") == FAIL, out


# ---------------------------------------------------------------- budgets


def sleeper(seconds: float) -> Any:
    def work(_deadline: float) -> None:
        time.sleep(seconds)

    return work


def test_a_check_that_hangs_is_cut_at_its_budget_and_the_others_finish() -> None:
    started = time.monotonic()
    done = run_tasks(
        [Task("hangs", 1.0, sleeper(60)), Task("quick", 1.0, lambda _d: {"answer": 42})],
        started + 10,
    )
    assert time.monotonic() - started < 1.0 + 1.5
    assert done["hangs"].cut and done["hangs"].payload is None
    assert 1.0 <= done["hangs"].seconds < 2.0
    assert not done["quick"].cut and done["quick"].payload == {"answer": 42}


def test_the_run_ends_by_its_end_whatever_the_budgets() -> None:
    started = time.monotonic()
    done = run_tasks([Task(f"slow{i}", 30.0, sleeper(60)) for i in range(3)], started + 1.0)
    assert time.monotonic() - started < 1.0 + 1.5
    assert all(item.cut for item in done.values())


def test_a_cut_check_takes_what_it_started_with_it(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    def work(_deadline: float) -> None:
        # A process in a session of its own, as torchrun starts its workers.
        child = subprocess.Popen(["sleep", "60"], start_new_session=True)
        pids.write_text(str(child.pid))
        time.sleep(60)

    done = run_tasks([Task("spawns", 1.0, work)], time.monotonic() + 5)
    assert done["spawns"].cut
    assert gone(int(pids.read_text()))


def test_a_crashing_check_is_an_error_and_the_others_run() -> None:
    def crash(_deadline: float) -> None:
        raise ValueError("boom")

    done = run_tasks(
        [Task("crash", 2.0, crash), Task("fine", 2.0, lambda _d: 1)], time.monotonic() + 5
    )
    assert "ValueError: boom" in done["crash"].error and done["fine"].payload == 1


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether ``pid`` has ended within a few seconds: SIGKILL is sent to the whole group when
    the check is cut, but on a loaded machine the kernel may take a moment to end the process."""
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_hanging_command_is_cut_and_the_run_ends_in_time(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "journalctl.pid"
    journalctl = bin_dir / "journalctl"  # a journal that never answers
    journalctl.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 120\n")
    journalctl.chmod(0o755)
    report = tmp_path / "report.json"
    argv = ["health", "--sysfs-root", str(m.ctx.sysfs_root), "--dev-root", str(m.ctx.dev_root),
            "--root", str(m.ctx.root), "--state-dir", str(m.state),
            "--json", str(report)]  # fmt: skip
    started = time.monotonic()
    result = run_cli(*argv, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, timeout=60)
    elapsed = time.monotonic() - started
    doc = json.loads(report.read_text())
    found = checks(doc)["kernel_log"]
    assert found["status"] == ERROR, result.stdout
    assert "did not finish within its budget (4.5 s)" in found["saw"]
    assert doc["duration_seconds"] < tier_budget(0) + 1.0
    assert elapsed < tier_budget(0) + 3.0  # and the interpreter's start
    assert result.returncode == 0  # an error warns: the verdict is warn, not fail
    assert doc["verdict"] == "warn"
    assert not alive(int(pid_file.read_text()))


def test_sigterm_ends_the_run_and_what_it_started(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "journalctl.pid"
    journalctl = bin_dir / "journalctl"
    journalctl.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 120\n")
    journalctl.chmod(0o755)
    report = tmp_path / "report.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "rocmlab", "health", "--sysfs-root", str(m.ctx.sysfs_root),
         "--dev-root", str(m.ctx.dev_root), "--root", str(m.ctx.root),
         "--state-dir", str(m.state), "--json", str(report)],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == 143
    assert not report.exists()
    assert not alive(int(pid_file.read_text()))


def test_docs_list_every_check_with_its_tier_and_budget() -> None:
    text = (REPO / "docs" / "health.md").read_text()
    for spec in CHECKS:
        row = f"| `{spec.name}` | {spec.tier} | {spec.budget:g} s |"
        assert row in text, row
    for name in AFTER:
        assert f"| `{name}` | 0 | — |" in text, name
    for tier in (0, 1, 2):
        assert f"{tier_budget(tier):g} s" in text


def test_budgets_are_one_table_and_tiers_add_up() -> None:
    assert [tier_budget(t) for t in (0, 1, 2)] == [5.0, 30.0, 450.0]
    for spec in CHECKS:
        phase_budget = next(budget for name, _, budget in PHASES if name == spec.phase)
        assert 0 < spec.budget <= phase_budget, spec.name


# ---------------------------------------------------------------- tier 1 and 2


def test_tier_1_computes_on_the_cpu_of_a_host_without_gpu(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", sysfs=["sysfs/no-amd-gpu"], expect_gpus=0)
    code, out, doc = health(m, tier=1)
    found = checks(doc)["gpu_matmul"]
    assert found["status"] == PASS, out
    assert "the CPU (no GPU expected)" in found["saw"]
    assert "exact sum right in all" in found["saw"] and found["tier"] == 1
    assert doc["tier"] == 1 and doc["budget_seconds"] == 30 and code == 0


def test_tier_1_without_a_gpu_that_was_expected_skips(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", sysfs=["sysfs/no-amd-gpu"], expect_gpus=None)
    code, out, doc = health(m, tier=1)
    assert status(doc, "gpu_matmul") == SKIP and status(doc, "gpu_count") == FAIL, out
    assert code == 1


def test_a_wrong_exact_sum_fails() -> None:
    import torch

    from rocmlab.health.gpu_probe import exact_matmul

    right = exact_matmul(torch.device("cpu"))
    assert right["wrong"] == 0 and right["elements"] == 64 * 251 * 64

    def flip(product: torch.Tensor) -> None:
        product[3, 1000] += 1

    wrong = exact_matmul(torch.device("cpu"), corrupt=flip)
    assert wrong["wrong"] == 1 and wrong["first_wrong"] == 3 * 251 * 64 + 1000
    answer = {"device_name": "cpu", "matmul": {"n": 256, "tflops": 0.1, "rel_err": 0.0,
                                               "passed": True}, "exact": wrong}  # fmt: skip
    result = judge_probe("GPU 0", Ran(0, json.dumps(answer), "", 1.0), 20)
    assert result.status == FAIL and "1 of 1028096 elements of an exact sum are wrong" in result.saw


def test_a_probe_that_hangs_fails_naming_the_gpu(tmp_path: Path) -> None:
    pid_file = tmp_path / "probe.pid"
    python = tmp_path / "python"  # stands for an interpreter whose GPU computation never ends
    python.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 120\n")
    python.chmod(0o755)
    ctx = build("radeon-healthy", tmp_path / "m", sysfs=["sysfs/no-amd-gpu"], expect_gpus=0)
    started = time.monotonic()
    outcome = check_gpu_matmul(HealthContext(ctx, python=str(python)), started + 4)
    assert time.monotonic() - started < 4
    assert outcome.result.status == FAIL
    assert "did not finish" in outcome.result.saw and "the GPU hangs" in outcome.result.saw
    assert not alive(int(pid_file.read_text()))


def test_tier_2_runs_the_smoke_job(real_data: dict[str, Path], tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", sysfs=["sysfs/no-amd-gpu"], expect_gpus=0)
    code, out, doc = health(
        m, "--smoke-data", str(real_data["mnist"]), "--smoke-arg=--epochs", "--smoke-arg=1",
        "--smoke-arg=--device", "--smoke-arg=cpu", tier=2,
    )  # fmt: skip
    found = checks(doc)
    assert found["smoke"]["status"] == PASS, out
    assert re.search(r"^the smoke job passed on .+: accuracy 0\.9\d+, [\d,]+ samples/s$",
                     found["smoke"]["saw"])  # fmt: skip
    assert found["allreduce"]["status"] == SKIP and found["smoke"]["tier"] == 2
    assert found["gpu_matmul"]["status"] == PASS and code == 0
    assert doc["duration_seconds"] < tier_budget(2)


def test_tier_2_with_the_dataset_missing_fails_with_the_fix(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy", sysfs=["sysfs/no-amd-gpu"], expect_gpus=0)
    code, out, doc = health(m, "--smoke-data", str(tmp_path / "no-data"), tier=2)
    found = checks(doc)["smoke"]
    assert code == 1 and found["status"] == FAIL, out
    assert "the dataset is missing" in found["saw"] and "--smoke-data" in found["fix"]


# ---------------------------------------------------------------- outputs


SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_]\w*="(?:[^"\\]|\\.)*",?)*)\} (\S+)$'
)
LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


def parse_textfile(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of a textfile, with HELP and TYPE checked: once per name, before its samples."""
    assert text.endswith("\n")
    samples, described = {}, {}
    for line in text.splitlines():
        if line.startswith("# "):
            kind, name = line.split(" ")[1:3]
            assert (name, kind) not in described
            described[(name, kind)] = True
            continue
        match = SAMPLE.match(line)
        assert match, line
        name = match[1]
        assert (name, "HELP") in described and (name, "TYPE") in described, name
        labels = tuple(
            (key, re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], value))
            for key, value in LABEL.findall(match[2])
        )
        assert (name, labels) not in samples
        samples[(name, labels)] = float(match[3])
    return samples


def promtool_check(path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("ROCMLAB_REQUIRE_PROMTOOL") == "1":
            pytest.fail("promtool is missing (tools/test installs it: ensure_promtool)")
        pytest.skip("promtool is not installed (Debian's prometheus package ships it)")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=path.read_bytes(), capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_textfile_says_each_check_and_passes_promtool(tmp_path: Path) -> None:
    m = instinct(tmp_path)
    write_ras(m, "0000:01:00.0", "gfx", ue=1, ce=0)
    collector = tmp_path / "textfile"
    collector.mkdir()
    prom = collector / "rocmlab-health.prom"
    code, out, doc = health(m, "--textfile", str(prom))
    assert code == 1, out
    assert [p.name for p in collector.iterdir()] == ["rocmlab-health.prom"]  # no temporary left
    samples = parse_textfile(prom.read_text())
    for check in doc["checks"]:
        labels = (("check", check["name"]), ("tier", "0"))
        healthy = check["status"] not in (FAIL, ERROR)
        assert samples[("rocmlab_health_check", labels)] == float(healthy)
        for each in (PASS, WARN, FAIL, SKIP, ERROR):
            key = ("rocmlab_health_check_status", (("check", check["name"]), ("status", each),
                                                   ("tier", "0")))  # fmt: skip
            assert samples[key] == float(each == check["status"])
    assert samples[("rocmlab_health_check", (("check", "ras_errors"), ("tier", "0")))] == 0
    assert samples[("rocmlab_health_healthy", (("tier", "0"),))] == 0
    finished = samples[("rocmlab_health_last_run_timestamp_seconds", (("tier", "0"),))]
    assert abs(finished - time.time()) < 60
    assert samples[("rocmlab_health_duration_seconds", (("tier", "0"),))] == doc["duration_seconds"]
    assert samples[("rocmlab_health_budget_seconds", (("tier", "0"),))] == 5
    promtool_check(prom)


def test_label_values_are_escaped_as_the_exposition_format_says(tmp_path: Path) -> None:
    hostile = 'a"b\\c\nd}'
    doc = {
        "tier": 1,
        "exit_code": 1,
        "duration_seconds": 1.5,
        "budget_seconds": 30.0,
        "checks": [{"name": hostile, "status": FAIL, "seconds": 0.25}],
    }
    text = textfile.render(doc, 1767225600.0)
    assert 'check="a\\"b\\\\c\\nd}"' in text
    samples = parse_textfile(text)
    assert samples[("rocmlab_health_check", (("check", hostile), ("tier", "1")))] == 0
    path = tmp_path / "escaped.prom"
    path.write_text(text)
    promtool_check(path)


def test_json_to_stdout_and_the_lines_to_stderr(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    argv = ["health", "--sysfs-root", str(m.ctx.sysfs_root), "--dev-root", str(m.ctx.dev_root),
            "--root", str(m.ctx.root), "--kernel-log", str(m.log), "--state-dir", str(m.state),
            "--json", "-"]  # fmt: skip
    result = run_cli(*argv)
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, HEALTH_SCHEMA)
    assert doc["tool"] == "rocmlab health" and doc["schema_version"] == 1
    assert doc["host"] and doc["started"] <= doc["finished"]
    assert "verdict:" in result.stderr and "verdict:" not in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tier", "3"], "argument --tier: invalid choice: 3"),
        (["--textfile", "health.txt"], "only files ending in .prom"),
        (["--json", "/"], "--json /: is a directory"),
        (["--min-free", "lots"], "'lots' is not a size"),
        (["--account", "a:b"], "'a:b' is not an account name"),
        (["--tier", "2", "--smoke-arg=--json"], "--smoke-arg --json: set by rocmlab health"),
        (["--tier", "2", "--smoke-arg=--epochs", "--smoke-arg=0"],
         "rocmlab smoke says: argument --epochs"),
        (["--kernel-log", "/nonexistent"], "--kernel-log /nonexistent: not a readable file"),
    ],
)  # fmt: skip
def test_bad_usage_exits_2_before_any_check(args: list[str], message: str, tmp_path: Path) -> None:
    result = run_cli("health", "--state-dir", str(tmp_path / "state"), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert not (tmp_path / "state").exists()


def test_a_textfile_that_is_a_directory_is_refused_before_any_check(tmp_path: Path) -> None:
    m = machine(tmp_path, "radeon-healthy")
    target = tmp_path / "collector"
    target.mkdir()
    (target / "rocmlab-health.prom").mkdir()  # a directory where the file goes
    code, out, _ = health(m, "--textfile", str(target / "rocmlab-health.prom"))
    assert code == 2 and "is a directory" in out


def test_tier_0_reports_the_core_line(tmp_path: Path) -> None:
    """A Core SDK host (cores 7.14 and 10.0 as dpkg and update-alternatives leave them) whose
    known-good record names 10.0.0: the release, the line and the selected core."""
    from rocm_trees import TWO, tree

    m = machine(tmp_path, "radeon-healthy")
    shutil.rmtree(m.ctx.root / "opt" / "rocm")
    tree(m.ctx.root, TWO, ("7.14", "10.0"), "auto", root=m.ctx.root)
    record = m.ctx.root / "var/lib/rocmlab/known-good.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"rocm_version": "10.0.0", "rocm_line": "core"}))
    _code, _out, doc = health(m, tier=0)
    assert doc is not None
    jsonschema.validate(doc, HEALTH_SCHEMA)
    rocm = doc["rocm"]
    assert (rocm["line"], rocm["release"], rocm["selected"]) == ("core", "10.0.0", "10.0")
    assert [(c["series"], c["selected"]) for c in rocm["cores"]] == [
        ("7.14", False),
        ("10.0", True),
    ]
    version = next(c for c in doc["checks"] if c["name"] == "rocm_version")
    assert version["saw"].startswith("ROCm 10.0.0, as provisioned (known-good 10.0.0"), version
    assert any("Core SDK line, /opt/rocm/core-10.0 selected" in e for e in version["evidence"])
