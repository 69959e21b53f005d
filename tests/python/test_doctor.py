"""``rocmlab doctor`` on the fixture machines of tests/fixtures/doctor/: each check's PASS, WARN
and FAIL, a crashing check reported as ``error``, the exit codes and the JSON schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from doctor_fixtures import FIXTURES, build
from rocmlab_testutil import REPO

from rocmlab.doctor import CHECKS, run_check, run_checks
from rocmlab.doctor.context import Context, KernelLog, UserInfo, probe_torch
from rocmlab.doctor.model import DOCTOR_SCHEMA, ERROR, FAIL, PASS, SKIP, WARN, Result

CHECK = dict(CHECKS)
LOGS = FIXTURES / "doctor" / "kernel-logs"
SYSFS = FIXTURES / "sysfs"


def check(name: str, ctx: Context) -> Result:
    return run_check(name, CHECK[name], ctx)


@pytest.fixture
def case(tmp_path: Path):
    """case("name", **overrides) -> the Context of that fixture machine."""
    counter = iter(range(100))

    def make(name: str, **override) -> Context:
        return build(name, tmp_path / f"{name}-{next(counter)}", **override)

    return make


# ---------------------------------------------------------------- the healthy machines


def test_a_healthy_radeon_box_passes_every_check(case) -> None:
    results = run_checks(case("radeon-healthy"))
    statuses = {r.name: r.status for r in results}
    assert statuses == {name: PASS for name, _ in CHECKS} | {
        "dkms_headers": SKIP,
        "dkms_next_kernel": SKIP,
    }


def test_a_healthy_instinct_box_with_dkms_and_secure_boot(case) -> None:
    ctx = case("instinct-healthy", kernel_log="doctor/kernel-logs/radeon-7900xtx-boot.log")
    statuses = {r.name: r.status for r in run_checks(ctx)}
    for name in ("gpu_count", "secure_boot", "dkms_headers", "dkms_next_kernel",
                 "kernel_support", "pcie_link"):  # fmt: skip
        assert statuses[name] == PASS, name
    assert FAIL not in statuses.values()


# ---------------------------------------------------------------- driver and access


def test_amdgpu_loaded(case) -> None:
    result = check("amdgpu_driver", case("radeon-healthy"))
    assert result.status == PASS and "the kernel's own amdgpu" in result.saw


def test_amdgpu_dkms_loaded_names_its_version(case) -> None:
    assert "AMD's amdgpu-dkms 6.14.14" in check("amdgpu_driver", case("instinct-healthy")).saw


def test_amdgpu_not_loaded_with_a_gpu_on_the_bus(case) -> None:
    result = check("amdgpu_driver", case("secure-boot-unsigned"))
    assert result.status == FAIL
    assert "0000:03:00.0" in result.saw and "modprobe amdgpu" in result.fix


def test_nomodeset_on_the_command_line_is_named(case) -> None:
    ctx = case("secure-boot-unsigned")
    (ctx.root / "proc" / "cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz ro quiet nomodeset\n")
    result = check("amdgpu_driver", ctx)
    assert result.status == FAIL and "nomodeset" in result.saw and "update-grub" in result.fix


def test_amdgpu_still_loading_warns(case) -> None:
    ctx = case("radeon-healthy")
    (ctx.sysfs_root / "module" / "amdgpu" / "initstate").write_text("coming\n")
    assert check("amdgpu_driver", ctx).status == WARN


def test_no_gpu_on_purpose(case) -> None:
    ctx = case("radeon-healthy", sysfs=["sysfs/no-amd-gpu"], expect_gpus=0)
    results = {r.name: r for r in run_checks(ctx)}
    assert results["amdgpu_driver"].status in (SKIP, PASS)
    assert results["gpu_count"].status == PASS


def test_amdgpu_loaded_without_a_gpu_on_the_bus_warns(case) -> None:
    ctx = case("not-in-render", sysfs=["sysfs/no-amd-gpu"])
    assert check("amdgpu_driver", ctx).status == WARN


def test_no_gpu_at_all_fails(case) -> None:
    ctx = case("secure-boot-unsigned", sysfs=["sysfs/no-amd-gpu"])
    assert check("amdgpu_driver", ctx).status == FAIL
    result = check("gpu_count", ctx)
    assert result.status == FAIL and "--expect-gpus 0" in result.fix


def test_device_nodes_with_their_group(case) -> None:
    result = check("device_nodes", case("radeon-healthy"))
    assert result.status == PASS
    assert "kfd rw-rw---- group render" in result.saw


def test_device_nodes_missing(case) -> None:
    result = check("device_nodes", case("secure-boot-unsigned"))
    assert result.status == FAIL and "/dev/kfd" in result.saw
    assert "--device=/dev/kfd" in result.fix


def test_device_nodes_only_root_can_open(case) -> None:
    ctx = case("radeon-healthy")
    os.chmod(ctx.dev("kfd"), 0o600)
    result = check("device_nodes", ctx)
    assert result.status == WARN and "user_groups_udev_rules: true" in result.fix


def test_in_render_in_this_login(case) -> None:
    result = check("gpu_groups", case("radeon-healthy"))
    assert result.status == PASS and "render" in result.saw


def test_not_in_render(case) -> None:
    result = check("gpu_groups", case("not-in-render"))
    assert result.status == FAIL
    assert "alice (uid 1000) is not in render" in result.saw
    assert "user_groups_users (role user_groups)" in result.fix
    assert "newgrp render" in result.fix


def test_added_to_render_but_must_log_in_again(case) -> None:
    result = check("gpu_groups", case("render-needs-relogin"))
    assert result.status == FAIL
    assert "was added to render in /etc/group" in result.saw
    assert result.fix.startswith("log out and in again (or `newgrp render`)")


def test_render_from_outside_etc_group_warns(case) -> None:
    user = {"name": "alice", "uid": 1000, "gid": 1000, "groups": ["alice", "render"]}
    result = check("gpu_groups", case("not-in-render", user=user))
    assert result.status == WARN and "user_groups_users" in result.fix


def test_groups_are_not_judged_as_root(case) -> None:
    assert check("gpu_groups", case("radeon-healthy", user=None)).status == SKIP


def test_gpu_count_lists_each_target(case) -> None:
    result = check("gpu_count", case("instinct-healthy"))
    assert result.status == PASS
    assert "GPU 0: 0000:01:00.0 Aldebaran [Instinct MI210] (gfx90a)" in result.saw
    assert "GPU 1: 0000:02:00.0" in result.saw


def test_fewer_gpus_than_expected_fails(case) -> None:
    result = check("gpu_count", case("instinct-healthy", expect_gpus=3))
    assert result.status == FAIL and "2 GPU(s) in the KFD topology, 3 expected" in result.saw


def test_more_gpus_than_expected_warns(case) -> None:
    assert check("gpu_count", case("instinct-healthy", expect_gpus=1)).status == WARN


def test_no_kfd_with_a_gpu_on_the_bus_fails(case) -> None:
    result = check("gpu_count", case("secure-boot-unsigned"))
    assert result.status == FAIL and "no KFD topology" in result.saw


# ---------------------------------------------------------------- gfx override and iGPUs


def test_override_needed_and_missing(case) -> None:
    result = check("gfx_override", case("override-missing"))
    assert result.status == FAIL
    assert "No compatible GFX target found" in result.saw
    assert "gfx1031" in result.saw
    assert "gfx_override_mode: auto writes HSA_OVERRIDE_GFX_VERSION=10.3.0" in result.fix


def test_override_present_and_right(case) -> None:
    env = {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    result = check("gfx_override", case("override-missing", env=env))
    assert result.status == PASS


def test_override_set_but_not_needed(case) -> None:
    result = check("gfx_override", case("override-superfluous"))
    assert result.status == WARN and "no GPU needs it" in result.saw
    assert "removes it" in result.fix


def test_override_wrong_for_the_card(case) -> None:
    env = {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    result = check("gfx_override", case("radeon-healthy", env=env))
    assert result.status == FAIL and "is wrong for" in result.saw and "gfx1100" in result.saw
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0" in result.fix


def test_one_override_for_cards_that_need_different_ones(case) -> None:
    result = check("gfx_override", case("mixed-cards"))
    assert result.status == FAIL
    assert "need different overrides (10.3.0, 11.0.0)" in result.saw
    assert "gfx_override_mode: manual" in result.fix and "ROCR_VISIBLE_DEVICES=" in result.fix


def test_hiding_one_of_the_mixed_cards_makes_the_override_right(case) -> None:
    env = {"HSA_OVERRIDE_GFX_VERSION": "10.3.0", "ROCR_VISIBLE_DEVICES": "1"}
    assert check("gfx_override", case("mixed-cards", env=env)).status == PASS


def test_an_unparsable_override_fails(case) -> None:
    result = check("gfx_override", case("radeon-healthy", env={"HSA_OVERRIDE_GFX_VERSION": "10.3"}))
    assert result.status == FAIL and "not major.minor.stepping" in result.saw


def test_the_profile_file_of_a_fresh_login_is_named(case) -> None:
    ctx = case("override-missing")
    profile = ctx.path("/etc/profile.d/rocmlab-gfx.sh")
    profile.parent.mkdir(parents=True, exist_ok=True)
    profile.write_text("export HSA_OVERRIDE_GFX_VERSION='10.3.0'\n")
    result = check("gfx_override", ctx)
    assert result.status == FAIL
    assert "/etc/profile.d/rocmlab-gfx.sh sets HSA_OVERRIDE_GFX_VERSION=10.3.0" in result.saw


def test_igpu_enumerated_first_fails(case) -> None:
    result = check("igpu_hidden", case("igpu-first"))
    assert result.status == FAIL and "device 0" in result.saw
    assert "gfx_override_hide_igpu: true" in result.fix
    assert "ROCR_VISIBLE_DEVICES=1" in result.fix


def test_igpu_hidden_by_rocr_visible_devices(case) -> None:
    env = {"HSA_OVERRIDE_GFX_VERSION": "11.0.0", "ROCR_VISIBLE_DEVICES": "1"}
    assert check("igpu_hidden", case("igpu-first", env=env)).status == PASS


def test_igpu_visible_after_the_discrete_card_warns(case) -> None:
    env = {"HSA_OVERRIDE_GFX_VERSION": "11.0.0", "ROCR_VISIBLE_DEVICES": "1,0"}
    assert check("igpu_hidden", case("igpu-first", env=env)).status == WARN


def test_an_igpu_that_cannot_compute_visible_fails(case) -> None:
    ctx = case("radeon-healthy", sysfs=["sysfs/desktop-7900xtx-raphael"])
    result = check("igpu_hidden", ctx)
    assert result.status == FAIL and "gfx1036" in result.saw and "cannot compute" in result.saw
    assert "ROCR_VISIBLE_DEVICES=0" in result.fix


def test_a_laptop_whose_only_gpu_is_the_igpu_passes(case) -> None:
    ctx = case("radeon-healthy", sysfs=["sysfs/laptop-780m"])
    assert check("igpu_hidden", ctx).status == PASS


# ---------------------------------------------------------------- ROCm, PyTorch, OpenCL


def test_amd_rocm_release(case) -> None:
    result = check("rocm_release", case("radeon-healthy"))
    assert result.status == PASS and "AMD's ROCm 6.4.2" in result.saw


def test_distribution_rocm_release(case) -> None:
    result = check("rocm_release", case("not-in-render"))
    assert result.status == PASS and "distribution's ROCm 5.2.3" in result.saw


def test_no_rocm_installed_warns(case, tmp_path: Path) -> None:
    ctx = case("radeon-healthy")
    (ctx.root / "opt" / "rocm" / ".info" / "version").unlink()
    (ctx.root / "var" / "lib" / "dpkg" / "status").write_text("")
    assert check("rocm_release", ctx).status == WARN


def test_amd_and_distribution_rocm_together_warn(case) -> None:
    ctx = case("radeon-healthy")
    status = ctx.root / "var" / "lib" / "dpkg" / "status"
    text = status.read_text().replace("1.0.0.60402-120~24.04", "5.2.3-3")
    status.write_text(text)
    result = check("rocm_release", ctx)
    assert result.status == WARN and "rocm_packages_replace_distro: true" in result.fix


def test_a_half_installed_rocm_fails(case) -> None:
    ctx = case("radeon-healthy")
    status = ctx.root / "var" / "lib" / "dpkg" / "status"
    text = status.read_text().replace("install ok installed", "install ok half-configured", 1)
    status.write_text(text)
    result = check("rocm_release", ctx)
    assert result.status == FAIL and "dpkg --configure -a" in result.fix


def test_torch_built_for_the_installed_rocm(case) -> None:
    result = check("torch_build", case("radeon-healthy"))
    assert result.status == PASS and "built for ROCm 6.4" in result.saw


def test_torch_built_for_another_rocm_warns(case) -> None:
    result = check("torch_build", case("hip-mismatch"))
    assert result.status == WARN
    assert "built for ROCm 6.2" in result.saw and "host has ROCm 6.4" in result.saw
    assert 'pytorch_rocm_rocm_version: "6.4"' in result.fix


def test_a_cpu_build_of_torch_fails(case) -> None:
    """The real torch of this test run (a CPU wheel) through the doctor's own probe."""
    ctx = case("radeon-healthy")
    ctx.torch_probe = probe_torch
    result = check("torch_build", ctx)
    assert result.status == FAIL and "CPU-only build" in result.saw
    assert "PyTorch sees no HIP device" in result.saw
    assert "pytorch_rocm" in result.fix
    assert check("torch_gpu", ctx).status == SKIP


