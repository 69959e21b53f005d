"""The kernel guard: plan() over the facts of tests/fixtures/kernel-guard (a Debian 12 host with
amdgpu-dkms, running 6.1.0-28, 6.1.0-29 installed beside it), and the module
rocmlab_kernel_guard reading that tree. The reading of ``dkms status`` and the ordering of
kernel releases must agree with the doctor's (src/rocmlab/doctor/checks_kernel.py), which
cannot import the collection."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import kernel_guard
from ansible_modules import load_module, run_module
from rocmlab_testutil import REPO

from rocmlab.doctor import checks_kernel
from rocmlab.doctor.context import Context, recorded_runner

FIXTURE = REPO / "tests" / "fixtures" / "kernel-guard"
RUNNING, NEWEST, OLDER = "6.1.0-28-amd64", "6.1.0-29-amd64", "6.1.0-25-amd64"
META_ALL = ["linux-headers-amd64", "linux-image-amd64"]


def dkms(name: str) -> dict[str, str]:
    return kernel_guard.parse_dkms_status((FIXTURE / name / "dkms-status.txt").read_text())


def fixture_facts(**override) -> dict:
    """The fixture host's facts as the module gathers them, with OVERRIDE applied."""
    status = (FIXTURE / "root" / "var" / "lib" / "dpkg" / "status").read_text()
    facts = {
        "running": RUNNING,
        "kernels": [OLDER, RUNNING, NEWEST],
        "packages": kernel_guard.kernel_packages(kernel_guard.parse_dpkg_status(status)),
        "driver_installed": True,
        "dkms": dkms("commands-built"),
        "headers": [RUNNING, NEWEST],
        "boot_free": 500 << 20,
        "boot_needed": 80 << 20,
        "secure_boot": False,
        "signing_configured": False,
        "mok_enrolled": None,
        "ours": [],
        "reboot_required": False,
        "reboot_packages": [],
        "allow_reboot": False,
    }
    return {**facts, **override}


# ---------------------------------------------------------------- reading dpkg and dkms


def test_dpkg_status_gives_installed_packages_and_their_selection() -> None:
    facts = fixture_facts()
    packages = facts["packages"]
    assert packages["images"] == {
        OLDER: "linux-image-6.1.0-25-amd64",
        RUNNING: "linux-image-6.1.0-28-amd64",
        NEWEST: "linux-image-6.1.0-29-amd64",
    }  # 6.1.0-21 (config-files) is not installed
    assert packages["meta"] == META_ALL  # linux-libc-dev, linux-base are no kernel
    assert packages["held"] == ["linux-headers-amd64"]


@pytest.mark.parametrize(
    ("name", "meta", "release"),
    [
        ("linux-generic", True, None),
        ("linux-image-generic-hwe-24.04", True, None),
        ("linux-generic-hwe-24.04", True, None),
        ("linux-headers-generic", True, None),
        ("linux-image-cloud-amd64", True, None),
        ("linux-image-6.8.0-31-generic", False, "6.8.0-31-generic"),
        ("linux-image-unsigned-6.12.3-061203-generic", False, "6.12.3-061203-generic"),
        ("linux-image-6.12.12+bpo-amd64", False, "6.12.12+bpo-amd64"),
        ("linux-image-6.1.0-28-amd64-unsigned", False, "6.1.0-28-amd64"),
        ("linux-image-6.1.0-28-amd64-dbg", False, None),
        ("linux-headers-6.8.0-31-generic", False, None),
        ("linux-modules-extra-6.8.0-31-generic", False, None),
        ("linux-libc-dev", False, None),
        ("linux-firmware", False, None),
        ("linux-base", False, None),
    ],
)
def test_kernel_packages_are_told_apart(name, meta, release) -> None:
    found = kernel_guard.kernel_packages({name: "install"})
    assert (name in found["meta"]) is meta
    assert found["images"] == ({release: name} if release else {})


@pytest.mark.parametrize(
    "folder",
    [
        "kernel-guard/commands-built",
        "kernel-guard/commands-newest-unbuilt",
        "doctor/dkms-next-kernel-built/commands",
        "doctor/instinct-healthy/commands",
        "doctor/secure-boot-unsigned/commands",
    ],
)
def test_dkms_status_is_read_as_the_doctor_reads_it(folder) -> None:
    path = REPO / "tests" / "fixtures" / folder
    ctx = Context(root=FIXTURE / "root", run=recorded_runner(path))
    doctor_states, _lines = checks_kernel.dkms_amdgpu(ctx)
    assert kernel_guard.parse_dkms_status((path / "dkms-status.txt").read_text()) == doctor_states
    assert doctor_states  # each fixture names at least one kernel


