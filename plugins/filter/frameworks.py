# Copyright: rocmlab contributors
# Apache License 2.0
"""What the frameworks' roles (pytorch_rocm, tensorflow_rocm) install and from where, decided by
pure functions over the roles' tables (their vars/main.yml) and what the host said. The roles'
tasks only read the host, call these, and act on the answer: validate -> plan (<role>_plan: the
refusal, or what to install from where) -> framework_venv's install (framework_pip: what pip must
do, given what the venv has) -> its result (framework_record: the record, and the refusal of a
build that cannot use the GPU). Arguments and answers: plugins/filter/<name>.yml; SETTINGS:
__<role>_settings.

A framework's version left empty (the default) follows the ROCm release: the newest release its
table (the one the support catalog points to) builds for it, so that a change of
rocm_repo_version alone moves the frameworks too. A version set is a pin: kept as it is, and
refused, naming the release that would fit, where it has no build for the ROCm release.

PYTHON: what the venv's interpreter printed for `print('%d.%d.%d' % sys.version_info[:3])` (rc,
stdout, and msg or stderr), or None. PROBE: what roles/framework_venv/files/probe.py printed ({}
without a venv). Every refusal names the variable, the value and what would work; the first that
applies is returned, "" when none does. A plan's "downloads" is the role's one list of what the
host fetches (plugins/module_utils/downloads.py; <role>_downloads): empty when it refuses.
"""

from __future__ import annotations

import re
from functools import partial

from ansible_collections.rocmlab.rocmlab.plugins.module_utils.downloads import (
    entry,
    pip_mirrors,
    truthy,
)

CREDENTIALS = re.compile(r"://[^/@]*@")


def _masked(text) -> str:
    return CREDENTIALS.sub("://***@", str(text))


def _major_minor(version) -> str:
    return ".".join(str(version).split(".")[:2])


def _listed(names) -> str:
    return ", ".join(str(name) for name in names)


def _release_key(release) -> tuple[int, ...]:
    return tuple(int(part) for part in str(release).split(".") if part.isdigit())


# --- the engine: one plan, pip decision and record over a framework's table -----------------
# A framework is a dict (PYTORCH, TENSORFLOW): its role, "name" and "word" (PyTorch, torch);
# "builds", its table read as builds (a release, a ROCm release, the Pythons of its wheels);
# "keyed_by", what the table is keyed by (the terms of its refusals); its part of the plan
# ("fields"), download ("found_as", "upstream") and record ("probed", "result", checked by
# "rocm_build" and "sees_gpu"); what pip wants ("wants", "pip_says"); its words in the engine's
# messages. They read the plan, the record or a plan's context C (role, settings, builds, pinned,
# rocm, release, build, version, plan; path, found, pyver, pythons). Optional: "pin", "version",
# "pythons", "other_source" (not pip), "rebuild", "one_module", "core_sdk", "rocm_only", "newer"
# (what the refusal to follow a ROCm release newer than the table's says), "missing" (the record's
# refusal of an install that lacks a part it asked for), "also_downloads" (more entries of the
# plan's downloads).


def _follow(framework: dict, builds: list, rocm: str) -> str:
    """The release the builds give ROCm release ROCM ("" where none): the newest, or the first its
    row lists (its default) where the table is keyed by ROCm release."""
    has = [b["release"] for b in builds if b["rocm"] == rocm]
    if framework["keyed_by"] == "rocm":
        return (has or [""])[0]
    return max(has, key=_release_key, default="")


def _build(release, rocm, python, **more) -> dict:
    """A row of a table as a build: a release, its ROCm release, the Pythons of its wheels."""
    return {"release": str(release), "rocm": str(rocm), "python": list(python or []), **more}


def _wheels(framework: dict, settings: dict) -> bool:
    """Whether the framework installs wheels with pip (else "other_source" installs it)."""
    return "other_source" not in framework or settings["source"] == "pip"


def _engine_plan(framework: dict, settings: dict, python: dict | None = None) -> dict:
    """What a framework's role installs, or why it refuses to (the first refusal that applies)."""
    builds = framework["builds"](settings["releases"])
    pinned = str(settings["version"] or "").strip()
    rocm = _major_minor(settings["rocm_version"])
    # The table's release a host gets: the pin's, else the newest built for the ROCm release.
    release = framework.get("pin", str)(pinned) if pinned else _follow(framework, builds, rocm)
    build = next((b for b in builds if (b["release"], b["rocm"]) == (release, rocm)), None)
    c = {"role": framework["role"], "settings": settings, "builds": builds, "pinned": pinned}
    c.update(rocm=rocm, release=release, build=build)
    c["version"] = framework["version"](c) if "version" in framework else release
    plan = c["plan"] = {
        "refusal": "",
        "version": c["version"],
        "pinned": bool(pinned),
        "rocm": rocm,
        "index_url": str(settings["index_url"]),
        "find_links": str(settings["find_links"]),
        **framework["fields"](c),
        "python_found": None,
        "downloads": [],
    }
    plan["refusal"] = _refusal(framework, c, python)
    if not plan["refusal"] and "pyver" in c:  # pip's, with an interpreter that has wheels
        _found(framework, c)
    return plan