def test_a_cpu_build_is_right_where_no_gpu_is_expected(case) -> None:
    ctx = case("radeon-healthy", expect_gpus=0)
    ctx.torch_probe = probe_torch
    assert check("torch_build", ctx).status == PASS


def test_torch_absent_is_skipped_with_the_reason(case) -> None:
    result = check("torch_build", case("not-in-render"))
    assert result.status == SKIP and "/opt/rocmlab/venvs/pytorch/bin/rocmlab" in result.saw


def test_torch_has_no_code_for_the_card(case) -> None:
    result = check("torch_gpu", case("override-missing"))
    assert result.status == FAIL and "no code for GPU 0 (gfx1031)" in result.saw
    assert "hipErrorNoBinaryForGpu" in result.saw


def test_the_override_gives_torch_a_target_it_has(case) -> None:
    env = {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    result = check("torch_gpu", case("override-missing", env=env))
    assert result.status == PASS and "gfx1030" in result.saw


def test_torch_sees_no_hip_device(case) -> None:
    spec = {
        "version": "2.8.0.dev20250529+rocm6.4",
        "hip": "6.4.43482-0f2d60242",
        "cuda_available": False,
    }
    result = check("torch_gpu", case("radeon-healthy", torch=spec))
    assert result.status == FAIL and "sees no HIP device" in result.saw


def test_torch_sees_fewer_devices_than_rocm_warns(case) -> None:
    ctx = case("radeon-healthy")
    info = ctx.torch()
    info.device_count = 2
    assert check("torch_gpu", ctx).status == WARN


def test_opencl_lists_the_gpu(case) -> None:
    result = check("opencl", case("radeon-healthy"))
    assert result.status == PASS
    assert " `-- Device #0: gfx1100" in result.evidence


def test_no_opencl_icd_warns(case) -> None:
    result = check("opencl", case("not-in-render"))
    assert result.status == WARN and "clinfo prints nothing" in result.saw
    assert "rocm-opencl-runtime" in result.fix


def test_icd_present_but_clinfo_lists_nothing_fails(case) -> None:
    result = check("opencl", case("opencl-no-device"))
    assert result.status == FAIL and "lists no platform" in result.saw


def test_icd_present_but_no_clinfo_warns(case) -> None:
    ctx = case("radeon-healthy", commands="doctor/not-in-render/commands")
    result = check("opencl", ctx)
    assert result.status == WARN and "apt install clinfo" in result.fix


# ---------------------------------------------------------------- the kernel


def with_log(ctx: Context, name: str) -> Context:
    ctx.kernel_log = KernelLog((LOGS / name).read_text(), name)
    return ctx


def test_a_clean_kernel_log_passes(case) -> None:
    result = check("kernel_log", case("radeon-healthy"))
    assert result.status == PASS and "no amdgpu failure" in result.saw


@pytest.mark.parametrize(
    ("log", "kinds", "quoted"),
    [
        (
            "psp-hw-init-failed.log",
            ("IP block init failed", "PSP failure"),
            "[drm:psp_hw_init [amdgpu]] *ERROR* PSP firmware loading failed",
        ),
        (
            "firmware-missing.log",
            ("firmware missing", "GPU init failed"),
            "Direct firmware load for amdgpu/psp_13_0_8_toc.bin failed with error -2",
        ),
    ],
)
def test_amdgpu_init_failures_fail_with_the_lines_quoted(case, log, kinds, quoted) -> None:
    result = check("kernel_log", with_log(case("radeon-healthy"), log))
    assert result.status == FAIL
    for kind in kinds:
        assert kind in result.saw
    assert any(quoted in line for line in result.evidence)
    assert "firmware" in result.fix


def test_ring_timeouts_and_resets_warn(case) -> None:
    result = check("kernel_log", with_log(case("radeon-healthy"), "ring-timeout-vram-lost.log"))
    assert result.status == WARN
    for kind in ("ring timeout", "GPU reset", "VRAM lost"):
        assert kind in result.saw
    assert any("ring gfx_0.0.0 timeout" in line for line in result.evidence)
    assert any("VRAM is lost due to GPU reset!" in line for line in result.evidence)


def test_an_unreadable_kernel_log_warns(case) -> None:
    ctx = case("radeon-healthy")
    ctx.kernel_log = KernelLog(None, "journalctl, dmesg", "dmesg: read kernel buffer failed")
    result = check("kernel_log", ctx)
    assert result.status == WARN and "--kernel-log FILE" in result.fix


def test_secure_boot_off(case) -> None:
    assert check("secure_boot", case("radeon-healthy")).saw == "Secure Boot is off"


def test_secure_boot_on_with_the_kernels_own_amdgpu(case) -> None:
    ctx = case("radeon-healthy")
    var = ctx.sys("firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")
    var.write_bytes(bytes([6, 0, 0, 0, 1]))
    result = check("secure_boot", ctx)
    assert result.status == PASS and "kernel's own module" in result.saw


def test_secure_boot_with_a_signed_enrolled_dkms_module(case) -> None:
    result = check("secure_boot", case("instinct-healthy"))
    assert result.status == PASS and "key enrolled" in result.saw


def test_secure_boot_refuses_an_unsigned_dkms_module(case) -> None:
    result = check("secure_boot", case("secure-boot-unsigned"))
    assert result.status == FAIL and "unsigned" in result.saw
    assert "mokutil --import" in result.fix
    assert "rocm_packages_dkms_signing_configured: true" in result.fix
    assert any("unsigned module loading is restricted" in line for line in result.evidence)


def test_secure_boot_with_an_unenrolled_key(case) -> None:
    ctx = case("secure-boot-unsigned", commands="doctor/secure-boot-unsigned/commands-unenrolled")
    result = check("secure_boot", ctx)
    assert result.status == FAIL and "is not enrolled" in result.saw


def test_secure_boot_without_modinfo_warns(case) -> None:
    ctx = case("secure-boot-unsigned", commands="doctor/not-in-render/commands")
    assert check("secure_boot", ctx).status == WARN


def test_dkms_built_for_the_running_kernel(case) -> None:
    assert check("dkms_headers", case("instinct-healthy")).status == PASS


def test_dkms_without_headers_for_the_running_kernel(case) -> None:
    result = check("dkms_headers", case("dkms-no-headers"))
    assert result.status == FAIL
    assert "linux-headers-6.14.0-33-generic" in result.fix


def test_dkms_not_built_for_the_running_kernel(case) -> None:
    result = check("dkms_headers", case("dkms-not-built"))
    assert result.status == WARN and "dkms autoinstall" in result.fix


def test_no_dkms_needs_no_headers(case) -> None:
    assert check("dkms_headers", case("radeon-healthy")).status == SKIP
    assert check("dkms_next_kernel", case("radeon-healthy")).status == SKIP


def test_a_newer_kernel_without_amdgpu_is_named_before_the_reboot(case) -> None:
    result = check("dkms_next_kernel", case("dkms-next-kernel-unbuilt"))
    assert result.status == WARN
    assert "amdgpu-dkms is not installed for 6.14.0-33-generic (no headers)" in result.saw
    assert "running 6.14.0-32-generic" in result.saw
    assert "6.8.0-31-generic" not in result.saw  # older: GRUB does not boot it by default
    assert result.fix.startswith(
        "`sudo apt install linux-headers-6.14.0-33-generic` then "
        "`sudo dkms autoinstall -k 6.14.0-33-generic`"
    )


def test_a_newer_kernel_with_amdgpu_built_passes(case) -> None:
    result = check("dkms_next_kernel", case("dkms-next-kernel-built"))
    assert result.status == PASS, result.saw
    assert "6.14.0-33-generic" in result.saw


def test_no_newer_kernel_passes(case) -> None:
    result = check("dkms_next_kernel", case("instinct-healthy"))
    assert result.status == PASS and "no kernel newer than the running" in result.saw


def test_older_dkms_status_lines_are_read_too(case) -> None:
    from rocmlab.doctor.checks_kernel import dkms_amdgpu
    from rocmlab.doctor.context import CommandResult

    ctx = case("instinct-healthy")
    ctx.run = lambda argv: CommandResult(
        0, "amdgpu, 6.14.14-2222715.24.04, 6.14.0-32-generic, x86_64: installed\n"
    )
    assert dkms_amdgpu(ctx)[0] == {"6.14.0-32-generic": "installed"}
    assert check("dkms_headers", ctx).status == PASS


def test_boot_with_room_for_another_kernel_passes(case) -> None:
    result = check("boot_space", case("radeon-healthy"))
    assert result.status == PASS and "another kernel needs about 0 MiB" in result.saw
    assert any(line.startswith("initrd.img-6.11.0-19-generic: ") for line in result.evidence)


def test_a_boot_too_full_for_another_initramfs_warns(case) -> None:
    ctx = case("radeon-healthy")
    boot = ctx.path("/boot")
    info = os.statvfs(boot)
    # A sparse stand-in: its size, not its blocks, is what another initramfs would take.
    os.truncate(boot / "initrd.img-6.11.0-19-generic", info.f_bavail * info.f_frsize + (1 << 30))
    result = check("boot_space", ctx)
    assert result.status == WARN
    assert "the next kernel update fails in update-initramfs" in result.saw
    assert "`sudo apt autoremove --purge`" in result.fix
    assert any(line.startswith("initrd.img-6.11.0-19-generic: ") for line in result.evidence)


def test_no_boot_is_skipped(case) -> None:
    result = check("boot_space", case("instinct-healthy"))
    assert result.status == SKIP and "no /boot" in result.saw


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("6.14.0-9-generic", "6.14.0-33-generic"),
        ("6.1.0-28-amd64", "6.12.0-1-amd64"),
        ("6.1.0-28-amd64", "6.1.0-29-amd64"),
    ],
)
def test_kernel_releases_are_ordered_by_their_numbers(older, newer) -> None:
    from rocmlab.doctor.checks_kernel import release_order

    assert release_order(older) < release_order(newer)


