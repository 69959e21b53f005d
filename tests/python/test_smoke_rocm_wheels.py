"""The smoke job's proof of a venv's ROCm from wheels (rocmlab.smoke.rocm_wheels), the doctor's
and the fleet report's view of it.

A real venv gets ``torch[device-gfx1100]`` from the ROCm wheels fixture index (built once per
session, conftest.rocm_wheels_index; the small torch stand-in), and the probe asks its real
``rocm-sdk`` (the fixture's, answering as AMD's does) and reads its distributions' metadata.
Where a test needs a command that hangs or floods its output, a stand-in ``rocm-sdk`` script
takes the fixture's place (its own scripts folder, the same venv's distributions).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from doctor_fixtures import build
from fleet_testutil import fleet_report, hosts_by_name, read_outputs, smoke_report, write_fleet
from test_rocm_wheels_fixture import FAIL_MARKER, REPO, Venv

from rocmlab.common.rocm_wheels import installed, site_packages
from rocmlab.doctor import CHECKS, run_check
from rocmlab.smoke import rocm_wheels as probe_module
from rocmlab.smoke.report import REPORT_SCHEMA, new_report
from rocmlab.smoke.rocm_wheels import ROCM_WHEELS_SCHEMA, TAIL_LINES, checks, probe

CHECK = dict(CHECKS)


def _targets(release: str) -> list[str]:
    data = json.loads((REPO / "src" / "rocmlab" / "data" / "catalog.json").read_text())
    return next(r["targets"] for r in data["releases"] if r["version"] == release)


@pytest.fixture(scope="module")
def venv(rocm_wheels_index, tmp_path_factory) -> Venv:
    """A venv with torch 2.13.0+rocm7.14.0 and its gfx1100 device packages from the index."""
    made = Venv(tmp_path_factory.mktemp("smoke-rocm") / "venv", rocm_wheels_index)
    made.install("torch[device-gfx1100]==2.13.0+rocm7.14.0")
    return made


def _probe(venv: Venv, **kwargs) -> dict:
    scripts = kwargs.pop("scripts", venv.path / "bin")
    return probe(scripts=scripts, path=site_packages(venv.path), **kwargs)


def _by_name(found) -> dict:
    return {check.name: check for check in found}


def test_the_report_carries_the_venvs_release_targets_devices_and_test(venv) -> None:
    section = _probe(venv)
    jsonschema.validate(section, ROCM_WHEELS_SCHEMA)
    assert section["rocm_sdk"] == str(venv.path / "bin" / "rocm-sdk")
    assert (section["package_version"], section["version"]) == ("7.14.0", "7.14.0")
    # rocm-sdk targets: the release's build list; the device packages: what the venv can run.
    assert section["targets"] == _targets("7.14")
    assert (section["devices"], section["torch_devices"]) == (["gfx1100"], ["gfx1100"])
    test = section["test"]
    assert test["passed"] and test["exit_code"] == 0 and not test["timed_out"]
    assert test["tail"][-1] == "OK" and len(test["tail"]) <= TAIL_LINES
    report = new_report({}, 1)
    report.update(rocm_wheels=section, exit_code=0)
    assert report["schema_version"] == 4
    found = _by_name(checks(section, "gfx1100", {}, "rocm"))
    assert found["rocm_sdk_test"].passed, found["rocm_sdk_test"].detail
    assert "ROCm 7.14.0 from wheels" in found["rocm_sdk_test"].detail
    assert found["rocm_wheels_target"].passed, found["rocm_wheels_target"].detail


def test_a_failing_rocm_sdk_test_is_a_failed_check_quoting_its_lines(venv) -> None:
    marker = venv.path / FAIL_MARKER  # the fixture's failure switch
    marker.touch()
    try:
        section = _probe(venv)
    finally:
        marker.unlink()
    test = section["test"]
    assert (test["passed"], test["exit_code"], test["timed_out"]) == (False, 1, False)
    assert test["tail"][-1] == "FAILED (failures=1)"
    check = _by_name(checks(section, "gfx1100", {}, "rocm"))["rocm_sdk_test"]
    assert not check.passed
    assert check.detail.startswith("rocm-sdk test exited 1; its last lines: ")
    assert "FAILED (failures=1)" in check.detail
    assert "rocmlab test fixture: failure requested" in check.detail


STAND_IN = """#!{python}
import os, subprocess, sys, time
if sys.argv[1] == "version":
    print("7.14.0")
elif sys.argv[1] == "targets":
    print("gfx1100;gfx90a")
else:
    child = subprocess.Popen(["sleep", "120"])
    open({pid_file!r}, "w").write(str(child.pid))
    for n in range(5000):
        print(f"line {{n}} " + "x" * 50)
    sys.stdout.flush()
    time.sleep(120)