def _refusal(framework: dict, c: dict, python: dict | None) -> str:
    """The first refusal that applies to the plan in C ("" when none does)."""
    role, keyed_by, wheels = c["role"], framework["keyed_by"], _wheels(framework, c["settings"])
    if not c["pinned"] and wheels and not c["release"]:
        return _nothing_to_follow(framework, c)
    if c["pinned"] and c[keyed_by] not in {b[keyed_by] for b in c["builds"]}:
        return _pin_refusal(framework, c)
    if not wheels:
        return framework["other_source"](c)
    if c["build"] is None:
        return _pin_refusal(framework, c)
    if framework["no_source"](c):
        return framework["no_source"](c)
    path, python = str(c["settings"]["python"]), python or {}
    if python.get("rc") != 0:
        why = python["msg"] if "msg" in python else python.get("stderr", "")
        return (
            f"{role}_python: {path} does not run ({why}). Install python3 or point {role}_python"
            " at an interpreter."
        )
    found = c["found"] = str(python.get("stdout", "")).strip()
    c["path"], c["pyver"] = path, _major_minor(found)
    c["pythons"] = framework["pythons"](c) if "pythons" in framework else c["build"]["python"]
    if c["pyver"] in c["pythons"]:
        return ""
    who, has = framework["no_wheels"](c)
    return (
        f"{who} has no wheels for Python {found} ({path}); {has} {role}_python to an interpreter"
        " of a supported version."
    )


def _nothing_to_follow(framework: dict, c: dict) -> str:
    """The refusal to follow a ROCm release the table has no build for, naming its newest one."""
    role, word, rocm, builds = c["role"], framework["word"], c["rocm"], c["builds"]
    newest = max((b["rocm"] for b in builds), key=_release_key)
    core = (
        framework.get(
            "newer",
            " AMD's Core SDK releases (7.14 on) ship their frameworks as TheRock's own wheels,"
            " which rocmlab does not install for this framework.",
        )
        if _release_key(rocm) > _release_key(newest)
        else ""
    )
    known = f" Known ROCm releases: {_listed(dict.fromkeys(b['rocm'] for b in builds))}."
    return (
        f"{role}_version: no {word} in the table (roles/{role}/vars/main.yml) is built for"
        f" ROCm {rocm} ({role}_rocm_version, which follows rocm_repo_version by default), so"
        f" there is none to follow.{core} The newest ROCm release the table has {word} for"
        f" is {newest} ({word} {_follow(framework, builds, newest)})."
        f"{known if framework['keyed_by'] == 'rocm' else ''} Set {role}_rocm_version:"
        f' "{newest}" (docs/core-sdk.md{framework.get("core_sdk", "")}), or'
        f" {framework['leave_out']}."
    )


def _pin_refusal(framework: dict, c: dict) -> str:
    """The refusal of a pin the table lacks, or lacks for the ROCm release, in its terms."""
    role, builds, rocm, pinned = c["role"], c["builds"], c["rocm"], c["pinned"]
    release, word, by_release = c["release"], framework["word"], framework["keyed_by"] == "release"
    has = [b["release"] for b in builds if b["rocm"] == rocm]
    built_for = [b["rocm"] for b in builds if b["release"] == release]
    known = _listed(dict.fromkeys(b[framework["keyed_by"]] for b in builds))
    if not (built_for if by_release else has):  # not in the table
        table = f"the table of {'ROCm' if by_release else word} builds (roles/{role}/vars/main.yml)"
        return (
            f"{role}_version: {word} {pinned} is not in {table}. Known releases: {known}. Leave"
            f" {role}_version empty to get the newest {word} built for the ROCm release."
            if by_release
            else f"{role}_rocm_version: ROCm {rocm} is not in {table}. Known ROCm releases:"
            f" {known}; those with {word} {pinned} ({role}_version):"
            f" {_listed(built_for) or 'none in the table'}."
        )
    head = (
        f'{role}_version "{pinned}" does not fit {role}_rocm_version'
        f' "{c["settings"]["rocm_version"]}" (which follows rocm_repo_version by default):'
    )
    if not by_release:
        return (
            f"{head} ROCm {rocm} has {word} {_listed(has)}; ROCm releases with {word} {release}:"
            f' {_listed(built_for) or "none in the table"}. Set {role}_version: "" to follow'
            f" the ROCm release ({word} {has[0]}), or {role}_rocm_version to a"
            f" ROCm release with {word} {release}."
        )
    has = sorted(has, key=_release_key)
    fits = (
        f"{word.capitalize()} releases built for ROCm {rocm}: {_listed(has)}; set {role}_version:"
        f' "" to follow the ROCm release ({word} {has[-1]}), or'
        if has
        else f"No {word} in the table is built for ROCm {rocm}; set"
    )
    return (
        f"{head} {word} {release} is built for ROCm {_listed(built_for)}. {fits}"
        f" {role}_rocm_version to a ROCm release {word} {release} is built for."
    )


def _found(framework: dict, c: dict) -> None:
    """The interpreter found, and the wheels' download: from the index (unless pip reads the
    wheelhouse alone) and wheelhouse; upstream: where they come from without a lab cache."""
    plan, name, (what, value) = c["plan"], framework["name"], framework["found_as"](c)
    package = re.split(r"[\[=]", plan["requirements"][0])[0]
    plan["python_found"] = {"path": c["path"], "version": c["found"], what: value}
    plan["python_found"]["wheels_for"] = list(c["pythons"])
    index_url = "" if plan.get("no_index") else plan["index_url"]
    plan["downloads"] = [
        entry(
            "wheels",
            f"{name} wheels",
            mirrors=pip_mirrors(name, index_url, plan["find_links"], package),
            upstream=framework["upstream"](c),
            requirements=plan["requirements"],
            python=c["pyver"],
            path=c["settings"]["venv"],
            space="venvs",
        ),
        *framework.get("also_downloads", lambda c: [])(c),
    ]