def test_kernel_in_amds_list(case) -> None:
    result = check("kernel_support", case("radeon-healthy"))
    assert result.status == PASS and "(6.8, 6.11)" in result.saw


def test_kernel_outside_amds_list_with_dkms_fails(case) -> None:
    """ROCm/ROCm#4316: Mint 22.1 (Ubuntu 24.04) on mainline 6.12.3 with ROCm 6.3.2's DKMS."""
    result = check("kernel_support", case("kernel-unsupported-dkms"))
    assert result.status == FAIL
    assert "6.12.3-061203-generic on ubuntu 24.04" in result.saw
    assert "rocm_packages_driver: none" in result.fix


def test_kernel_outside_amds_list_without_dkms_warns(case) -> None:
    assert check("kernel_support", case("kernel-unsupported-inbox")).status == WARN


def test_a_distribution_amd_does_not_list_warns(case) -> None:
    ctx = case("radeon-healthy")
    ctx.path("/etc/os-release").write_text('ID=debian\nVERSION_ID="13"\n')
    result = check("kernel_support", ctx)
    assert result.status == WARN and "debian 13" in result.saw


def test_distribution_rocm_skips_amds_kernel_list(case) -> None:
    assert check("kernel_support", case("not-in-render")).status == SKIP


# ---------------------------------------------------------------- PCIe and /dev/shm


