"""HSA_OVERRIDE_GFX_VERSION and integrated GPUs, judged with the gfx_override role's tables."""

from __future__ import annotations

import dataclasses
import re

from rocmlab.common import support_catalog
from rocmlab.doctor.context import Context
from rocmlab.doctor.gpus import Gpu, detect, valid_override, visible, wanted_environment
from rocmlab.doctor.model import Result, failed, passed, skipped, warned

# The file the gfx_override role writes for login shells.
PROFILE_FILE = "/etc/profile.d/rocmlab-gfx.sh"
_EXPORT_RE = re.compile(r"^\s*export\s+(\w+)=['\"]?([^'\"\s]*)['\"]?\s*$")


def profile_settings(ctx: Context) -> dict[str, str]:
    """The variables gfx_override's profile file exports (empty when it is absent)."""
    settings = {}
    for line in (ctx.read(PROFILE_FILE) or "").splitlines():
        match = _EXPORT_RE.match(line)
        if match:
            settings[match[1]] = match[2]
    return settings


def _login_hint(ctx: Context, name: str, value: str | None) -> str:
    """A note when the role's profile file sets the variable differently from this process."""
    written = profile_settings(ctx).get(name)
    if written is None or written == value:
        return ""
    return (
        f" ({PROFILE_FILE} sets {name}={written}: this process did not start from a fresh "
        "login, log in again or `source` it)"
    )


def check_gfx_override(ctx: Context) -> Result:
    """HSA_OVERRIDE_GFX_VERSION: needed and missing, set but not needed, wrong, or mixed cards."""
    _unused, gpus = detect(ctx.sysfs_root, ctx.read_path)
    gpus, sdk_notes = follow_sdk(gpus, ctx.rocm())
    value = ctx.env.get("HSA_OVERRIDE_GFX_VERSION")
    hint = _login_hint(ctx, "HSA_OVERRIDE_GFX_VERSION", value)
    shown, notes = visible(gpus, ctx.env)
    usable = [gpu for gpu in shown if gpu.usable]
    if not usable:
        if not gpus:
            return skipped("no AMD GPU found")
        return skipped("no GPU this process sees can compute (see igpu_hidden and gpu_count)")
    evidence = [f"GPU {g.index}: {g.label()} needs {_needs_text(g)}" for g in usable]
    evidence += sdk_notes + notes
    said = f"HSA_OVERRIDE_GFX_VERSION={value}" if value is not None else "no override"
    if value is not None and not valid_override(value):
        return failed(
            f"HSA_OVERRIDE_GFX_VERSION={value!r} is not major.minor.stepping (like 10.3.0); "
            "the runtime rejects it",
            "gfx_override_mode: auto (role gfx_override) writes the right value; by hand "
            "`unset HSA_OVERRIDE_GFX_VERSION`",
            evidence,
        )
    wrong = [gpu for gpu in usable if (value or gpu.native) != gpu.needs]
    # Where the installed Core SDK ships every card's code, an override left from the legacy
    # line is one too many, not a wrong target (it still names code that runs).
    superfluous = bool(sdk_notes) and not any(gpu.override for gpu in usable)
    if not wrong or (value is not None and superfluous):
        if value is not None and not any(gpu.override for gpu in usable):
            return warned(
                f"{said} is set but no GPU needs it: each runs its own code objects{hint}",
                "gfx_override_mode: auto (role gfx_override) removes it; where it was set by "
                "hand, `unset HSA_OVERRIDE_GFX_VERSION`",
                evidence,
            )
        return passed(f"{said}: right for {_labels(usable)}{hint}", evidence)
    needs = sorted({gpu.needs for gpu in usable})
    if len(needs) > 1:
        first = wrong[0]
        others = ",".join(str(g.index) for g in usable if g.needs == first.needs)
        return failed(
            f"{said}, but the GPUs need different overrides ({', '.join(needs)}): one global "
            f"value cannot serve {_labels(usable)}{hint}",
            f"gfx_override_mode: manual with gfx_override_version: {first.needs} (role "
            f"gfx_override) for the card you compute on, and ROCR_VISIBLE_DEVICES={others} "
            "per job to hide the other",
            evidence,
        )
    need = needs[0]
    if value is None:
        return failed(
            f"no HSA_OVERRIDE_GFX_VERSION, but {_labels(wrong)} needs {need}: ROCm has no code "
            f'objects for it ("No compatible GFX target found", hipErrorNoBinaryForGpu){hint}',
            f"gfx_override_mode: auto writes HSA_OVERRIDE_GFX_VERSION={need} (role "
            f"gfx_override); by hand `export HSA_OVERRIDE_GFX_VERSION={need}`",
            evidence,
        )
    return failed(
        f"{said} is wrong for {_labels(wrong)}, which needs {need}: kernels for another "
        f"target crash, hang or compute wrong numbers{hint}",
        f"gfx_override_mode: auto writes HSA_OVERRIDE_GFX_VERSION={need} (role gfx_override); "
        f"by hand `export HSA_OVERRIDE_GFX_VERSION={need}`",
        evidence,
    )