def _engine_pip(framework: dict, plan: dict, probe: dict | None, require) -> dict:
    """Why pip must run in the venv, given PROBE's distributions (none: it need not), whether it
    reinstalls ("rebuild"), and the others that own the framework's module (removed first)."""
    dists = (probe or {}).get("dists") or {}
    wants, says = framework["wants"](plan), framework["pip_says"]
    reasons = [says(plan, d, dists.get(d)) for d, fits in wants.items() if not fits(dists.get(d))]
    rebuild = framework["rebuild"](plan, dists, truthy(require)) if "rebuild" in framework else []
    others = [name for name in dists if name not in wants] if framework.get("one_module") else []
    return {"reasons": reasons + rebuild, "force_reinstall": bool(rebuild), "others": others}


def _engine_record(framework, plan, probe, gpu_present, require, *where):
    """The record of what the framework says of itself, and the refusal of one that cannot use an
    AMD GPU ("" if none, or none asked). WHERE: [the interpreter, where the role names it,] venv."""
    *interpreter, venv = where
    pip, role = _wheels(framework, plan), framework["role"]
    result = {
        "venv": venv if pip else None,
        "python": interpreter[0] if interpreter else f"{venv}/bin/python",
        "python_version": probe.get("python"),
        **{key: probe.get(key) for key in framework["probed"]},
        **framework["result"](plan, probe),
        "gpu_present": bool(gpu_present),
        "index_url": _masked(plan["index_url"]) if pip else "",
        "find_links": _masked(plan["find_links"]) if pip else "",
    }
    refusal, require = "", truthy(require)
    missing = framework["missing"](plan, probe) if "missing" in framework else ""
    if missing:
        refusal = f"{role}: {missing}"
    elif require and not framework["rocm_build"](result):
        what, fix = framework["not_rocm"](plan, result)
        refusal = (
            f"{role}: {result['python']} has {what}. It cannot use an AMD GPU"
            f"{framework.get('rocm_only', '')}. {fix}On a host without an AMD GPU (CI), set"
            f" {role}_require_rocm_build: false."
        )
    elif require and result["gpu_present"] and not framework["sees_gpu"](result):
        refusal = (
            f"{role}: this host has /dev/kfd, but {framework['no_gpu'](plan, result)}, and run"
            " rocminfo: a GPU it lists as unsupported needs the gfx_override role"
            " (HSA_OVERRIDE_GFX_VERSION)."
        )
    return {"result": result, "refusal": refusal}


# --- PyTorch ------------------------------------------------------------------------------
def pytorch_rocm_index(releases: dict, version, rocm_version) -> str:
    """The wheel index (under pytorch_rocm_index_base_url) of this torch and ROCm release, or ""."""
    version, rocm = str(version or "").strip(), _major_minor(rocm_version)
    builds = PYTORCH["builds"](releases)
    release = _major_minor(version) if version else _follow(PYTORCH, builds, rocm)
    return next((b["index"] for b in builds if (b["release"], b["rocm"]) == (release, rocm)), "")


def _torch_fields(c: dict) -> dict:
    """PyTorch's part of the plan: the build's index, torchvision, pip's requirements."""
    settings = c["settings"]
    torchvision = str((settings["releases"].get(c["release"]) or {}).get("torchvision", ""))
    wants_torchvision = truthy(settings["torchvision"])
    return {
        "source": settings["source"],
        "release": c["release"],
        "rocm_version": str(settings["rocm_version"]),
        "index": c["build"]["index"] if c["build"] else "",
        # No index: the wheelhouse alone (pip --no-index).
        "no_index": not settings["index_url"],
        "index_base_url": str(settings["index_base_url"]),
        "torchvision": torchvision,
        "wants_torchvision": wants_torchvision,
        "requirements": [f"torch=={c['version']}"]
        + ([f"torchvision=={torchvision}.*"] if wants_torchvision else []),
        "packages": [],
    }


def _torch_no_wheels(c: dict) -> tuple[str, str]:
    """Whose wheels the Python lacks, and which releases have them (or the distribution's)."""
    distro, pyver = c["settings"].get("distro_packages"), c["pyver"]
    others = dict.fromkeys(b["release"] for b in c["builds"] if pyver in b["python"])
    packaged = (
        f"This distribution packages PyTorch itself ({distro['torch']}, a CPU build):"
        " pytorch_rocm_source: distro. "
        if distro
        else ""
    )
    return f"pytorch_rocm_version: torch {c['release']}", (
        f"its wheels are for Python {_listed(c['pythons'])}. torch releases with wheels for"
        f" Python {pyver}: {_listed(others) or 'none in the table'}. {packaged}Or set"
    )


def _torch_distro(c: dict) -> str:
    """The distribution's packages (pytorch_rocm_source: distro), or the refusal."""
    plan, settings, distro = c["plan"], c["settings"], c["settings"].get("distro_packages")
    if not distro:
        return (
            f'pytorch_rocm_source: "distro" is not available on {settings["distribution"]}:'
            " no packaged PyTorch is known there (known: Debian 13, python3-torch). Use"
            " pytorch_rocm_source: pip."
        )
    plan["packages"] = [distro["torch"]] + ([distro["torchvision"]] * plan["wants_torchvision"])
    plan["downloads"] = [entry("apt", "PyTorch packages", requirements=plan["packages"])]
    return ""