def test_full_pcie_link(case) -> None:
    result = check("pcie_link", case("radeon-healthy"))
    assert result.status == PASS and "16.0 GT/s PCIe x16" in result.saw


def test_an_x16_card_on_an_x4_link_warns(case) -> None:
    result = check("pcie_link", case("pcie-x4"))
    assert result.status == WARN and "0000:03:00.0 x4 of x16" in result.saw
    assert any("card link at 0000:01:00.0" in line for line in result.evidence)


def test_a_slot_slower_than_the_card_warns(case) -> None:
    ctx = case("pcie-x4")
    upstream = ctx.sys("bus/pci/devices/0000:01:00.0")
    (upstream / "current_link_width").write_text("16\n")
    (ctx.sys("bus/pci/devices/0000:00:01.1") / "max_link_speed").write_text("8.0 GT/s PCIe\n")
    result = check("pcie_link", ctx)
    assert result.status == WARN and "only 8 GT/s" in result.saw


def test_a_link_that_went_down_fails(case) -> None:
    ctx = case("pcie-x4")
    upstream = ctx.sys("bus/pci/devices/0000:01:00.0")
    (upstream / "current_link_speed").write_text("Unknown\n")
    (upstream / "current_link_width").write_text("0\n")
    assert check("pcie_link", ctx).status == FAIL


