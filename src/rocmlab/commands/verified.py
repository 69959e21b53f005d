"""``rocmlab verified``: which smoke reports are runs on real hardware, recorded for the README's
"Verified on hardware" table. Needs no PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rocmlab import docs_url
from rocmlab.common import contract
from rocmlab.common.errors import OutputError, UsageError

if TYPE_CHECKING:
    from rocmlab.fleet.verified import Outcome

NAME = "verified"
EXIT_CODES = contract.exit_codes_help(NAME)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rocmlab verified``."""
    verified = sub.add_parser(
        NAME,
        help="record the smoke reports that passed on real hardware (the README's Verified on)",
        description=(
            "Read every smoke report in REPORTS_DIR (<host>.json, as the rollout fetched them)\n"
            "and print, per report, the run it records (OS, ROCm, GPU, date, rocmlab version)\n"
            "or why it is refused: a run counts only when it passed on an AMD GPU through ROCm\n"
            "on a machine of its own (not a container, /dev/kfd present) whose OS it names.\n"
            "With --add-to FILE the runs are added to FILE (the repository's verified file,\n"
            "from which the README's table is made), one entry per report with its SHA-256.\n"
            f"{docs_url('verified.md')}"
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verified.add_argument(
        "reports_dir",
        type=Path,
        metavar="REPORTS_DIR",
        help="where the rollout fetched the smoke reports (the playbooks' reports/)",
    )
    verified.add_argument(
        "--add-to",
        type=Path,
        default=None,
        metavar="FILE",
        help="add the runs to this verified file (created when missing; its directory must "
        "exist); without it nothing is written",
    )
    verified.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``rocmlab verified``: 0 when every report is a recorded run, 1 when one is refused
    (the lines say why), 2 for input refused before anything is written, 5 when FILE could not
    be written."""
    from rocmlab.common.outputs import writable_output, write_atomic
    from rocmlab.common.textsafe import for_terminal
    from rocmlab.fleet.fields import RecordError
    from rocmlab.fleet.text import decodable
    from rocmlab.fleet.verified import document, read_reports, read_runs

    target: Path | None = args.add_to
    runs = []
    if target is not None:
        writable_output("--add-to", target)
        try:
            runs = read_runs(target)
        except RecordError as exc:
            raise UsageError(
                f"--add-to {decodable(str(target))}: not a verified file: {exc}; nothing was "
                "written"
            ) from None
    if not args.reports_dir.is_dir():
        raise UsageError(
            f"REPORTS_DIR {decodable(str(args.reports_dir))!r}: no such directory (expected the "
            "directory the rollout fetched the smoke reports into)"
        )
    try:
        outcomes = read_reports(args.reports_dir, (r["report_sha256"] for r in runs))
    except RecordError as exc:
        raise UsageError(for_terminal(str(exc))) from None
    if not outcomes:
        raise UsageError(
            f"REPORTS_DIR {decodable(str(args.reports_dir))!r} holds no smoke report (<host>.json)"
        )
    width = max(len(for_terminal(o.name)) for o in outcomes)
    for outcome in outcomes:
        print(for_terminal(f"{outcome.name:<{width}}  {_said(outcome)}"))
    new = [o.run for o in outcomes if o.run is not None and not o.known]
    if target is not None and new:
        try:
            write_atomic(target, document([*runs, *new]))
        except OSError as exc:
            raise OutputError(
                f"--add-to {decodable(str(target))}: cannot write it ({exc.strerror or exc})"
            ) from None
        print(for_terminal(f"added {len(new)} run(s) to {decodable(str(target))}"))
    refused = sum(o.refused is not None for o in outcomes)
    if refused:
        print(f"{refused} of {len(outcomes)} report(s) refused: not recorded")
    return 1 if refused else 0


def _said(outcome: Outcome) -> str:
    """One report's line: the run it records, or why it is refused."""
    if outcome.run is None:
        return f"refused: {outcome.refused}"
    run = outcome.run
    gpu = f"{run['gfx_arch']} ({run['gpu']})" if run["gpu"] else run["gfx_arch"]
    rocm = run["rocm_release"] or "unknown"
    where = f"{run['rocm_source']} " if run["rocm_source"] else ""
    state = "already recorded" if outcome.known else "run"
    return (
        f"{state}: {run['os']}, ROCm {where}{rocm}, {gpu}, {run['created'][:10]}, "
        f"rocmlab {run['rocmlab_version']}"
    )