def _torch_not_rocm(plan: dict, result: dict) -> tuple[str, str]:
    """The torch a venv has that is not a ROCm build, and where to get one."""
    fix = (
        f"It came from {result['index_url'] or 'no index'}"
        + (f" + {result['find_links']}" if result["find_links"] else "")
        + "; point pytorch_rocm_index_url at PyTorch's ROCm index"
        f" ({plan['index_base_url']}/{plan['index']}) or the wheelhouse at ROCm wheels. "
        if plan["source"] == "pip"
        else "The distribution packages PyTorch without ROCm: use pytorch_rocm_source: pip. "
    )
    return (
        f"torch {result['torch_version']}, a {result['build'].upper()} build (torch.version.hip:"
        f" {result['hip_version'] or 'None'}, torch.version.cuda:"
        f" {result['cuda_version'] or 'None'})"
    ), fix


def _torch_wants(plan: dict) -> dict:
    """Whether the venv's torch (without its local label) is the version asked for (X.Y.Z, or any
    X.Y.Z of X.Y.*: pip's == prefix match), and its torchvision the release (None: missing)."""
    wants = {"torch": lambda got: bool(got) and _is_version(got, plan["version"])}
    if plan["wants_torchvision"]:
        wants["torchvision"] = lambda got: _major_minor(got or "") == plan["torchvision"]
    return wants


def _is_version(version, wanted: str) -> bool:
    version = str(version).split("+", 1)[0]  # without its local label (+rocm6.4)
    return _major_minor(version) == wanted[:-2] if wanted.endswith(".*") else version == wanted


def _torch_rebuild(plan: dict, dists: dict, require: bool) -> list[str]:
    """Why torch is reinstalled: not a ROCm build where one is required, or one for another ROCm
    release (pip takes 2.9.1+rocm6.4 as torch==2.9.1: only a forced reinstall replaces it)."""
    torch = str(dists.get("torch") or "")
    built_for = _major_minor(torch.partition("+rocm")[2])
    not_rocm = require and torch and "+rocm" not in torch
    return [f"torch {torch} is not a ROCm build"] * bool(not_rocm) + [
        f"torch {torch} is built for ROCm {built_for}, not ROCm {plan['rocm']}"
    ] * bool(built_for and built_for != plan["rocm"])


PYTORCH = {
    "role": "pytorch_rocm",
    "name": "PyTorch",
    "word": "torch",
    # The table: torch release -> its torchvision, Pythons, and ROCm releases with their index.
    "builds": lambda releases: [
        _build(name, rocm, row.get("python"), index=str(index))
        for name, row in (releases or {}).items()
        for rocm, index in (row.get("rocm") or {}).items()
    ],
    # A pin (X.Y.Z) asks for its release (X.Y); the table is keyed by release.
    "pin": _major_minor,
    "keyed_by": "release",
    # Not pinned: the newest patch release of the torch release that follows ROCm.
    "version": lambda c: c["pinned"] or (f"{c['release']}.*" if c["release"] else ""),
    "fields": _torch_fields,
    # pytorch_rocm_source: distro installs the distribution's packages.
    "other_source": _torch_distro,
    "no_source": lambda c: (
        ""
        if c["plan"]["index_url"] or c["plan"]["find_links"]
        else "pytorch_rocm_index_url and pytorch_rocm_find_links are both empty: set at least one"
        " (PyTorch's ROCm index such as"
        f" {c['plan']['index_base_url'].rstrip('/')}/rocm6.4, a lab mirror of it, or a"
        " wheelhouse)."
    ),
    "found_as": lambda c: ("torch", c["release"]),
    "upstream": lambda c: {
        "index_url": f"{c['plan']['index_base_url']}/{c['plan']['index']}",
        "find_links": "",
    },
    "wants": _torch_wants,
    "pip_says": lambda plan, dist, got: (
        (f"torch {got} instead of {plan['version']}" if got else "no torch")
        if dist == "torch"
        else f"torchvision {got or 'missing'} instead of {plan['torchvision']}.*"
    ),
    "rebuild": _torch_rebuild,
    "probed": ("torch_version", "hip_version", "cuda_version", "cuda_available"),
    "result": lambda plan, probe: {
        "source": plan["source"],
        # What was asked: a pin (X.Y.Z), or X.Y.* where torch follows the ROCm release.
        "torch_requested": plan["version"] if plan["source"] != "distro" else None,
        "torchvision_version": (probe.get("dists") or {}).get("torchvision"),
        "build": "rocm"
        if probe.get("hip_version")
        else "cuda"
        if probe.get("cuda_version")
        else "cpu",
    },
    "rocm_build": lambda result: result["build"] == "rocm",
    "sees_gpu": lambda result: truthy(result["cuda_available"]),
    "core_sdk": ": the wheels bring their own ROCm libraries",
    "newer": (
        " PyTorch for AMD's Core SDK releases (7.14 on) comes as TheRock's multi-arch wheels,"
        " which carry ROCm themselves: pytorch_rocm_source: wheels installs them."
    ),
    "leave_out": "leave PyTorch out of the run (--skip-tags pytorch_rocm)",
    "no_wheels": _torch_no_wheels,
    "not_rocm": _torch_not_rocm,
    "rocm_only": ": only a ROCm build (torch.version.hip set) can",
    "no_gpu": lambda plan, result: (
        f"torch {result['torch_version']} (HIP {result['hip_version']}) says"
        " torch.cuda.is_available() is False. Check that the kernel driver matches ROCm"
        f" {plan['rocm_version']} (within two releases)"
    ),
}