def test_docker_default_shm_warns(case) -> None:
    result = check("dev_shm", case("container-small-shm"))
    assert result.status == WARN and "64 MiB" in result.saw and "--shm-size" in result.fix


def test_missing_dev_shm_fails(case) -> None:
    ctx = case("radeon-healthy")
    ctx.dev("shm").rmdir()
    assert check("dev_shm", ctx).status == FAIL


# ---------------------------------------------------------------- the runner


def test_a_crashing_check_reports_error_and_the_others_still_run(case) -> None:
    def broken(ctx: Context) -> Result:
        return {}["missing"]

    checks = [CHECKS[0], ("broken_check", broken), CHECKS[1]]
    results = run_checks(case("radeon-healthy"), checks)
    assert [r.name for r in results] == ["amdgpu_driver", "broken_check", "device_nodes"]
    assert [r.status for r in results] == [PASS, ERROR, PASS]
    assert "KeyError: 'missing'" in results[1].saw and "test_doctor.py" in results[1].saw


def test_every_check_name_is_stable_snake_case() -> None:
    names = [name for name, _ in CHECKS]
    assert len(set(names)) == len(names) == 19
    assert names[-1] == "host_files"  # it reports on what the checks before it read
    assert all(name.replace("_", "").isalnum() and name.islower() for name in names)