def test_older_dkms_lines_are_read_too() -> None:
    line = "amdgpu, 6.14.14-2222715.24.04, 6.14.0-32-generic, x86_64: installed\n"
    assert kernel_guard.parse_dkms_status(line) == {"6.14.0-32-generic": "installed"}
    assert kernel_guard.parse_dkms_status("amdgpu/6.10.5, 6.1.0-29-amd64, x86_64: built") == {
        "6.1.0-29-amd64": "built"
    }


@pytest.mark.parametrize(
    "releases",
    [
        ["6.14.0-9-generic", "6.14.0-33-generic"],
        ["6.1.0-28-amd64", "6.12.0-1-amd64"],
        ["6.1.0-28-amd64", "6.1.0-29-amd64"],
        ["6.8.0-31-generic", "6.11.0-19-generic", "6.12.3-061203-generic"],
    ],
)
def test_kernel_releases_are_ordered_as_the_doctor_orders_them(releases) -> None:
    for older, newer in itertools.pairwise(releases):
        assert kernel_guard.release_order(older) < kernel_guard.release_order(newer)
        assert kernel_guard.release_order(older) == checks_kernel.release_order(older)


# ---------------------------------------------------------------- plan()


def test_built_for_every_kernel_that_could_boot_next_holds_nothing() -> None:
    decided = kernel_guard.plan(fixture_facts())
    assert decided["causes"] == [] and decided["notes"] == []
    assert decided["hold"] == [] and decided["unhold"] == [] and decided["record"] == []
    assert decided["next"] == [RUNNING, NEWEST]  # 6.1.0-25 is older: GRUB does not boot it


def test_amdgpu_missing_for_the_newest_kernel_holds_the_meta_packages() -> None:
    decided = kernel_guard.plan(fixture_facts(dkms=dkms("commands-newest-unbuilt")))
    (cause,) = decided["causes"]
    assert cause.startswith(f"amdgpu is not installed by DKMS for kernel {NEWEST} (not built)")
    assert f"`sudo dkms autoinstall -k {NEWEST}`" in cause
    # The admin's own hold stays the admin's: rocmlab holds (and records) only what it held.
    assert decided["hold"] == ["linux-image-amd64"]
    assert decided["record"] == ["linux-image-amd64"]
    assert decided["unhold"] == []


def test_a_module_only_built_is_not_installed() -> None:
    states = {RUNNING: "installed", NEWEST: "built"}
    (cause,) = kernel_guard.plan(fixture_facts(dkms=states))["causes"]
    assert f"for kernel {NEWEST} (built)" in cause


def test_the_newest_kernel_without_headers_names_the_package_to_install() -> None:
    decided = kernel_guard.plan(fixture_facts(headers=[RUNNING], dkms={RUNNING: "installed"}))
    (cause,) = decided["causes"]
    assert cause.startswith(f"kernel {NEWEST} has no headers (linux-headers-{NEWEST})")
    assert cause.endswith(
        f"fix: `sudo apt install linux-headers-{NEWEST}` then `sudo dkms autoinstall -k {NEWEST}`"
    )
    assert decided["hold"] == ["linux-image-amd64"]


def test_an_older_kernel_without_headers_or_module_does_not_count() -> None:
    decided = kernel_guard.plan(fixture_facts(headers=[RUNNING, NEWEST]))
    assert OLDER not in decided["next"] and decided["causes"] == []


def test_before_amdgpu_dkms_is_installed_only_headers_are_needed() -> None:
    assert kernel_guard.plan(fixture_facts(driver_installed=False, dkms=None))["causes"] == []
    (cause,) = kernel_guard.plan(
        fixture_facts(driver_installed=False, dkms=None, headers=[RUNNING])
    )["causes"]
    assert f"kernel {NEWEST} has no headers" in cause


def test_amdgpu_dkms_without_the_dkms_command() -> None:
    (cause,) = kernel_guard.plan(fixture_facts(dkms=None))["causes"]
    assert "the dkms command is missing" in cause
    assert "`sudo apt install --reinstall amdgpu-dkms dkms`" in cause


def test_a_boot_too_small_for_another_initramfs() -> None:
    decided = kernel_guard.plan(fixture_facts(boot_free=60 << 20, boot_needed=80 << 20))
    (cause,) = decided["causes"]
    assert cause.startswith("/boot has 60 MiB free and another kernel needs about 80 MiB")
    assert "`sudo apt autoremove --purge`" in cause
    assert decided["hold"] == ["linux-image-amd64"]


def test_no_boot_is_not_judged() -> None:
    assert kernel_guard.plan(fixture_facts(boot_free=None, boot_needed=None))["causes"] == []