def follow_sdk(gpus: list[Gpu], rocm: dict) -> tuple[list[Gpu], list[str]]:
    """The GPUs as the installed ROCm sees them: AMD's Core SDK (7.14 and later) ships code for
    targets the legacy line needed an override for (the support catalog's targets of the
    release), so those need none. rocm: the installed-release probe's answer."""
    release = rocm.get("release") if rocm.get("line") == "core" else None
    native = set(support_catalog.shipped().native_targets(release) or []) if release else set()
    followed, notes = [], []
    for gpu in gpus:
        if gpu.override and gpu.gfx in native:
            notes.append(
                f"GPU {gpu.index}: ROCm {release} (Core SDK) ships code for {gpu.gfx}: "
                f"no override, where the legacy line needed {gpu.override}"
            )
            gpu = dataclasses.replace(gpu, override="", usable=True)
        followed.append(gpu)
    return followed, notes


def _needs_text(gpu: Gpu) -> str:
    return f"HSA_OVERRIDE_GFX_VERSION={gpu.override}" if gpu.override else "no override"


def _labels(gpus: list[Gpu]) -> str:
    return ", ".join(gpu.label() for gpu in gpus)


def check_igpu_hidden(ctx: Context) -> Result:
    """An integrated GPU visible beside a discrete one without ROCR/HIP_VISIBLE_DEVICES."""
    _unused, gpus = detect(ctx.sysfs_root, ctx.read_path)
    igpus = [gpu for gpu in gpus if gpu.igpu]
    discrete = [gpu for gpu in gpus if gpu.usable and not gpu.igpu]
    if not gpus:
        return skipped("no AMD GPU found")
    if not igpus:
        return passed("no integrated GPU")
    if not discrete:
        return passed(f"the integrated GPU is the only one: {_labels(igpus)}")
    shown, notes = visible(gpus, ctx.env)
    shown_igpus = [gpu for gpu in shown if gpu.igpu]
    wanted, _unused = wanted_environment(gpus)
    keep = wanted.get("ROCR_VISIBLE_DEVICES", ",".join(str(g.index) for g in discrete))
    hint = _login_hint(ctx, "ROCR_VISIBLE_DEVICES", ctx.env.get("ROCR_VISIBLE_DEVICES"))
    if not shown_igpus:
        return passed(f"the integrated GPU is hidden: {_labels(igpus)}", notes)
    fix = (
        f"gfx_override_hide_igpu: true (role gfx_override) writes ROCR_VISIBLE_DEVICES={keep}; "
        f"by hand `export ROCR_VISIBLE_DEVICES={keep}`"
    )
    evidence = [f"visible GPU {position}: {gpu.label()}" for position, gpu in enumerate(shown)]
    first = shown[0].igpu
    unusable = [gpu for gpu in shown_igpus if not gpu.usable]
    if first or unusable:
        why = []
        if first:
            why.append("it is device 0, where every script's 'cuda' device lands")
        if unusable:
            why.append(f"{_labels(unusable)} cannot compute and can crash the runtime")
        return failed(
            f"integrated GPU visible beside {_labels(discrete)}: {'; '.join(why)}{hint}",
            fix,
            evidence + notes,
        )
    return warned(
        f"integrated GPU {_labels(shown_igpus)} visible beside {_labels(discrete)}: AMD warns "
        f"the runtime may crash with an iGPU visible{hint}",
        fix,
        evidence + notes,
    )