# --- PyTorch from ROCm's multi-arch wheels (pytorch_rocm_source: wheels) -------------------
# TheRock's RELEASES.md ("Installing multi-arch PyTorch Python packages"): torch and torchvision
# with one [device-gfxNNNN] extra per GPU target (or device-all) from one index; torch requires
# rocm[libraries]==V itself, so the venv carries ROCm and the host needs only the driver. The
# table's row of a torch release lists the ROCm wheel releases it is built for ("wheels").
def _wheel_extras(plan: dict) -> str:
    return ",".join(f"device-{target}" for target in plan["gfx_targets"])


def _torch_wheel_fields(c: dict) -> dict:
    """The wheels' part of the plan: torch (and torchvision) with the GPU targets' extras, and the
    ROCm wheel release pinned (10.0's +rocm10.0 sorts below +rocm7.14: TheRock's issue 7183)."""
    fields, settings = _torch_fields(c), c["settings"]
    targets = sorted({str(t) for t in settings.get("gfx_targets") or []})
    fields.update(index="", gfx_targets=["all"] if "all" in targets else targets)
    fields["wheels_index_url"] = str(settings["wheels_index_url"])
    extras = _wheel_extras(fields)
    fields["requirements"] = [f"torch[{extras}]=={c['version']}", f"rocm=={c['rocm']}.*"] + (
        [f"torchvision[{extras}]=={fields['torchvision']}.*"] if fields["wants_torchvision"] else []
    )
    # The venv's ROCm and the device code of each target, for the probe and the record.
    fields["device_packages"] = [
        f"amd-torch-device-{t}" for t in fields["gfx_targets"] if t != "all"
    ]
    fields["probe_names"] = ["rocm", "rocm-sdk-core", *fields["device_packages"]]
    return fields


def _through_the_lab_cache(c: dict) -> dict:
    """ROCm's multi-arch wheels are fetched by no lab cache ahead ({}): a lab cache passes them
    through as its clients ask (lab_cache_rocm_wheels_upstream), each file once for all, so each
    client's GPU targets' device wheels and no others cross the uplink. (The rocm package is a
    source distribution, which a fill of binary wheels for another machine could not fetch.)"""
    return {}


def _wheel_source(c: dict) -> str:
    """The refusal of a wheels plan with nowhere to get them, or no GPU target to get them for."""
    plan, role = c["plan"], c["role"]
    if not (plan["index_url"] or plan["find_links"]):
        return (
            f"{role}_index_url and {role}_find_links are both empty: set {role}_index_url to"
            f" ROCm's multi-arch index ({plan['wheels_index_url']}, {role}_wheels_index_url) or a"
            f" lab mirror of it, or {role}_find_links to a wheelhouse."
        )
    if not plan["gfx_targets"]:
        return (
            f"{role}_gfx_targets is empty and no AMD GPU was found on this host (KFD topology"
            f" under {role}_sysfs_root), so there is no [device-gfxNNNN] extra to install. Set"
            f" {role}_gfx_targets to the GPU targets the venv must run on (for example [gfx1100];"
            " rocminfo names them), or [all] for every target's device code."
        )
    return ""


def _device_code_missing(role: str, asked: str, of: str, plan: dict, probe: dict) -> str:
    """A target whose device package pip did not install (the index has no such extra): ROLE's
    refusal, after pip installed ASKED, of the device code OF a release."""
    dists = probe.get("dists") or {}
    missing = [name for name in plan["device_packages"] if not dists.get(name)]
    return (
        f"the venv has no {_listed(missing)} after pip installed {asked}: the index"
        f" ({_masked(plan['index_url'] or plan['find_links'])}) has no device code of {of} for"
        f" {_listed(m.rsplit('-', 1)[1] for m in missing)}. Check {role}_gfx_targets against the"
        " targets of TheRock's SUPPORTED_GPUS.md, or use [all]."
        if missing
        else ""
    )


PYTORCH_WHEELS = {
    **{key: value for key, value in PYTORCH.items() if key != "other_source"},
    # The table's rows as wheel builds: a torch release and each ROCm wheel release it lists.
    "builds": lambda releases: [
        _build(name, rocm, row.get("python"), index="")
        for name, row in (releases or {}).items()
        for rocm in row.get("wheels") or []
    ],
    "fields": _torch_wheel_fields,
    "no_source": _wheel_source,
    "upstream": _through_the_lab_cache,
    # A torch that is none of ROCm's wheels (another source's build of the same version: pip
    # takes it for torch==X.Y.Z and adds no device package to it) is replaced.
    "rebuild": lambda plan, dists, require: (
        [f"torch {dists['torch']} is not one of ROCm's wheels (pytorch_rocm_source: wheels)"]
        if dists.get("torch") and "+rocm" not in str(dists["torch"])
        else _torch_rebuild(plan, dists, require)
    ),
    "wants": lambda plan: {
        **_torch_wants(plan),
        **{name: bool for name in plan["device_packages"]},
    },
    "pip_says": lambda plan, dist, got: (
        PYTORCH["pip_says"](plan, dist, got)
        if dist in ("torch", "torchvision")
        else f"{dist} missing (extra device-{dist.rsplit('-', 1)[1]})"
    ),
    "result": lambda plan, probe: {
        **PYTORCH["result"](plan, probe),
        "gfx_targets": plan["gfx_targets"],
        "rocm_wheels_version": (probe.get("dists") or {}).get("rocm"),
    },
    "missing": lambda plan, probe: _device_code_missing(
        "pytorch_rocm", f"torch[{_wheel_extras(plan)}]", f"torch {plan['version']}", plan, probe
    ),
    "newer": "",
    "leave_out": "use pytorch_rocm_source: pip for the ROCm releases before the Core SDK",
    "not_rocm": lambda plan, result: (
        f"torch {result['torch_version']}, a {result['build'].upper()} build (torch.version.hip:"
        f" {result['hip_version'] or 'None'})",
        f"It came from {result['index_url'] or result['find_links']}; ROCm's multi-arch index"
        f" ({plan['wheels_index_url']}) has ROCm builds. ",
    ),
}


