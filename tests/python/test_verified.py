"""``rocmlab verified``: smoke reports that passed on real hardware become runs of the verified
file; every other report is refused with its reason; the README's table is made from the file.

The reports are the real smoke report of tests/fixtures/fleet (PROVENANCE.md there) as
fleet_testutil derives it, with a ROCm GPU's fields in the formats real runs print, as schema 3:
its ``system`` is what rocmlab.smoke.system reads of the doctor's radeon-healthy case (checked
below), whose /dev/kfd is made a character device (a link to /dev/null: git keeps no device
nodes). Nothing here ran on a GPU: these reports stand in for one that did.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from doctor_fixtures import build
from fleet_testutil import fleet_report, real_report, schema2, smoke_report
from rocmlab_testutil import REPO

from rocmlab.cli import main
from rocmlab.common import support_catalog
from rocmlab.common.errors import ExitCode
from rocmlab.fleet.bounded import MAX_BYTES
from rocmlab.fleet.verified import (
    NO_RUN,
    catalog_rows,
    cell,
    document,
    load_runs,
    readme_table,
)
from rocmlab.smoke.report import REPORT_SCHEMA, SCHEMA_VERSION, new_report
from rocmlab.smoke.system import host_system

# What host_system reads of the radeon-healthy case with /dev/kfd a character device.
SYSTEM = {
    "os": "ubuntu 24.04",
    "os_name": "Ubuntu 24.04.2 LTS",
    "kernel": "6.11.0-19-generic",
    "rocm_release": "6.4.2",
    "rocm_source": "legacy",
    "kfd": True,
    "container": None,
}


def gpu_report(host: str = "gpu1", system: dict[str, Any] | None = None, **changes: Any) -> dict:
    """A passing schema-3 report of an RX 7900 XTX on the SYSTEM machine, then ``changes``."""
    report = schema2(smoke_report(host, gpu="rx7900xtx"), doctor=None)
    report.update(schema_version=3, system=copy.deepcopy(SYSTEM if system is None else system))
    report.update(changes)
    return report


def write(reports: Path, name: str, report: dict[str, Any]) -> bytes:
    data = json.dumps(report, indent=2).encode()
    (reports / name).write_bytes(data)
    return data


def verified(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["verified", *args])
    out, err = capsys.readouterr()
    return code, out, err


# --- what the smoke report says of its machine ----------------------------------------------


def test_the_system_is_what_the_doctor_reads_of_the_machine(tmp_path: Path) -> None:
    ctx = build("radeon-healthy", tmp_path)
    # The fixture's /dev/kfd is a plain file, as on any fixture tree: not a device.
    assert host_system(ctx) == {**SYSTEM, "kfd": False}
    (tmp_path / "dev" / "kfd").unlink()
    (tmp_path / "dev" / "kfd").symlink_to("/dev/null")  # a character device
    assert host_system(ctx) == SYSTEM
    (tmp_path / "root" / "run" / "systemd").mkdir(parents=True)
    (tmp_path / "root" / "run" / "systemd" / "container").write_text("lxc\n")
    assert host_system(ctx)["container"] == "lxc"
    (tmp_path / "root" / ".dockerenv").touch()
    assert host_system(ctx)["container"] == "docker"


def test_a_new_report_is_schema_4_and_carries_the_system() -> None:
    options = {"dataset": "mnist", "data_dir": "/d", "epochs": 1, "batch_size": 128,
               "optimizer": "adam", "lr": 0.001, "momentum": 0.0, "seed": 0,
               "amp": "auto"}  # fmt: skip
    report = new_report(options, 1, SYSTEM)
    report["exit_code"] = 1
    assert SCHEMA_VERSION == 4 and report["system"] == SYSTEM
    jsonschema.validate(report, REPORT_SCHEMA)
    jsonschema.validate({**report, "system": None}, REPORT_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "system": {**SYSTEM, "kfd": "yes"}}, REPORT_SCHEMA)
    # The schema-3 stand-in is a valid report once it has schema 4's rocm_wheels.
    jsonschema.validate({**gpu_report(), "schema_version": 4, "rocm_wheels": None}, REPORT_SCHEMA)


def test_fleet_report_reads_schema_3_and_older_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "gpu1.json", gpu_report("gpu1"))
    write(tmp_path, "old.json", real_report())  # schema 1
    code, fleet, _ = fleet_report(tmp_path, "gpu1,old", capsys)
    assert code == 0 and fleet["ready"]


# --- the command ------------------------------------------------------------------------------


def test_a_real_hardware_run_is_recorded_once_with_its_reports_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    data = write(reports, "gpu1.json", gpu_report())
    (reports / "fleet.json").write_text("{}")  # fleet-report's output: not a smoke report
    (reports / "gpu1.trace.json").write_text("[]")  # a profile trace: not one either
    target = tmp_path / "verified.json"
    code, out, _ = verified(capsys, str(reports), "--add-to", str(target))
    assert code == 0, out
    said = "gpu1.json  run: ubuntu 24.04, ROCm legacy 6.4.2, gfx1100 (AMD Radeon RX 7900 XTX)"
    assert said in out
    runs = load_runs(target.read_bytes())
    assert runs == [
        {
            **{key: SYSTEM[key] for key in ("os", "os_name", "kernel", "rocm_release")},
            "rocm_source": "legacy",
            "gfx_arch": "gfx1100",
            "gpu": "AMD Radeon RX 7900 XTX",
            "gpus": 1,
            "created": real_report()["created"],
            "rocmlab_version": "0.1.0",
            "torch_version": "2.9.1+rocm6.3",
            "model": "mlp",
            "report_sha256": hashlib.sha256(data).hexdigest(),
        }
    ]
    assert "gpu1" not in target.read_text()  # no host name is kept
    before = target.read_bytes()
    code, out, _ = verified(capsys, str(reports), "--add-to", str(target))
    assert code == 0 and "gpu1.json  already recorded:" in out
    assert target.read_bytes() == before
    code, out, _ = verified(capsys, str(reports))  # without --add-to: said, nothing written
    assert code == 0 and "gpu1.json  run:" in out
    assert sorted(os.listdir(tmp_path)) == ["reports", "verified.json"]


def _sparse(path: Path) -> None:
    with path.open("wb") as out:
        out.truncate(MAX_BYTES + 1)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link(path: Path) -> None:
    target = path.with_name("elsewhere")
    target.mkdir()
    write(target, "real.json", gpu_report())
    path.symlink_to(target / "real.json")


# name -> (the report, or what makes the file), the reason its line gives.
REFUSED = {
    "cpu": (
        {**copy.deepcopy(real_report()), "schema_version": 3, "doctor": None, "model": "mlp",
         "techniques": [], "amp_speedup": None, "profile": None,
         "system": {**SYSTEM, "kfd": False, "rocm_release": None, "rocm_source": None}},
        "no /dev/kfd on the machine (the amdgpu driver's compute device): a fixture or "
        "container host, not real hardware",
    ),
    "container": (gpu_report(system={**SYSTEM, "container": "docker"}),
                  "ran in a container (docker): not a machine of its own"),
    "old": (schema2(smoke_report("old", gpu="mi210"), doctor=None),
            "schema_version 2: the report does not say what machine it ran on"),
    "failed": (gpu_report(passed=False, exit_code=3, error="data missing"),
               "the run did not pass (exit_code 3: data missing)"),
    "cpu-torch": (gpu_report(backend="cpu", gfx_arch=None),
                  "backend cpu: the run was not on an AMD GPU through ROCm"),
    "no-gfx": (gpu_report(gfx_arch=None), "gfx_arch None: torch named no AMD GPU architecture"),
    "no-os": (gpu_report(system={**SYSTEM, "os": None}), "system.os is null: the OS it ran on"),
    "system-null": (gpu_report(system=None) | {"system": None}, "'system' is null"),
    "bad-system": (gpu_report(system={**SYSTEM, "kfd": "yes"}),
                   "'system.kfd' is string 'yes', expected boolean"),
    "long-name": (gpu_report(device_name="X" * 300),
                  "'device_name' is 300 characters: longer than any value a run keeps"),
    "contradicting": (gpu_report(test_accuracy=0.5),
                      "its test_accuracy 0.5 is below its own gate, min_accuracy 0.94: the report "
                      "contradicts itself"),
    "bad-json": ('{"schema_version": 3, "passed": tr', "not valid JSON: Expecting value"),
    "huge": (_sparse, "larger than any record (4194304 bytes at most)"),
    "fifo": (_fifo, "a FIFO (named pipe), not a regular file: not read"),
    "link": (_link, "a symbolic link, not followed"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(REFUSED))
def test_every_other_report_is_refused_with_its_reason(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    write(reports, "gpu1.json", gpu_report())
    made, reason = REFUSED[name]
    path = reports / f"{name}.json"
    if callable(made):
        made(path)
    elif isinstance(made, str):
        path.write_text(made)
    else:
        write(reports, path.name, made)
    target = tmp_path / "verified.json"
    code, out, err = verified(capsys, str(reports), "--add-to", str(target))
    assert code == 1, out + err
    line = next(line for line in out.splitlines() if line.startswith(f"{name}.json "))
    assert "refused: " in line and reason in line, line
    assert "1 of 2 report(s) refused: not recorded" in out
    # The good report's run is still added; the refused one is not.
    assert [run["gfx_arch"] for run in load_runs(target.read_bytes())] == ["gfx1100"]


def test_a_bad_verified_file_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    write(reports, "gpu1.json", gpu_report())
    target = tmp_path / "verified.json"
    assert verified(capsys, str(reports), "--add-to", str(target))[0] == 0
    good = json.loads(target.read_text())
    run = good["runs"][0]
    for bad, said in (
        ({**good, "runs": [run, run]}, "is listed twice: one entry per run"),
        ({**good, "runs": [{**run, "host": "gpu1"}]}, "'runs[0].host' is no key of a run"),
        ({**good, "runs": [{**run, "report_sha256": "abc"}]}, "is not a SHA-256"),
        ({**good, "schema_version": 2}, "schema_version 2: this rocmlab reads schema 1"),
    ):
        text = json.dumps(bad)
        target.write_text(text)
        code, out, err = verified(capsys, str(reports), "--add-to", str(target))
        assert code == int(ExitCode.BAD_ARGUMENTS) and out == ""
        assert f"--add-to {target}: not a verified file: " in err and said in err
        assert target.read_text() == text


def test_a_file_that_cannot_be_written_exits_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import rocmlab.common.outputs

    reports = tmp_path / "reports"
    reports.mkdir()
    write(reports, "gpu1.json", gpu_report())

    def full(*_: Any, **__: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rocmlab.common.outputs, "write_atomic", full)
    code, out, err = verified(capsys, str(reports), "--add-to", str(tmp_path / "v.json"))
    assert code == int(ExitCode.NOT_WRITTEN)
    assert "gpu1.json  run:" in out and "cannot write it (No space left on device)" in err
    assert not (tmp_path / "v.json").exists()


# --- the README's table -----------------------------------------------------------------------


def test_every_catalog_row_without_a_run_says_so() -> None:
    catalog = support_catalog.shipped()
    table = readme_table([], catalog)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(catalog_rows(catalog))
    assert all(NO_RUN in row for row in rows[1:])
    assert "No run recorded yet" in table
    # Every system of the catalog has at least one row; a refused line has none.
    names = {support_catalog.platform_name(p) for p in catalog.platforms}
    assert {row.split(" | ")[0][2:] for row in rows[1:]} == names
    assert ("debian 13", "legacy") not in {(key, line) for key, line, _ in catalog_rows(catalog)}


def test_a_run_is_listed_under_its_system_and_line_and_others_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    write(reports, "gpu1.json", gpu_report())
    fedora = {**SYSTEM, "os": "fedora 41", "os_name": "Fedora Linux 41"}
    write(reports, "gpu2.json", gpu_report("gpu2", system=fedora))
    target = tmp_path / "verified.json"
    assert verified(capsys, str(reports), "--add-to", str(target))[0] == 0
    table = readme_table(load_runs(target.read_bytes()), support_catalog.shipped())
    assert (
        "| Ubuntu 24.04 | AMD's legacy packages (6.2-7.2) | 6.4.2 | gfx1100 (AMD Radeon RX 7900 "
        "XTX) | 2026-12-02 | 0.1.0 |" in table
    )
    assert f"| Ubuntu 22.04 | AMD's legacy packages (6.2-7.2) | {NO_RUN} |" in table
    assert table.splitlines()[-3] == (
        "| Fedora Linux 41 | legacy (not in the support catalog) | 6.4.2 | gfx1100 (AMD Radeon RX "
        "7900 XTX) | 2026-12-02 | 0.1.0 |"
    )
    assert "2 runs recorded" in table


def test_what_a_lab_machine_wrote_cannot_break_the_table() -> None:
    assert cell("RX | <img src=x> *b* `c`\n\x1b[31m") == (
        "RX \\| \\<img src=x\\> \\*b\\* \\`c\\`\\\\n\\\\x1b\\[31m"
    )


def test_the_repositorys_file_is_as_the_command_writes_it() -> None:
    path = REPO / "docs" / "verified.json"
    assert document(load_runs(path.read_bytes())) == path.read_text()
