"""The smoke job ran on the host as the researcher and its report reached the controller."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
from playbook_runs import changed, play, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")
REPORTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"
DATA = "/var/lib/rocmlab/datasets/mnist"
VENV = "/opt/rocmlab/venvs/pytorch"
PLAYBOOKS = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "playbooks"


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