def _pytorch(plan_or_settings: dict) -> dict:
    """PyTorch's table read as PyTorch's per-ROCm indexes, or as ROCm's multi-arch wheels."""
    return PYTORCH_WHEELS if plan_or_settings.get("source") == "wheels" else PYTORCH


def pytorch_rocm_plan(settings: dict, python: dict | None = None) -> dict:
    """What pytorch_rocm installs from where, or the refusal (the engine over _pytorch's table)."""
    return _engine_plan(_pytorch(settings), settings, python)


# --- TensorFlow ---------------------------------------------------------------------------
def tensorflow_rocm_defaults(releases: dict, rocm_version, amd_base_url) -> dict:
    """A ROCm release's newest TensorFlow, and AMD's listing of its wheels ("" where not AMD's)."""
    rocm = _major_minor(rocm_version)
    row = (releases or {}).get(rocm) or {}
    newest = (row.get("tensorflow") or [""])[0]
    listing = f"{str(amd_base_url).rstrip('/')}/rocm-rel-{rocm}/"
    return {"newest": str(newest), "find_links": listing if row.get("source") == "amd" else ""}


def _tf_fields(c: dict) -> dict:
    """TensorFlow's part of the plan: the package and its PEP 503 name, the pin (PyPI's
    tensorflow-rocm X.Y.Z.<ROCm digits>0, AMD's X.Y.Z.*, another package's X.Y.Z) and the
    Pythons it has wheels for (tensorflow-rocm: the table's; another: upstream TensorFlow's)."""
    settings, version, package = c["settings"], c["version"], str(c["settings"]["package"])
    row = settings["releases"].get(c["rocm"]) or {}
    dist = re.sub(r"[-_.]+", "-", package.lower())
    pin = version
    if dist == "tensorflow-rocm":
        pypi = row.get("source") == "pypi"
        pin = f"{version}.{c['rocm'].replace('.', '')}0" if pypi else f"{version}.*"
    exact = re.escape(pin.removesuffix(".*"))
    return {
        "package": package,
        "source": row.get("source", ""),
        "amd_base_url": str(settings["amd_base_url"]),
        "dist": dist,
        "pin": pin,
        "pin_regex": f"^{exact}([.][0-9]+)?$" if pin.endswith(".*") else f"^{exact}$",
        "pythons": list(
            row.get("python", [])
            if dist == "tensorflow-rocm"
            else (settings["upstream_python"] or {}).get(_major_minor(version), [])
        ),
        "no_index": truthy(settings["no_index"]),
        "requirements": [f"{package}=={pin}"],
        # What framework_venv's probe looks up besides the TensorFlow distributions it knows.
        "probe_names": [dist],
    }


def _tf_no_wheels(c: dict) -> tuple[str, str]:
    """Whose wheels the Python lacks, and where they exist: the table's or upstream's."""
    plan, pyver = c["plan"], c["pyver"]
    who = f"tensorflow_rocm_python: {plan['package']} {plan['version']} for ROCm {plan['rocm']}"
    if plan["dist"] != "tensorflow-rocm":
        return who, (
            f"upstream TensorFlow {_major_minor(plan['version'])} has them for Python"
            f" {_listed(c['pythons']) or 'none known to the table'}. Set"
        )
    where = "PyPI" if plan["source"] == "pypi" else "AMD's listing"
    cp = " (cp310: Ubuntu 22.04, cp312: Ubuntu 24.04)" if plan["source"] == "amd" else ""
    others = dict.fromkeys(b["rocm"] for b in c["builds"] if pyver in b["python"])
    return who, (
        f"{where} has them for Python {_listed(c['pythons'])}{cp}. ROCm releases with"
        f" tensorflow-rocm wheels for Python {pyver}: {_listed(others) or 'none in the table'}."
        " Set"
    )


def _tf_not_rocm(plan: dict, result: dict) -> tuple[str, str]:
    """The TensorFlow a venv has that is not built with ROCm, and where to get one."""
    where = f"AMD's wheels ({plan['amd_base_url']}/rocm-rel-{plan['rocm']}/)"
    where = "PyPI" if plan["source"] == "pypi" else where
    return (
        f"{plan['package']} {result['tf_version']}, which is not built with ROCm"
        " (tf.test.is_built_with_rocm() is False)",
        f"Install tensorflow-rocm (tensorflow_rocm_package) from {where} or a wheelhouse holding"
        " them. ",
    )