@pytest.mark.parametrize(
    ("signing", "enrolled", "expected"),
    [
        (False, None, "DKMS module signing is not configured"),
        (True, False, "(/var/lib/dkms/mok.pub) is not enrolled"),
        (False, False, "(/var/lib/dkms/mok.pub) is not enrolled"),
        (True, None, None),
        (True, True, None),
        (False, True, None),  # the key is enrolled: signing works whatever the setting says
    ],
)
def test_secure_boot_needs_an_enrolled_signing_key(signing, enrolled, expected) -> None:
    decided = kernel_guard.plan(
        fixture_facts(secure_boot=True, signing_configured=signing, mok_enrolled=enrolled)
    )
    if expected is None:
        assert decided["causes"] == [] and decided["hold"] == []
    else:
        (cause,) = decided["causes"]
        assert cause.startswith("Secure Boot is on") and expected in cause
        assert "`sudo mokutil --import /var/lib/dkms/mok.pub`" in cause
        assert decided["hold"] == ["linux-image-amd64"]


def test_secure_boot_off_or_absent_needs_no_key() -> None:
    for state in (False, None):
        assert kernel_guard.plan(fixture_facts(secure_boot=state))["causes"] == []


def held(facts: dict, names: list[str]) -> dict:
    """FACTS after dpkg_selections held NAMES."""
    packages = facts["packages"]
    return {**facts, "packages": {**packages, "held": sorted({*packages["held"], *names})}}


def test_holding_again_changes_nothing() -> None:
    facts = fixture_facts(dkms=dkms("commands-newest-unbuilt"))
    first = kernel_guard.plan(facts)
    second = kernel_guard.plan({**held(facts, first["hold"]), "ours": first["record"]})
    assert second["hold"] == [] and second["unhold"] == []
    assert second["record"] == first["record"] == ["linux-image-amd64"]


def test_once_fixed_only_rocmlabs_holds_are_released() -> None:
    facts = fixture_facts(dkms=dkms("commands-newest-unbuilt"))
    first = kernel_guard.plan(facts)
    fixed = {**held(fixture_facts(), first["hold"]), "ours": first["record"]}
    decided = kernel_guard.plan(fixed)
    assert decided["causes"] == []
    assert decided["unhold"] == ["linux-image-amd64"]  # linux-headers-amd64 is the admin's
    assert decided["record"] == []
    # An admin who released rocmlab's hold meanwhile: nothing left to release.
    assert kernel_guard.plan({**fixture_facts(), "ours": ["linux-image-amd64"]})["unhold"] == []


def test_no_meta_package_to_hold_is_said() -> None:
    facts = fixture_facts(dkms=dkms("commands-newest-unbuilt"))
    facts["packages"] = {**facts["packages"], "meta": [], "held": []}
    decided = kernel_guard.plan(facts)
    assert decided["hold"] == [] and len(decided["causes"]) == 1
    assert decided["notes"] and "nothing to hold" in decided["notes"][0]


@pytest.mark.parametrize(
    ("required", "allow", "unsafe", "reboot", "said"),
    [
        (False, True, False, False, "/var/run/reboot-required does not exist"),
        (False, False, False, False, "/var/run/reboot-required does not exist"),
        (True, False, False, False, "rocm_packages_allow_reboot is false"),
        (True, True, False, True, "rebooting: /var/run/reboot-required asks for it (amdgpu-dkms)"),
        (True, True, True, False, "not rebooting although /var/run/reboot-required asks"),
        (True, False, True, False, "running 6.1.0-28-amd64 is kept"),
    ],
)
def test_reboot_only_when_asked_for_allowed_and_safe(required, allow, unsafe, reboot, said):
    facts = fixture_facts(
        reboot_required=required,
        reboot_packages=["amdgpu-dkms"],
        allow_reboot=allow,
        dkms=dkms("commands-newest-unbuilt" if unsafe else "commands-built"),
    )
    decided = kernel_guard.plan(facts)
    assert decided["reboot"] is reboot
    assert said in decided["reboot_why"]


# ---------------------------------------------------------------- the module on fixture trees

GUARD = load_module("rocmlab_kernel_guard")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    target = tmp_path / "root"
    shutil.copytree(FIXTURE / "root", target, symlinks=True)
    return target


def guard(root: Path, capsys, monkeypatch, commands: str = "commands-built", **args) -> dict:
    args = {
        "root": str(root),
        "commands_from": str(FIXTURE / commands),
        "record": str(root.parent / "kernel-hold.json"),
        **args,
    }
    return run_module(GUARD, args, capsys, monkeypatch)


