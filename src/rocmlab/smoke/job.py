"""Running ``rocmlab smoke``: its report, its exit code, and what happens when it is interrupted.

No torch at import: the report exists before torch is imported, so a run that torch cannot start,
or that SIGINT/SIGTERM stops at any point, still writes one. The checks themselves are in
``rocmlab.smoke.checks``.
"""

from __future__ import annotations

import traceback
from typing import Any

from rocmlab.common.errors import ExitCode, OutputError, RocmlabError
from rocmlab.smoke import rocm_wheels
from rocmlab.smoke.interrupt import Interrupted, Phase, interruptible
from rocmlab.smoke.options import SmokeOptions
from rocmlab.smoke.report import new_report, summary_lines, write_report
from rocmlab.smoke.system import host_system
from rocmlab.torchjob.distenv import DistContext, context_from_env
from rocmlab.torchjob.progress import Progress


def run_smoke(options: SmokeOptions) -> int:
    """Run the job; return the exit code. A RocmlabError (exit 2-4, or 130/143 when interrupted)
    propagates after the report is written, for the CLI to print (once: the summary then leaves
    it out)."""
    ctx = context_from_env()
    # The machine's system is read where the report is written: by rank 0.
    system = host_system() if ctx.is_main else None
    report = new_report(options.report_fields(), ctx.world_size, system)
    progress = Progress(enabled=ctx.is_main)
    phase = Phase("importing torch")
    failure: RocmlabError | None = None
    with interruptible(phase):
        try:
            try:
                code = _checks(options, ctx, report, progress, phase)
            except Interrupted:
                raise
            except RocmlabError as exc:
                failure, code = exc, int(exc.exit_code)
                report.update(passed=False, error=str(exc), exit_code=code)
            except Exception as exc:  # a GPU stack that crashes has failed the smoke test
                traceback.print_exc()
                code = int(ExitCode.CHECK_FAILED)
                report.update(passed=False, error=crash_message(exc), exit_code=code)
            else:
                report["exit_code"] = code
            phase.enter("writing the report")
            _finish(options, ctx, report, progress, said_later=failure is not None)
        except Interrupted as exc:
            failure = exc
            report.update(passed=False, error=str(exc), exit_code=exc.exit_code)
            _finish(options, ctx, report, progress, said_later=True)
            if ctx.is_main and options.json_path is not None:
                exc.note = f"report (passed: false) written to {options.json_path}"
    if failure is not None:
        raise failure
    return code


def _checks(
    options: SmokeOptions,
    ctx: DistContext,
    report: dict[str, Any],
    progress: Progress,
    phase: Phase,
) -> int:
    from rocmlab.torchjob.torch_import import import_torch

    if ctx.is_main:
        # Before torch: a venv whose ROCm wheels are broken still reports what rocm-sdk says.
        phase.enter("checking the venv's ROCm wheels (rocm-sdk)")
        report["rocm_wheels"] = rocm_wheels.probe(options.rocm_sdk_timeout)
        phase.enter("importing torch")
    import_torch()
    from rocmlab.smoke.checks import run_checks

    return run_checks(options, ctx, report, progress, phase)


# Substrings of errors the ROCm/CUDA stack raises, and what to do about them.
CRASH_HINTS = (
    (
        ("hipErrorNoBinaryForGpu", "invalid device function", "no kernel image is available"),
        "this PyTorch has no GPU code for this architecture: set HSA_OVERRIDE_GFX_VERSION "
        "(roles/gfx_override) or install a ROCm/PyTorch build that supports the GPU",
    ),
    (
        ("out of memory",),
        "the GPU is out of memory: another process may hold it (rocm-smi / nvidia-smi)",
    ),
)


def crash_message(exc: BaseException) -> str:
    """``Type: message`` of an unexpected error, with a hint for known GPU-stack failures."""
    text = f"{type(exc).__name__}: {exc}"
    for needles, hint in CRASH_HINTS:
        if any(needle in text for needle in needles):
            return f"{text} ({hint})"
    return text


def _finish(
    options: SmokeOptions,
    ctx: DistContext,
    report: dict[str, Any],
    progress: Progress,
    said_later: bool = False,
) -> None:
    """Print the summary and write the report (rank 0 only). ``said_later``: the error propagates
    to the CLI, which prints it (on stderr): the summary leaves it out."""
    if not ctx.is_main:
        return
    for line in summary_lines(report, with_error=not said_later):
        progress.line(line)
    if options.json_path is None:
        return
    try:
        write_report(report, options.json_path)
    except OSError as exc:  # the path was checked before the run; something changed since
        raise OutputError(
            f"--json {options.json_path}: cannot write the report ({exc.strerror or exc})"
        ) from exc
