"""The installed ROCm release, PyTorch's build and devices, and OpenCL."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rocmlab.common.rocm_installed import describe
from rocmlab.common.support_catalog import major_minor, version_numbers
from rocmlab.doctor.context import Context
from rocmlab.doctor.gpus import detect, override_target, visible
from rocmlab.doctor.model import Result, failed, passed, skipped, warned

ROCM_INFO_VERSION = "/opt/rocm/.info/version"
# AMD numbers its rocminfo package 1.0.0.<ROCm as 5 digits>: 1.0.0.60401-83~24.04.
_AMD_ROCMINFO_RE = re.compile(r"^1\.0\.0\.\d{5}")
_VENDORS_DIR = "/etc/OpenCL/vendors"


@dataclass(frozen=True)
class RocmInstall:
    """Which ROCm user space is installed: AMD's, the distribution's, both or none."""

    amd: str | None  # AMD's release (x.y.z): the selected core's, or the legacy line's
    distro: str | None  # the distribution's rocminfo (upstream x.y.z)
    notes: tuple[str, ...]
    broken: tuple[str, ...]  # packages dpkg left half-installed
    line: str | None = None  # AMD's line: "core" (the ROCm Core SDK) or "legacy"
    said: str = ""  # rocm_installed.describe: "ROCm 10.0.0 (Core SDK line, ... selected)"
    problems: tuple[str, ...] = ()  # what rocm_installed found wrong on the Core line

    @property
    def release(self) -> str | None:
        """major.minor of the ROCm that applications load (AMD's when both are there)."""
        return major_minor(self.amd or self.distro or "")


def _upstream(version: str) -> str:
    """``6.4.1`` of ``6.4.1-83``; the version itself when it has no X.Y."""
    numbers = version_numbers(version)
    return ".".join(str(part) for part in numbers) if numbers else version


def installed_rocm(ctx: Context) -> RocmInstall:
    """AMD's ROCm as rocm_installed reads it (the Core SDK line: the selected core; the legacy
    line: /opt/rocm/.info/version and dpkg's rocm-core), or the distribution's rocminfo."""
    found = ctx.rocm()
    notes, broken = [], []
    amd = None
    if found["line"] == "core":
        return _core_install(ctx, found)
    notes += [f"refused: {why}" for why in found["refused"]]
    info = found["legacy_version"] or ""
    if info:
        amd = _upstream(info)
        notes.append(f"{ROCM_INFO_VERSION}: {info}")
    packages = ctx.dpkg_packages()
    for name in ("rocm-core", "rocminfo", "amdgpu-dkms"):
        fields = packages.get(name)
        if not fields:
            continue
        state = fields.get("Status", "")
        if state.endswith(" installed"):
            version = fields.get("Version", "")
            notes.append(f"dpkg: {name} {version}")
        elif state and not state.endswith("not-installed") and "config-files" not in state:
            broken.append(f"{name} ({state})")
    core = packages.get("rocm-core", {})
    if core.get("Status", "").endswith(" installed"):
        core_version = _upstream(core.get("Version", ""))
        if amd and major_minor(core_version) != major_minor(amd):
            notes.append(f"rocm-core says {core_version}, {ROCM_INFO_VERSION} says {amd}")
        amd = amd or core_version
    distro = None
    rocminfo = packages.get("rocminfo", {})
    version = rocminfo.get("Version", "")
    if rocminfo.get("Status", "").endswith(" installed") and not _AMD_ROCMINFO_RE.match(version):
        distro = _upstream(version.split("-")[0])
    return RocmInstall(amd, distro, tuple(notes), tuple(broken))


def _core_install(ctx: Context, found: dict) -> RocmInstall:
    """The Core SDK line: every core with its package and state, the selection."""
    notes = [describe(found)]
    if found["mode"]:
        notes.append(f"update-alternatives: core group in {found['mode']} mode")
    broken = []
    for core in found["cores"]:
        mark = " (selected)" if core["selected"] else ""
        package = f"{core['package']} {core['version']}" if core["package"] else "no package"
        notes.append(f"{core['path']}: {package}, {core['state']}{mark}")
        if core["package"] and core["state"] not in ("installed", "absent"):
            broken.append(f"{core['package']} ({core['state']})")
    fields = ctx.dpkg_packages().get("rocm-core", {})
    state = fields.get("Status", "")
    if state and not state.endswith(("installed", "not-installed")) and "config-files" not in state:
        broken.append(f"rocm-core ({state})")
    problems = tuple(p for p in found["problems"] if " is half-" not in p and "unpacked" not in p)
    return RocmInstall(
        found["release"], None, tuple(notes), tuple(broken), "core", describe(found), problems
    )


def check_rocm_release(ctx: Context) -> Result:
    """The installed ROCm user space: which release, from where, and whether it is whole."""
    rocm = installed_rocm(ctx)
    evidence = list(rocm.notes)
    if rocm.broken:
        return failed(
            f"dpkg left {', '.join(rocm.broken)} half-installed",
            "`sudo dpkg --configure -a`, then rerun the rocm_packages role",
            evidence,
        )
    if rocm.amd and rocm.distro:
        return warned(
            f"AMD's ROCm {rocm.amd} and the distribution's rocminfo {rocm.distro} are both "
            "installed: one shadows the other",
            "rocm_packages_replace_distro: true (role rocm_packages) removes the "
            "distribution's ROCm packages",
            evidence,
        )
    mismatch = [note for note in rocm.notes if " says " in note]
    if mismatch:
        return warned(mismatch[0], "rerun the rocm_packages role to finish the upgrade", evidence)
    if rocm.problems:
        return warned(
            f"{rocm.said}: {'; '.join(rocm.problems)}",
            "rerun the rocm_packages role (it installs, selects and removes cores); "
            "`update-alternatives --display core` shows the selection",
            evidence + list(rocm.problems),
        )
    wheels = ctx.rocm_wheels()
    venv = ""
    if wheels is not None:
        devices = ", ".join(wheels.devices) or "no device package"
        evidence.append(f"this venv: rocm-sdk-core {wheels.version} ({devices})")
        other = major_minor(wheels.version) != rocm.release
        venv = f"; this venv carries ROCm {wheels.version} from wheels" + (
            ", another release: its frameworks load the venv's" if rocm.release and other else ""
        )
    if rocm.line == "core":
        return passed(f"AMD's {rocm.said}{venv}", evidence)
    if rocm.amd:
        return passed(f"AMD's ROCm {rocm.amd}{venv}", evidence)
    if rocm.distro:
        return passed(f"the distribution's ROCm {rocm.distro} (rocminfo package){venv}", evidence)
    if wheels is not None:
        return passed(
            f"ROCm {wheels.version} from wheels in this venv (no system ROCm: none is needed "
            "beside the driver; rocminfo and clinfo are not installed)",
            evidence,
        )
    return warned(
        "no ROCm user space installed (no /opt/rocm/.info/version, no rocm-core or rocminfo "
        "package): rocminfo and clinfo are missing; PyTorch's wheels bring their own runtime",
        "the rocm_repo and rocm_packages roles install it (tag rocm_packages)",
        evidence,
    )


def _torch_fix(release: str | None) -> str:
    index = f"rocm{release}" if release else "rocmX.Y"
    return (
        "the pytorch_rocm role installs the ROCm build into its venv (pytorch_rocm_version, "
        f"pytorch_rocm_rocm_version); by hand `pip install torch --index-url <PyTorch's {index} "
        "wheel index>`"
    )


def check_torch_build(ctx: Context) -> Result:
    """PyTorch's build (ROCm, CUDA or CPU) and its HIP release against the installed ROCm."""
    torch = ctx.torch()
    if torch.error:
        return skipped(
            f"{torch.error}: run the doctor with the training venv's Python "
            "(/opt/rocmlab/venvs/pytorch/bin/rocmlab) to check PyTorch"
        )
    rocm = installed_rocm(ctx)
    release = rocm.release
    if torch.hip is None:
        kind = f"a CUDA {torch.cuda} build" if torch.cuda else "a CPU-only build"
        if ctx.expect_gpus == 0:
            return passed(f"torch {torch.version} is {kind}, and no GPU is expected here")
        return failed(
            f"torch {torch.version} is {kind}: it cannot use an AMD GPU (PyTorch sees no HIP "
            "device)",
            _torch_fix(release),
        )
    hip = major_minor(torch.hip) or torch.hip
    wheels = ctx.rocm_wheels()
    if wheels is not None and major_minor(wheels.version) == hip:
        other = release not in (None, hip)
        host = f"; the host's ROCm {release} is another release" if other else ""
        return passed(
            f"torch {torch.version} built for ROCm {hip} (HIP {torch.hip}), as this venv's ROCm "
            f"{wheels.version} from wheels{host}"
        )
    if release is None:
        return passed(
            f"torch {torch.version} built for ROCm {hip} (HIP {torch.hip}); no ROCm installed "
            "on the host: the wheel brings its own runtime"
        )
    if hip != release:
        return warned(
            f"torch {torch.version} is built for ROCm {hip} (HIP {torch.hip}) but the host has "
            f"ROCm {release}",
            f'pytorch_rocm_rocm_version: "{release}" (role pytorch_rocm) installs the wheel '
            "built for the installed ROCm, when the torch/ROCm table has one",
        )
    return passed(f"torch {torch.version} built for ROCm {hip}, as installed (HIP {torch.hip})")


def check_torch_gpu(ctx: Context) -> Result:
    """PyTorch sees the GPUs, and was built for their gfx targets."""
    torch = ctx.torch()
    if torch.error:
        return skipped(torch.error)
    if torch.hip is None:
        return skipped(f"torch {torch.version} is not a ROCm build (see torch_build)")
    _unused, gpus = detect(ctx.sysfs_root, ctx.read_path)
    shown, _unused = visible(gpus, ctx.env)
    shown = [gpu for gpu in shown if gpu.usable]
    if not shown:
        return skipped("no usable AMD GPU visible to this process")
    override = ctx.env.get("HSA_OVERRIDE_GFX_VERSION", "")
    targets = {gpu.index: override_target(override) or gpu.gfx for gpu in shown}
    arches = sorted({arch.split(":")[0] for arch in torch.arch_list})
    evidence = [f"torch.cuda.get_arch_list(): {', '.join(arches) or '(empty)'}"]
    evidence += [f"device {i}: {arch}" for i, arch in enumerate(torch.device_archs)]
    if not torch.cuda_available:
        return failed(
            f"torch {torch.version} sees no HIP device although ROCm lists {len(shown)} GPU(s)",
            "fix the FAILs above first (groups, device nodes, override); if there are none, "
            "pytorch_rocm_rocm_version (role pytorch_rocm) installs a wheel matching the "
            "installed ROCm",
            evidence,
        )
    missing = {i: t for i, t in targets.items() if arches and t not in arches}
    if missing:
        names = ", ".join(f"GPU {i} ({t})" for i, t in missing.items())
        return failed(
            f"torch {torch.version} has no code for {names}: kernels fail with "
            "hipErrorNoBinaryForGpu / 'invalid device function'",
            "set HSA_OVERRIDE_GFX_VERSION to a target it has (gfx_override_mode: auto, role "
            "gfx_override), or install a torch built for this GPU (pytorch_rocm_version)",
            evidence,
        )
    if torch.device_count != len(shown):
        return warned(
            f"torch sees {torch.device_count} device(s), ROCm lists {len(shown)} visible GPU(s)",
            "compare ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES with gpu_count; a device torch "
            "cannot open is named in kernel_log",
            evidence,
        )
    used = ", ".join(sorted(set(targets.values())))
    return passed(f"torch sees {torch.device_count} device(s), built for {used}", evidence)


def check_opencl(ctx: Context) -> Result:
    """An OpenCL ICD under /etc/OpenCL/vendors and ``clinfo -l`` listing a platform."""
    vendors = ctx.path(_VENDORS_DIR)
    try:
        icds = sorted(path.name for path in vendors.glob("*.icd"))
    except OSError:
        icds = []
    runtime_fix = (
        "rocm_packages (role) installs the OpenCL runtime: rocm-opencl-runtime from AMD "
        "(pulled in by rocm-opencl-sdk) or rocm-opencl-icd on Debian 13"
    )
    if not icds:
        return warned(
            f"no OpenCL ICD under {_VENDORS_DIR}: clinfo prints nothing / 0 platforms "
            "(PyTorch does not need OpenCL)",
            runtime_fix,
        )
    result = ctx.run(["clinfo", "-l"])
    evidence = [f"{_VENDORS_DIR}/{name}" for name in icds]
    if result is None:
        return warned(
            f"ICD {', '.join(icds)} present, but clinfo is not installed to confirm it",
            "`sudo apt install clinfo` (in rocm_packages' default list)",
            evidence,
        )
    lines = [line.rstrip() for line in result.stdout.splitlines() if line.strip()]
    evidence += lines
    platforms = [line for line in lines if line.startswith("Platform #")]
    devices = [line for line in lines if "Device #" in line]
    amd = [line for line in platforms if "AMD" in line]
    if not platforms or (amd and not devices):
        what = "no platform" if not platforms else "an AMD platform without a device"
        return failed(
            f"ICD {', '.join(icds)} present but `clinfo -l` lists {what}",
            "check gpu_groups and device_nodes (clinfo as a user outside render sees nothing); "
            "else reinstall the OpenCL runtime with rocm_packages",
            evidence,
        )
    return passed(f"{len(platforms)} OpenCL platform(s), {len(devices)} device(s)", evidence)