def test_module_on_the_healthy_tree(root, capsys, monkeypatch) -> None:
    result = guard(root, capsys, monkeypatch)
    assert not result.get("failed") and result["changed"] is False, result
    assert result["running"] == RUNNING and result["next"] == [RUNNING, NEWEST]
    assert result["causes"] == [] and result["hold"] == [] and result["reboot"] is False
    assert result["boot_needed"] == max(
        p.stat().st_size for p in (root / "boot").glob("initrd.img-*")
    ) + max(p.stat().st_size for p in (root / "boot").glob("vmlinuz-*"))


def test_module_holds_when_the_newest_kernel_lacks_amdgpu(root, capsys, monkeypatch) -> None:
    result = guard(root, capsys, monkeypatch, "commands-newest-unbuilt")
    assert result["hold"] == ["linux-image-amd64"] and result["held_by_rocmlab"] == result["hold"]
    assert f"for kernel {NEWEST} (not built)" in result["causes"][0]


def test_module_releases_what_its_record_says_it_held(root, capsys, monkeypatch) -> None:
    status = root / "var" / "lib" / "dpkg" / "status"
    status.write_text(
        status.read_text().replace(
            "Package: linux-image-amd64\nStatus: install",
            "Package: linux-image-amd64\nStatus: hold",
        )
    )
    (root.parent / "kernel-hold.json").write_text('{"held": ["linux-image-amd64", "bad name"]}')
    result = guard(root, capsys, monkeypatch)
    assert result["unhold"] == ["linux-image-amd64"] and result["held_by_rocmlab"] == []


def test_module_sees_the_newest_kernels_headers_missing(root, capsys, monkeypatch) -> None:
    shutil.rmtree(root / "lib" / "modules" / NEWEST / "build")
    result = guard(root, capsys, monkeypatch)
    assert f"kernel {NEWEST} has no headers" in result["causes"][0]


def test_module_sees_a_full_boot(root, capsys, monkeypatch) -> None:
    info = os.statvfs(root / "boot")
    os.truncate(root / "boot" / f"initrd.img-{NEWEST}", info.f_bavail * info.f_frsize + (1 << 30))
    result = guard(root, capsys, monkeypatch)
    assert result["boot_needed"] > result["boot_free"]
    assert result["causes"][0].startswith("/boot has ") and result["hold"] == ["linux-image-amd64"]


def test_module_reads_secure_boot_and_the_mok_answer(root, capsys, monkeypatch) -> None:
    var = root / "sys" / "firmware" / "efi" / "efivars"
    var.mkdir(parents=True)
    (var / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c").write_bytes(b"\x06\0\0\0\x01")
    result = guard(root, capsys, monkeypatch, "commands-unenrolled", signing_configured=True)
    (cause,) = result["causes"]
    assert "(/var/lib/dkms/mok.pub) is not enrolled" in cause
    result = guard(root, capsys, monkeypatch, "commands-built", signing_configured=True)
    assert result["causes"] == []  # no recorded mokutil: the setting is believed
    result = guard(root, capsys, monkeypatch, "commands-built")
    assert "DKMS module signing is not configured" in result["causes"][0]


def test_module_reboots_only_when_asked_and_allowed(root, capsys, monkeypatch) -> None:
    run = root / "var" / "run"
    run.mkdir(parents=True)
    (run / "reboot-required").write_text("*** System restart required ***\n")
    (run / "reboot-required.pkgs").write_text("linux-image-6.1.0-29-amd64\n\x1b[2Jbad\n")
    result = guard(root, capsys, monkeypatch, allow_reboot=True)
    assert result["reboot"] is True
    assert result["reboot_why"] == (
        "rebooting: /var/run/reboot-required asks for it (linux-image-6.1.0-29-amd64)"
    )
    assert guard(root, capsys, monkeypatch)["reboot"] is False
    unsafe = guard(root, capsys, monkeypatch, "commands-newest-unbuilt", allow_reboot=True)
    assert unsafe["reboot"] is False and "running 6.1.0-28-amd64 is kept" in unsafe["reboot_why"]


def test_module_refuses_a_fifo_for_dpkgs_status(root, capsys, monkeypatch) -> None:
    status = root / "var" / "lib" / "dpkg" / "status"
    status.unlink()
    os.mkfifo(status)
    result = guard(root, capsys, monkeypatch)
    assert result["failed"] and f"{status} is not a regular file" in result["msg"]


def test_module_without_a_running_kernel_fails_clearly(root, capsys, monkeypatch) -> None:
    (root / "proc" / "sys" / "kernel" / "osrelease").write_text("\n")
    result = guard(root, capsys, monkeypatch)
    assert result["failed"] and "cannot read the running kernel's release" in result["msg"]
