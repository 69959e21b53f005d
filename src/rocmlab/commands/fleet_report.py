"""``rocmlab fleet-report``: is every declared host of the lab ready? Needs no PyTorch."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import traceback
from pathlib import Path

from rocmlab import docs_url
from rocmlab.commands.argtypes import SLOW_FRACTION
from rocmlab.common import contract
from rocmlab.common.errors import ExitCode, OutputError, RocmlabError, UsageError

NAME = "fleet-report"
OUTPUTS = ("fleet.json", "fleet.html", "fleet.junit.xml")
EXIT_CODES = contract.exit_codes_help(NAME)


class Fault(RocmlabError):
    """A fault in rocmlab while making the report (its traceback is printed): exit 70."""

    exit_code = ExitCode.FAULT


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rocmlab fleet-report``."""
    report = sub.add_parser(
        NAME,
        help="say which declared hosts are ready, from the smoke, health and rollout records",
        description=(
            "Read every declared host's smoke report (REPORTS_DIR/<host>.json), its latest\n"
            "health report (REPORTS_DIR/health/<host>.json) and the rollout's preflight and\n"
            "rollout records (REPORTS_DIR/fleet/), write REPORTS_DIR/fleet.json, fleet.html\n"
            "and fleet.junit.xml, and print one line per host. A declared host without a\n"
            "readable report, or whose health verdict is FAIL, fails with the reason; versions\n"
            "that differ from the fleet's majority (drift) and hosts slower than their GPU\n"
            "model's median (slow) are flagged, not failed. The report, field by field:\n"
            f"{docs_url('fleet-report.md')}"
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "reports_dir",
        type=Path,
        metavar="REPORTS_DIR",
        help="where the rollout fetched the reports (the playbooks' reports/)",
    )
    declared = report.add_mutually_exclusive_group(required=True)
    declared.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE",
        help="Ansible inventory (file or directory) declaring the hosts; read with "
        "ansible-inventory when it is on PATH, else parsed as YAML or INI",
    )
    declared.add_argument(
        "--hosts",
        metavar="H1,H2,...",
        help="the declared hosts as a comma-separated list of inventory names",
    )
    report.add_argument(
        "--slow-fraction",
        type=SLOW_FRACTION,
        default=0.7,
        metavar="F",
        help="flag a host as slow below F x the median samples/s of hosts with its GPU model; "
        "F in (0, 1] (default: %(default)s)",
    )
    report.add_argument(
        "--health-max-age",
        type=max_age,
        default=None,
        metavar="AGE",
        help="a host whose latest health report (REPORTS_DIR/health/<host>.json) is missing or "
        "older than AGE is not ready: seconds, or a number with s, m, h or d (e.g. 30m, 2h); "
        "default: shown, never failing (a report whose verdict is FAIL always fails the host)",
    )
    report.set_defaults(func=run)


_AGE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd]?)$")
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def max_age(text: str) -> float:
    """``90``, ``30m``, ``2h``, ``1d`` as seconds (more than 0, at most a year)."""
    match = _AGE.match(text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: expected seconds, or a number with s, m, h or d (e.g. 2h)"
        )
    seconds = float(match[1]) * _AGE_UNITS[match[2]]
    if not 0 < seconds <= 366 * 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: expected more than 0, at "
                                         "most 366d")  # fmt: skip
    return seconds


def run(args: argparse.Namespace) -> int:
    """Run ``rocmlab fleet-report``: a failure to make the report is never 1 (not ready) and
    never a partial set of outputs: 2 (input refused), 5 (outputs not written), 70 (a fault)."""
    import gc

    from rocmlab.common.textsafe import for_terminal

    # The run builds one large tree of records and rows, which the cyclic collector walks
    # again and again as it grows (a tenth of the time at 10,000 hosts, docs/performance.md):
    # it runs less often, not never (a refused record can leave a cycle that holds its text).
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], 10_000), *thresholds[1:])
    try:
        return _run(args)
    except RocmlabError as exc:  # its code kept, its text made safe for a terminal
        exc.args = (for_terminal(str(exc)),)
        raise
    except Exception as exc:  # a fault in rocmlab: still not "a host is not ready"
        for line in traceback.format_exc().splitlines():
            print(for_terminal(line), file=sys.stderr)
        raise Fault(
            for_terminal(f"the report could not be made: {type(exc).__name__}: {exc} (a fault)")
        ) from None
    finally:
        gc.set_threshold(*thresholds)


def _run(args: argparse.Namespace) -> int:
    from rocmlab.common.textsafe import for_terminal
    from rocmlab.fleet.gather import ReportsDirError
    from rocmlab.fleet.html import fleet_html
    from rocmlab.fleet.inventory import InventoryError, parse_host_list, read_inventory
    from rocmlab.fleet.jsonout import file_pieces
    from rocmlab.fleet.junit import junit_chunks
    from rocmlab.fleet.outputs import OutputError as WriteError
    from rocmlab.fleet.outputs import check_destinations, write_all
    from rocmlab.fleet.rules import build_fleet
    from rocmlab.fleet.table import table_lines
    from rocmlab.fleet.text import decodable

    reports_dir: Path = args.reports_dir
    if not reports_dir.is_dir():
        raise UsageError(
            f"REPORTS_DIR {decodable(str(reports_dir))!r}: no such directory "
            "(expected the directory the rollout fetched the reports into)"
        )
    try:
        check_destinations(reports_dir, OUTPUTS)
    except WriteError as exc:
        raise UsageError(
            f"REPORTS_DIR {decodable(str(reports_dir))!r}: {exc}; nothing was written"
        ) from None
    try:
        if args.hosts is not None:
            declared = parse_host_list(args.hosts)
        else:
            declared = read_inventory(args.inventory, shutil.which("ansible-inventory"))
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    if "fleet" in declared.hosts:
        raise UsageError(
            f"{declared.source}: host 'fleet' cannot be reported: its report would be "
            f"{reports_dir / 'fleet.json'}, which is the fleet report's own output"
        )
    try:
        fleet = build_fleet(reports_dir, declared, args.slow_fraction, args.health_max_age)
    except ReportsDirError as exc:
        raise UsageError(f"{exc}; no output was written") from None
    # fleet.json and the JUnit XML are made as they are written (rocmlab.fleet.outputs).
    rendered = {
        "fleet.json": file_pieces(fleet),
        "fleet.html": fleet_html(fleet).encode("utf-8"),
        "fleet.junit.xml": junit_chunks(fleet),
    }
    lines = table_lines(fleet)
    try:
        write_all(reports_dir, rendered)
    except WriteError as exc:
        for line in lines:
            print(line)
        raise OutputError(
            f"cannot write the fleet report into {decodable(str(reports_dir))}: {exc}"
        ) from None
    for line in lines:
        print(line)
    wrote = ", ".join(str(reports_dir / name) for name in OUTPUTS)
    print(f"wrote {for_terminal(decodable(wrote))}")
    return 0 if fleet["ready"] else 1