# ---------------------------------------------------------------- the command


def doctor(ctx: Context, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``rocmlab doctor`` in a subprocess on the assembled fixture trees."""
    argv = [
        sys.executable, "-m", "rocmlab", "doctor",
        "--sysfs-root", str(ctx.sysfs_root),
        "--dev-root", str(ctx.dev_root),
        "--root", str(ctx.root),
        "--kernel-log", str(LOGS / "radeon-7900xtx-boot.log"),
        *args,
    ]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    for name in ("HSA_OVERRIDE_GFX_VERSION", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        environment.pop(name, None)
    return subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=300)


def test_exit_1_and_a_valid_document_when_a_check_fails(case, tmp_path: Path) -> None:
    ctx = case("override-missing")
    report = tmp_path / "doctor.json"
    commands = str(FIXTURES / "doctor" / "radeon-healthy" / "commands")
    done = doctor(ctx, "--commands-from", commands, "--expect-gpus", "1", "--json", str(report))
    assert done.returncode == 1, done.stderr
    doc = json.loads(report.read_text())
    jsonschema.validate(doc, DOCTOR_SCHEMA)
    assert doc["verdict"] == "fail" and doc["exit_code"] == 1
    by_name = {c["name"]: c for c in doc["checks"]}
    assert by_name["gfx_override"]["status"] == "fail"
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in by_name["gfx_override"]["fix"]
    assert [c["name"] for c in doc["checks"]] == [name for name, _ in CHECKS]
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("verdict: FAIL (")
    assert any(line.startswith("FAIL  gfx_override: ") and " — " in line for line in lines)


def test_exit_0_on_a_host_without_gpu_on_purpose(case, tmp_path: Path) -> None:
    ctx = case("not-in-render", sysfs=["sysfs/no-amd-gpu"])
    done = doctor(ctx, "--expect-gpus", "0", "--json", "-")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    jsonschema.validate(doc, DOCTOR_SCHEMA)
    assert doc["verdict"] in ("pass", "warn") and doc["exit_code"] == 0
    assert "verdict:" in done.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sysfs-root", "/nonexistent"], "--sysfs-root /nonexistent: not a directory"),
        (["--kernel-log", "/nonexistent.log"], "--kernel-log /nonexistent.log: not a readable"),
        (["--expect-gpus", "-1"], "argument --expect-gpus: '-1' is out of range"),
        (["--expect-gpus", "two"], "'two' is not a whole number from 0 to 1024"),
        (["--json", "/nonexistent/dir/x.json"], "--json /nonexistent/dir/x.json"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_bad_usage_exits_2_naming_the_option(args, message) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rocmlab", "doctor", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=120,
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_the_json_file_is_replaced_whole(case, tmp_path: Path) -> None:
    report = tmp_path / "doctor.json"
    report.write_text("old content that is not JSON")
    ctx = case("not-in-render", sysfs=["sysfs/no-amd-gpu"])
    doctor(ctx, "--expect-gpus", "0", "--json", str(report))
    jsonschema.validate(json.loads(report.read_text()), DOCTOR_SCHEMA)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".doctor")] == []


def test_the_doctor_needs_no_torch_to_start() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from rocmlab.doctor.context import probe_torch\n"
        "info = probe_torch(); assert info.error, info; print(info.error)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "not importable" in done.stdout


def test_user_info_of_this_process() -> None:
    from rocmlab.doctor.context import current_user

    user = current_user()
    assert isinstance(user, UserInfo) and user.uid == os.getuid()
    assert os.getegid() in user.groups


def test_top_level_help_lists_the_doctor() -> None:
    from rocmlab_testutil import run_cli

    result = run_cli("--help")
    assert result.returncode == 0 and "doctor" in result.stdout


def test_kernel_log_falls_back_from_journalctl_to_dmesg() -> None:
    from rocmlab.doctor.context import CommandResult, load_kernel_log

    calls = []

    def runner(argv):
        calls.append(argv[0])
        if argv[0] == "journalctl":
            return CommandResult(1, "", "No journal files were found.\n")
        return CommandResult(0, (LOGS / "firmware-missing.log").read_text())

    log = load_kernel_log(None, runner)
    assert calls == ["journalctl", "dmesg"] and log.source == "dmesg"
    assert "Fatal error during GPU init" in log.text


def test_kernel_log_unreadable_says_why() -> None:
    from rocmlab.doctor.context import CommandResult, load_kernel_log

    def runner(argv):
        if argv[0] == "dmesg":
            return CommandResult(1, "", "dmesg: read kernel buffer failed: Operation not permitted")
        return None

    log = load_kernel_log(None, runner)
    assert log.text is None
    assert "journalctl is not installed" in log.error
    assert "Operation not permitted" in log.error


def test_recorded_dmesg_is_the_kernel_log(case, tmp_path: Path) -> None:
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    (recorded / "dmesg.txt").write_text((LOGS / "psp-hw-init-failed.log").read_text())
    ctx = case("radeon-healthy")
    report = tmp_path / "r.json"
    argv = [
        sys.executable, "-m", "rocmlab", "doctor",
        "--sysfs-root", str(ctx.sysfs_root), "--dev-root", str(ctx.dev_root),
        "--root", str(ctx.root), "--commands-from", str(recorded), "--json", str(report),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    by_name = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    assert by_name["kernel_log"]["status"] == "fail"
    assert any("PSP firmware loading failed" in line for line in by_name["kernel_log"]["evidence"])


# ---------------------------------------------------------------- the ROCm Core SDK line


def core_host(ctx: Context, mode: str = "auto") -> Context:
    """The case's machine with the Core SDK instead of legacy 6.4.2: cores 7.14 and 10.0 as
    dpkg and update-alternatives leave them (tests/fixtures/rocm_installed), no .info/version."""
    from rocm_trees import TWO, tree

    for path in sorted((ctx.root / "opt" / "rocm").rglob("*"), reverse=True):
        path.unlink() if not path.is_dir() else path.rmdir()
    tree(ctx.root, TWO, ("7.14", "10.0"), mode, root=ctx.root)
    return ctx


def test_the_core_line_names_the_selected_core_and_the_others(case) -> None:
    result = check("rocm_release", core_host(case("radeon-healthy")))
    assert result.status == PASS, result
    assert result.saw == (
        "AMD's ROCm 10.0.0 (Core SDK line, /opt/rocm/core-10.0 selected; also installed: core-7.14)"
    )
    assert "/opt/rocm/core-7.14: amdrocm-core7.14 7.14.0-1, installed" in result.evidence
    assert "/opt/rocm/core-10.0: amdrocm-core10.0 10.0.0-1, installed (selected)" in result.evidence


def test_the_core_selected_by_hand_is_the_release_torch_is_compared_with(case) -> None:
    ctx = core_host(case("radeon-healthy"), "manual")
    assert "core-7.14 selected by hand" in check("rocm_release", ctx).saw
    result = check("torch_build", ctx)  # torch 2.8.0+rocm6.4 on ROCm 7.14
    assert result.status == WARN and "the host has ROCm 7.14" in result.saw


def test_a_half_configured_core_fails(case) -> None:
    ctx = core_host(case("radeon-healthy"))
    status = ctx.root / "var/lib/dpkg/status"
    status.write_text(
        status.read_text().replace("install ok installed", "install ok half-configured", 1)
    )
    result = check("rocm_release", ctx)
    assert (
        result.status == FAIL and "amdrocm-core10.0 (install ok half-configured)" not in result.saw
    )
    assert (
        "amdrocm-core10.0 (half-configured)" in result.saw and "dpkg --configure -a" in result.fix
    )


def test_both_lines_installed_warn(case) -> None:
    ctx = core_host(case("radeon-healthy"))
    status = ctx.root / "var/lib/dpkg/status"
    legacy = (FIXTURES / "rocm_installed" / "status" / "legacy").read_text()
    status.write_text(status.read_text() + legacy)
    result = check("rocm_release", ctx)
    assert result.status == WARN and "both release lines are installed" in result.saw


def test_the_json_document_reports_the_core_line(case, tmp_path: Path) -> None:
    ctx = core_host(case("radeon-healthy"))
    commands = str(FIXTURES / "doctor" / "radeon-healthy" / "commands")
    done = doctor(ctx, "--commands-from", commands, "--expect-gpus", "1", "--json", "-")
    doc = json.loads(done.stdout)
    jsonschema.validate(doc, DOCTOR_SCHEMA)
    rocm = doc["rocm"]
    assert (rocm["line"], rocm["release"], rocm["selected"], rocm["mode"], rocm["legacy"]) == (
        "core",
        "10.0.0",
        "10.0",
        "auto",
        None,
    )
    assert [(c["series"], c["release"], c["selected"]) for c in rocm["cores"]] == [
        ("7.14", "7.14.0", False),
        ("10.0", "10.0.0", True),
    ]
    line = next(x for x in done.stderr.splitlines() if " rocm_release: " in x)
    assert line == (
        "PASS  rocm_release: AMD's ROCm 10.0.0 (Core SDK line, /opt/rocm/core-10.0 selected;"
        " also installed: core-7.14)"
    )


def test_the_core_sdk_needs_no_override_for_a_card_it_ships_code_for(case) -> None:
    # gfx1031 (RX 6700 XT) needs 10.3.0 on the legacy line; ROCm 10.0's Core SDK ships its code.
    ctx = core_host(case("override-missing"))
    result = check("gfx_override", ctx)
    assert result.status == PASS, result
    assert any("ROCm 10.0.0 (Core SDK) ships code for gfx1031" in line for line in result.evidence)
    # The override the legacy line needed is now one too many.
    env = {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    result = check("gfx_override", core_host(case("override-missing", env=env)))
    assert result.status == WARN and "is set but no GPU needs it" in result.saw


def test_on_the_core_line_the_kernels_own_driver_is_named_as_the_one_in_use(case) -> None:
    result = check("amdgpu_driver", core_host(case("radeon-healthy")))
    assert result.status == PASS
    assert result.saw.endswith(
        "AMD's Core SDK ships no kernel driver: the kernel's own amdgpu serves it"
    )
    # On the legacy line the sentence is not there.
    assert "Core SDK" not in check("amdgpu_driver", case("radeon-healthy")).saw