TENSORFLOW = {
    "role": "tensorflow_rocm",
    "name": "TensorFlow",
    "word": "TensorFlow",
    # The table: ROCm release -> the TensorFlow releases AMD builds for it, where, which Pythons.
    "builds": lambda releases: [
        _build(version, rocm, row.get("python"), source=row.get("source", ""))
        for rocm, row in (releases or {}).items()
        for version in row.get("tensorflow") or []
    ],
    # A pin (X.Y.Z) is the version itself; the table is keyed by ROCm release.
    "keyed_by": "rocm",
    "fields": _tf_fields,
    "no_source": lambda c: (
        ""
        if not c["plan"]["no_index"] or (c["plan"]["find_links"] and not c["plan"]["index_url"])
        else f"tensorflow_rocm_no_index {c['settings']['no_index']}, tensorflow_rocm_index_url"
        f' "{_masked(c["plan"]["index_url"])}", tensorflow_rocm_find_links'
        f' "{_masked(c["plan"]["find_links"])}": tensorflow_rocm_no_index: true needs a'
        f" wheelhouse and no index (AMD's is {c['plan']['amd_base_url']}/rocm-rel-X.Y/)."
    ),
    "pythons": lambda c: c["plan"]["pythons"],
    "found_as": lambda c: ("package", f"{c['plan']['package']} {c['version']}"),
    # AMD's listing; PyPI's releases from the index alone.
    "upstream": lambda c: {
        "index_url": "",
        "find_links": tensorflow_rocm_defaults(
            c["settings"]["releases"], c["rocm"], c["settings"]["amd_base_url"]
        )["find_links"],
    },
    # The package asked for, matched as pip's pin; the venv holds no other TensorFlow.
    "wants": lambda plan: {
        plan["dist"]: lambda got: got is not None and bool(re.match(plan["pin_regex"], str(got)))
    },
    "pip_says": lambda plan, dist, got: (
        f"{plan['package']} {got or 'missing'}, wanted {plan['package']}=={plan['pin']}"
    ),
    "one_module": True,
    "probed": ("tf_version", "built_with_rocm", "gpus"),
    "result": lambda plan, probe: {
        "package": plan["package"],
        "package_version": (probe.get("dists") or {}).get(plan["dist"]),
        "rocm_version": plan["rocm"],
        "no_index": plan["no_index"],
    },
    "rocm_build": lambda result: truthy(result["built_with_rocm"]),
    "sees_gpu": lambda result: bool(result["gpus"]),
    "leave_out": "leave TensorFlow off (tensorflow_rocm_enabled: false)",
    "no_wheels": _tf_no_wheels,
    "not_rocm": _tf_not_rocm,
    "no_gpu": lambda plan, result: (
        f"TensorFlow {result['tf_version']} lists no GPU (tf.config.list_physical_devices('GPU')"
        f" is empty). Check that the kernel driver matches ROCm {plan['rocm']} and that the user"
        " space TensorFlow needs is installed (role rocm_packages)"
    ),
}


# --- JAX (ROCm's multi-arch wheels only) ----------------------------------------------------
# TheRock's RELEASES.md ("Installing multi-arch JAX Python packages"): jax, jax_rocm<major>_plugin
# and jax_rocm<major>_pjrt pinned to one version (<major>: 7 for ROCm 7.x, 10 for 10.x); the JAX
# wheels do not pull ROCm in, so rocm[libraries,device-gfxNNNN] is asked for beside them; jax and
# jaxlib come from PyPI, not from AMD's index (a lab's index or wheelhouse that holds both).
def _jax_fields(c: dict) -> dict:
    """JAX's part of the plan: the three pinned packages and ROCm with its targets' device code."""
    settings, version, rocm = c["settings"], c["version"], c["rocm"]
    targets = sorted({str(t) for t in settings.get("gfx_targets") or []})
    targets = ["all"] if "all" in targets else targets
    major = rocm.split(".")[0]
    plugin, pjrt = f"jax-rocm{major}-plugin", f"jax-rocm{major}-pjrt"
    extras = ",".join(["libraries"] + [f"device-{t}" for t in targets])
    devices = [f"rocm-sdk-device-{t}" for t in targets if t != "all"]
    return {
        "source": "wheels",
        "release": c["release"],
        "rocm_version": str(settings["rocm_version"]),
        "gfx_targets": targets,
        "wheels_index_url": str(settings["wheels_index_url"]),
        "no_index": not settings["index_url"],
        "plugin": plugin,
        "pjrt": pjrt,
        "requirements": [
            f"jax=={version}",
            f"jax_rocm{major}_plugin=={version}",
            f"jax_rocm{major}_pjrt=={version}",
            f"rocm[{extras}]=={rocm}.*",
        ],
        "device_packages": devices,
        "probe_names": ["jax", "jaxlib", plugin, pjrt, "rocm", *devices],
    }


def _jax_no_wheels(c: dict) -> tuple[str, str]:
    """Whose wheels the Python lacks, and which JAX releases have them."""
    pyver = c["pyver"]
    others = [b["release"] for b in c["builds"] if pyver in b["python"] and b["rocm"] == c["rocm"]]
    return f"jax_rocm_version: jax {c['release']}", (
        f"its wheels are for Python {_listed(c['pythons'])}. JAX releases for ROCm {c['rocm']}"
        f" with wheels for Python {pyver}: {_listed(others) or 'none in the table'}. Or set"
    )


def _jax_from_pypi(c: dict) -> str:
    """jax and jaxlib are PyPI's, not on ROCm's index: with that index alone pip cannot find
    them."""
    plan, version = c["plan"], c["version"]
    if plan["find_links"] or plan["index_url"].rstrip("/") != plan["wheels_index_url"].rstrip("/"):
        return ""
    return (
        f"jax_rocm_index_url is ROCm's multi-arch index ({_masked(plan['index_url'])}) and"
        " jax_rocm_find_links is empty: jax and jaxlib are not on that index (TheRock's"
        " RELEASES.md installs them from PyPI), and pip is given one index only. Set"
        f" jax_rocm_find_links to a wheelhouse holding jax=={version} and jaxlib=={version},"
        " or jax_rocm_index_url to an index that mirrors both."
    )