"""


def test_a_hanging_rocm_sdk_test_is_cut_at_its_bound_with_its_last_lines(
    venv, tmp_path: Path
) -> None:
    scripts = tmp_path / "bin"
    scripts.mkdir()
    pid_file = tmp_path / "child.pid"
    command = scripts / "rocm-sdk"
    command.write_text(STAND_IN.format(python=sys.executable, pid_file=str(pid_file)))
    command.chmod(0o755)
    started = time.monotonic()
    section = _probe(venv, scripts=scripts, timeout=3.0)
    assert time.monotonic() - started < 60
    assert section["targets"] == ["gfx1100", "gfx90a"]
    test = section["test"]
    assert (test["passed"], test["exit_code"], test["timed_out"]) == (False, None, True)
    assert test["truncated"] and len(test["tail"]) == TAIL_LINES
    assert test["tail"][-1] == "line 4999 " + "x" * 50
    check = _by_name(checks(section, "gfx1100", {}, "rocm"))["rocm_sdk_test"]
    assert not check.passed and "did not finish within 3 s (stopped)" in check.detail
    assert "line 4999" in check.detail and "line 4979 " not in check.detail
    # The command's children went with it (its own session, killed together).
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"rocm-sdk test's child {child} outlived the timeout")


def test_a_gpu_without_its_device_package_fails_naming_the_extra(venv) -> None:
    section = _probe(venv)
    check = _by_name(checks(section, "gfx90a:sramecc+:xnack-", {}, "rocm"))["rocm_wheels_target"]
    assert not check.passed
    assert "the GPU runs gfx90a" in check.detail
    assert "rocm-sdk-device-gfx90a, amd-torch-device-gfx90a" in check.detail
    assert "pip install 'torch[device-gfx90a]'" in check.detail
    assert "pip install 'rocm[device-gfx90a]'" in check.detail


def test_the_target_that_counts_is_the_overridden_one(venv) -> None:
    section = _probe(venv)
    # An RX 6700 XT (gfx1031) run as gfx1100 by HSA_OVERRIDE_GFX_VERSION: the venv has gfx1100.
    override = {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
    assert _by_name(checks(section, "gfx1031", override, "rocm"))["rocm_wheels_target"].passed
    # A gfx1100 card told to load gfx1030's code needs gfx1030's device package.
    wrong = {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    check = _by_name(checks(section, "gfx1100", wrong, "rocm"))["rocm_wheels_target"]
    assert not check.passed and "device-gfx1030" in check.detail


def test_a_cpu_run_skips_the_target_check_with_its_reason(venv) -> None:
    check = _by_name(checks(_probe(venv), None, {}, "cpu"))["rocm_wheels_target"]
    assert check.passed and check.detail.startswith("skipped: a CPU run has no GPU target")


def test_without_rocm_wheels_the_section_is_null_and_nothing_is_checked(tmp_path: Path) -> None:
    assert probe(scripts=tmp_path, path=[str(tmp_path)]) is None
    assert checks(None, "gfx1100", {}, "rocm") == []
    # This interpreter's venv (the test toolchain's) has no ROCm wheels.
    assert probe_module.probe() is None


def test_the_doctor_takes_wheels_for_rocm_and_reports_mixing(venv, tmp_path: Path) -> None:
    wheels = lambda: installed(site_packages(venv.path))  # noqa: E731
    ctx = build("radeon-healthy", tmp_path / "none")
    ctx.wheels_probe = wheels
    (ctx.root / "opt" / "rocm" / ".info" / "version").unlink()
    (ctx.root / "var" / "lib" / "dpkg" / "status").write_text("")
    result = run_check("rocm_release", CHECK["rocm_release"], ctx)
    assert result.status == "pass", result.saw
    assert result.saw.startswith("ROCm 7.14.0 from wheels in this venv")
    assert "this venv: rocm-sdk-core 7.14.0 (gfx1100)" in result.evidence
    mixed = build("radeon-healthy", tmp_path / "mixed")
    mixed.wheels_probe = wheels
    result = run_check("rocm_release", CHECK["rocm_release"], mixed)
    assert result.status == "pass"
    assert "AMD's ROCm 6.4.2; this venv carries ROCm 7.14.0 from wheels, another release" in (
        result.saw
    )


def _wheels_report(host: str, wheels: str | None, system: str | None) -> dict:
    report = smoke_report(host, gpu="rx7900xtx", schema_version=4, doctor=None, model="mlp",
                          techniques=[], amp_speedup=None, profile=None)  # fmt: skip
    report["system"] = {"os": "ubuntu 24.04", "os_name": "Ubuntu 24.04.3 LTS", "kernel": "6.8.0",
                        "rocm_release": system, "rocm_source": "core" if system else None,
                        "kfd": True, "container": None}  # fmt: skip
    report["rocm_wheels"] = wheels and {
        "rocm_sdk": "/opt/rocmlab/venvs/pytorch/bin/rocm-sdk", "package_version": wheels,
        "version": wheels, "targets": ["gfx1100"], "devices": ["gfx1100"],
        "torch_devices": ["gfx1100"], "test": None,
    }  # fmt: skip
    return report


def test_fleet_report_shows_the_venvs_rocm_beside_the_systems(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    reports = {
        "ws1.json": _wheels_report("ws1", "7.14.0", None),
        "ws2.json": _wheels_report("ws2", "7.14.0", "10.0.0"),
        "old.json": smoke_report("old"),  # schema 1: no system, no wheels
    }
    write_fleet(tmp_path, reports=reports)
    code, fleet, out = fleet_report(tmp_path, "ws1,ws2,old", capsys)
    assert code == 0, out
    hosts = hosts_by_name(fleet)
    assert hosts["ws1"]["versions"]["rocm_wheels"] == "7.14.0"
    assert hosts["ws1"]["versions"]["rocm"] is None
    assert (hosts["ws2"]["versions"]["rocm"], hosts["ws2"]["versions"]["rocm_wheels"]) == (
        "10.0.0",
        "7.14.0",
    )
    assert hosts["old"]["versions"]["rocm_wheels"] is None and hosts["old"]["ready"]
    lines = out.splitlines()
    assert "ROCM (SYSTEM, VENV)" in lines[0]
    assert "\u2014, venv 7.14.0" in next(line for line in lines if line.startswith("ws1 "))
    assert "10.0.0, venv 7.14.0" in next(line for line in lines if line.startswith("ws2 "))
    _, page, _ = read_outputs(tmp_path)
    assert "<b>ROCm</b> 10.0.0</div><div><b>ROCm wheels</b> 7.14.0</div>" in page


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"package_version": 7.14}, "'rocm_wheels.package_version' is number 7.14, expected"),
        ({"package_version": "7" * 65}, "'rocm_wheels.package_version' is 65 characters"),
    ],
)
def test_fleet_report_refuses_a_malformed_wheels_section(
    change: dict, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    report = _wheels_report("ws1", "7.14.0", None)
    report["rocm_wheels"].update(copy.deepcopy(change))
    write_fleet(tmp_path, reports={"ws1.json": report})
    code, fleet, _ = fleet_report(tmp_path, "ws1", capsys)
    host = hosts_by_name(fleet)["ws1"]
    assert code == 1 and host["state"] == "unreadable" and reason in host["reason"]


def test_the_report_schema_describes_the_section() -> None:
    assert REPORT_SCHEMA["properties"]["rocm_wheels"] is ROCM_WHEELS_SCHEMA
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"package_version": "7.14.0"}, ROCM_WHEELS_SCHEMA)


def test_the_smoke_job_in_a_venv_with_rocm_wheels_reports_and_fails_on_rocm_sdk_test(
    rocm_wheels_index, real_data, tmp_path: Path
) -> None:
    """``rocmlab smoke`` run by a venv's own interpreter: ROCm wheels from the index, and this
    toolchain's CPU torch and this checkout's rocmlab through a .pth file (no torch of the
    index's: its stand-in cannot train)."""
    import torch

    made = Venv(tmp_path / "venv", rocm_wheels_index)
    made.install("rocm[libraries,device-gfx1100]==7.14.0")
    (site,) = site_packages(made.path)
    toolchain = Path(torch.__file__).resolve().parents[1]
    Path(site, "rocmlab-test.pth").write_text(f"{REPO / 'src'}\n{toolchain}\n")
    (made.path / FAIL_MARKER).touch()  # the fixture's failure switch
    out = tmp_path / "smoke.json"
    smoke = ["smoke", "--data", str(real_data["mnist"]), "--device", "cpu", "--epochs", "1"]
    done = made.run(str(made.path / "bin" / "python"), "-m", "rocmlab", *smoke, "--json", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(out.read_text())
    jsonschema.validate(report, REPORT_SCHEMA)
    section = report["rocm_wheels"]
    assert (section["version"], section["devices"]) == ("7.14.0", ["gfx1100"])
    assert section["rocm_sdk"] == str(made.path / "bin" / "rocm-sdk")
    failed = [c["name"] for c in report["checks"] if not c["passed"]]
    assert failed == ["rocm_sdk_test"] and report["passed"] is False
    assert "[FAIL] rocm_sdk_test: rocm-sdk test exited 1; its last lines:" in done.stdout
    target = next(c for c in report["checks"] if c["name"] == "rocm_wheels_target")
    assert target["detail"].startswith("skipped: a CPU run")
