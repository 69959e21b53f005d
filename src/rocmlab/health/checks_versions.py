"""Tier 0: the installed ROCm and frameworks against what the host was provisioned with.

The pytorch_rocm and tensorflow_rocm roles record what they installed in
/etc/rocmlab/pytorch.json and /etc/rocmlab/tensorflow.json (framework_venv's record task); the
known-good record /var/lib/rocmlab/known-good.json, when a rollout wrote one, names the ROCm
release the host last passed its health gate with. What is installed now is read passively: the
doctor's reading of ROCm (/opt/rocm/.info/version, dpkg), and each framework's distribution
metadata in its venv (``<name>-<version>.dist-info/METADATA``), so no framework is imported.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

from rocmlab.common.support_catalog import major_minor, version_numbers
from rocmlab.doctor.checks_software import check_rocm_release, installed_rocm
from rocmlab.doctor.context import MIB, SMALL_FILE_LIMIT, Context
from rocmlab.doctor.model import FAIL, Result, failed, passed, skipped, warned
from rocmlab.health.checks_node import worst
from rocmlab.health.context import (
    KNOWN_GOOD_RECORD,
    PYTORCH_RECORD,
    TENSORFLOW_RECORD,
    HealthContext,
    Outcome,
)

KNOWN_GOOD_LIMIT = 4 * MIB  # it lists every managed package and each venv's freeze
METADATA_NAMES = ("METADATA", "PKG-INFO")
_VERSION_LINE = re.compile(r"^Version:\s*(\S+)\s*$", re.MULTILINE)


def read_record(ctx: Context, absolute: str, limit: int = SMALL_FILE_LIMIT) -> tuple[Any, str]:
    """(the JSON object in a record, "") ; (None, "") when the file is absent; (None, why) when
    it is there but not a readable JSON object."""
    read = ctx.read_file(ctx.path(absolute), limit)
    if read.data is None:
        return None, (read.error if read.refused else "")
    if read.truncated:
        return None, f"{absolute} is larger than {limit} bytes"
    try:
        doc = json.loads(read.data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"{absolute} is not valid JSON ({type(exc).__name__})"
    if not isinstance(doc, dict):
        return None, f"{absolute} is not a JSON object"
    return doc, ""


def _text(doc: dict[str, Any], key: str) -> str | None:
    value = doc.get(key)
    return value if isinstance(value, str) and value.strip() else None


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def site_dirs(ctx: Context, venv: str | None, python: str | None) -> list[Path]:
    """Where a record's interpreter finds its packages: the venv's site-packages, or Debian's
    dist-packages for the system Python."""
    if venv is None and python and not python.startswith("/usr/"):
        venv = str(Path(python).parent.parent)
    if venv is not None:
        lib = ctx.path(venv) / "lib"
        try:
            return sorted(p / "site-packages" for p in lib.glob("python3*"))
        except OSError:
            return []
    found = [ctx.path("/usr/lib/python3/dist-packages")]
    with contextlib.suppress(OSError):
        found += sorted(p / "dist-packages" for p in ctx.path("/usr/local/lib").glob("python3*"))
    return found


def installed_version(ctx: Context, dirs: list[Path], name: str) -> str | None:
    """The version in the distribution metadata of ``name`` in ``dirs`` (the first found)."""
    wanted = _normalise(name)
    for directory in dirs:
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            continue
        for entry in entries:
            stem, dot, kind = entry.name.rpartition(".")
            if not dot or kind not in ("dist-info", "egg-info"):
                continue
            if _normalise(stem.split("-", 1)[0]) != wanted:
                continue
            for meta in METADATA_NAMES:
                text = ctx.read_path(entry / meta)
                header = (text or "").split("\n\n", 1)[0]
                match = _VERSION_LINE.search(header)
                if match:
                    return match[1]
    return None


def check_framework_versions(h: HealthContext) -> Outcome:
    """PyTorch and TensorFlow in their venvs against the versions the roles recorded."""
    ctx = h.doctor
    results: list[Result] = []
    for record, name_key, version_key, role in (
        (PYTORCH_RECORD, None, "torch_version", "pytorch_rocm"),
        (TENSORFLOW_RECORD, "package", "package_version", "tensorflow_rocm"),
    ):
        doc, why = read_record(ctx, record)
        if doc is None:
            if why:
                results.append(warned(f"{why}: cannot compare", f"rerun the {role} role"))
            continue
        name = _text(doc, name_key) if name_key else "torch"
        want = _text(doc, version_key)
        if name is None or want is None:
            results.append(
                warned(f"{record} names no {name_key or 'torch'} version", f"rerun the {role} role")
            )
            continue
        venv, python = _text(doc, "venv"), _text(doc, "python")
        where = venv or python or "the system Python"
        if venv is not None and not ctx.path(venv).is_dir():
            results.append(
                failed(
                    f"the {name} venv {venv} is gone ({record} records {name} {want} there)",
                    f"rerun the {role} role to rebuild it",
                )
            )
            continue
        got = installed_version(ctx, site_dirs(ctx, venv, python), name)
        if got is None:
            results.append(
                failed(
                    f"{name} is no longer installed in {where} ({record} records {want})",
                    f"rerun the {role} role to reinstall it",
                )
            )
        elif got != want:
            results.append(
                warned(
                    f"{name} {got} is installed in {where}, {want} was provisioned ({record})",
                    f"rerun the {role} role: it puts back the configured version, or records "
                    "the new one when the configuration changed",
                )
            )
        else:
            results.append(passed(f"{name} {got} in {where}, as provisioned"))
    if not results:
        return Outcome(
            skipped(f"no {PYTORCH_RECORD} or {TENSORFLOW_RECORD}: no framework provisioned here")
        )
    return Outcome(_combine(results))


def _combine(results: list[Result]) -> Result:
    status = worst(results)
    fixes = [r.fix for r in results if r.status == status and r.fix]
    return Result(status, "; ".join(r.saw for r in results), fixes[0] if fixes else None)


def check_rocm_version(h: HealthContext) -> Outcome:
    """The installed ROCm release against the known-good record and what the frameworks were
    built for; without a record, the doctor's rocm_release check."""
    ctx = h.doctor
    own = check_rocm_release(ctx)
    if own.status == FAIL:  # half-installed packages: nothing else matters first
        return Outcome(own)
    rocm = installed_rocm(ctx)
    full = rocm.amd or rocm.distro
    release = rocm.release
    installed = f"ROCm {full}" if full else "no ROCm"
    findings: list[Result] = []
    notes: list[str] = []
    known, why = read_record(ctx, KNOWN_GOOD_RECORD, KNOWN_GOOD_LIMIT)
    if why:
        findings.append(
            warned(f"{why}: the known-good release cannot be compared", "rerun the rollout")
        )
    elif known is not None and _text(known, "rocm_version"):
        good = _text(known, "rocm_version") or ""
        notes.append(f"known-good {good}")
        if full is None or _upstream_equal(full, good) is False:
            findings.append(
                failed(
                    f"{installed} installed, the host's known-good release is {good} "
                    f"({KNOWN_GOOD_RECORD}): it changed outside a rollout",
                    "rerun the rollout for this host (it upgrades or rolls back to the "
                    "configured release); `apt-mark showhold` and /var/log/apt/history.log "
                    "show what changed it",
                )
            )
    tf, why_tf = read_record(ctx, TENSORFLOW_RECORD)
    if tf is not None and _text(tf, "rocm_version"):
        built = major_minor(_text(tf, "rocm_version") or "")
        notes.append(f"TensorFlow built for {built}")
        if built and built != release:
            findings.append(
                failed(
                    f"{installed} installed, TensorFlow was installed for ROCm {built} "
                    f"({TENSORFLOW_RECORD}): it loads the system's ROCm libraries",
                    "rerun the tensorflow_rocm role for the installed ROCm, or put back "
                    f"ROCm {built} (rocm_repo_version)",
                )
            )
    torch, _unused = read_record(ctx, PYTORCH_RECORD)
    if torch is not None and _text(torch, "hip_version"):
        built = major_minor(_text(torch, "hip_version") or "")
        notes.append(f"torch built for {built}")
        if built and release and built != release:
            findings.append(
                warned(
                    f"{installed} installed, torch was installed for ROCm {built} "
                    f"({PYTORCH_RECORD}; its wheel brings its own runtime)",
                    f'pytorch_rocm_rocm_version: "{release}" (role pytorch_rocm) installs the '
                    "wheel built for the installed ROCm",
                )
            )
    if why_tf:
        findings.append(warned(f"{why_tf}: cannot compare", "rerun the tensorflow_rocm role"))
    if not notes and not findings:
        return Outcome(own)  # nothing recorded to compare with: what the doctor says
    if not findings:
        return Outcome(passed(f"{installed}, as provisioned ({', '.join(notes)})", own.evidence))
    result = _combine(findings)
    result.evidence = list(own.evidence)
    return Outcome(result)


def _upstream_equal(installed: str, recorded: str) -> bool | None:
    """Whether two ROCm versions name the same release (6.4.2 = 6.4.2-120 = 6.4.2.60402);
    major.minor.patch compared, major.minor when one has no patch."""

    a, b = version_numbers(installed), version_numbers(recorded)
    if a is None or b is None:
        return None
    length = min(len(a), len(b))
    return a[:length] == b[:length]