JAX = {
    "role": "jax_rocm",
    "name": "JAX",
    "word": "jax",
    # The table: JAX release -> the ROCm wheel releases it is built for, the Pythons of its wheels.
    "builds": lambda releases: [
        _build(name, rocm, row.get("python"))
        for name, row in (releases or {}).items()
        for rocm in row.get("wheels") or []
    ],
    "keyed_by": "release",
    "fields": _jax_fields,
    "no_source": lambda c: _wheel_source(c) or _jax_from_pypi(c),
    "found_as": lambda c: ("jax", c["release"]),
    "upstream": _through_the_lab_cache,
    # jax and jaxlib are PyPI's: a lab cache fetches them (with their dependencies) into its
    # wheelhouse, from pip's default index unless lab_cache_wheel_upstream names another.
    "also_downloads": lambda c: [
        entry(
            "wheels",
            "jax and jaxlib",
            mirrors=pip_mirrors("jax", c["plan"]["index_url"], c["plan"]["find_links"], "jax"),
            upstream={"index_url": "", "find_links": ""},
            requirements=[f"jax=={c['version']}", f"jaxlib=={c['version']}"],
            python=c["pyver"],
            path=c["settings"]["venv"],
            space="venvs",
        )
    ],
    "wants": lambda plan: {
        "jax": lambda got: got == plan["version"],
        plan["plugin"]: lambda got: got == plan["version"],
        plan["pjrt"]: lambda got: got == plan["version"],
        **{name: bool for name in plan["device_packages"]},
    },
    "pip_says": lambda plan, dist, got: (
        f"{dist} missing (extra device-{dist.rsplit('-', 1)[1]} of rocm)"
        if dist in plan["device_packages"]
        else f"{dist} {got or 'missing'}, wanted {dist}=={plan['version']}"
    ),
    "probed": ("jax_version", "devices"),
    "result": lambda plan, probe: {
        "source": "wheels",
        "jax_requested": plan["version"],
        "plugin_version": (probe.get("dists") or {}).get(plan["plugin"]),
        "rocm_wheels_version": (probe.get("dists") or {}).get("rocm"),
        "gfx_targets": plan["gfx_targets"],
        "build": "rocm" if (probe.get("dists") or {}).get(plan["plugin"]) else "cpu",
    },
    "rocm_build": lambda result: result["build"] == "rocm",
    "sees_gpu": lambda result: any(
        str(d).lower() in ("rocm", "gpu") for d in result["devices"] or []
    ),
    "missing": lambda plan, probe: _device_code_missing(
        "jax_rocm", plan["requirements"][-1], f"ROCm {plan['rocm']}", plan, probe
    ),
    "newer": "",
    "leave_out": "leave JAX off (jax_rocm_enabled: false)",
    "no_wheels": _jax_no_wheels,
    "not_rocm": lambda plan, result: (
        f"jax {result['jax_version']} without its ROCm plugin ({plan['plugin']} is missing)",
        f"ROCm's multi-arch index ({plan['wheels_index_url']}) has the plugin. ",
    ),
    "rocm_only": ": only with its ROCm plugin can it",
    "no_gpu": lambda plan, result: (
        f"jax {result['jax_version']} lists the devices"
        f" {_listed(result['devices'] or []) or 'none'} and no ROCm GPU among them. Check that"
        f" the kernel driver matches ROCm {plan['rocm']}"
    ),
}


# The frameworks by the names of the support catalog's "frameworks" (which point to their tables).
FRAMEWORKS = {"pytorch": PYTORCH, "tensorflow": TENSORFLOW, "jax": JAX}


def _of_role(plan: dict, role: str) -> dict:
    """The framework whose plan (or settings) PLAN is, by its role (PyTorch's by the source)."""
    roles = {"pytorch_rocm": _pytorch(plan), "tensorflow_rocm": TENSORFLOW, "jax_rocm": JAX}
    framework = roles.get(str(role))
    if framework is None:
        raise ValueError(f"{role!r} is no framework role ({_listed(roles)})")
    return framework


def framework_plan(settings: dict, role, python: dict | None = None) -> dict:
    """What ROLE installs from where, or the refusal: the engine over the role's table, its
    settings and the Python the venv would get. Role framework_venv's plan entry point."""
    return _engine_plan(_of_role(settings, role), settings, python)


def framework_pip(plan: dict, role, probe: dict | None = None, require=False) -> dict:
    """What pip must do in ROLE's venv, given PROBE: why it runs (reasons; none: it need not),
    whether it reinstalls (force_reinstall), and the other distributions that own the framework's
    module (others: removed first). Role framework_venv's install entry point acts on it."""
    return _engine_pip(_of_role(plan, role), plan, probe, require)


def framework_record(plan: dict, role, probe, gpu_present, require, interpreter, venv) -> dict:
    """The record of what ROLE's interpreter has (result), and the refusal of a framework that
    cannot use an AMD GPU ("" when none applies). Role framework_venv's result entry point."""
    return _engine_record(
        _of_role(plan, role), plan, probe or {}, gpu_present, require, interpreter, venv
    )


# The roles' plans are the engine's (plugins/filter/<name>.yml says their arguments).
tensorflow_rocm_plan = partial(_engine_plan, TENSORFLOW)


class FilterModule:
    def filters(self):
        return {
            "pytorch_rocm_index": pytorch_rocm_index,
            "pytorch_rocm_plan": pytorch_rocm_plan,
            "tensorflow_rocm_defaults": tensorflow_rocm_defaults,
            "tensorflow_rocm_plan": tensorflow_rocm_plan,
            "framework_plan": framework_plan,
            "framework_pip": framework_pip,
            "framework_record": framework_record,
        }
