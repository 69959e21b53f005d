"""``rocmlab fleet-report``: is every declared host of the lab ready? Needs no PyTorch."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from rocmlab.commands.argtypes import SLOW_FRACTION
from rocmlab.errors import UsageError

NAME = "fleet-report"
USAGE_EXIT = 2
OUTPUTS = ("fleet.json", "fleet.html", "fleet.junit.xml")
EXIT_CODES = """exit codes:
  0  every declared host is ready
  1  a declared host is not ready (the table says which and why)
  2  bad usage: arguments, an inventory that cannot be read, REPORTS_DIR missing or not writable"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rocmlab fleet-report``."""
    report = sub.add_parser(
        NAME,
        help="say which declared hosts are ready, from the smoke reports and rollout records",
        description=(
            "Read every declared host's smoke report (REPORTS_DIR/<host>.json) and the\n"
            "rollout's preflight and rollout records (REPORTS_DIR/fleet/), write\n"
            "REPORTS_DIR/fleet.json, fleet.html and fleet.junit.xml, and print one line per host.\n"
            "A declared host without a readable report fails with the reason; versions that\n"
            "differ from the fleet's majority (drift) and hosts slower than their GPU model's\n"
            "median (slow) are flagged, not failed. See docs/fleet-report.md."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage_exit=USAGE_EXIT,
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
    report.set_defaults(func=run)


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` atomically: a reader sees the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}", USAGE_EXIT) from None


def run(args: argparse.Namespace) -> int:
    """Run ``rocmlab fleet-report``."""
    import json

    from rocmlab.fleet.html import fleet_html
    from rocmlab.fleet.inventory import InventoryError, parse_host_list, read_inventory
    from rocmlab.fleet.junit import junit_xml
    from rocmlab.fleet.rules import build_fleet
    from rocmlab.fleet.table import table_lines

    reports_dir: Path = args.reports_dir
    if not reports_dir.is_dir():
        raise UsageError(
            f"REPORTS_DIR {str(reports_dir)!r}: no such directory "
            "(expected the directory the rollout fetched the reports into)",
            USAGE_EXIT,
        )
    try:
        if args.hosts is not None:
            declared = parse_host_list(args.hosts)
        else:
            declared = read_inventory(args.inventory, shutil.which("ansible-inventory"))
    except InventoryError as exc:
        raise UsageError(str(exc), USAGE_EXIT) from None
    if "fleet" in declared.hosts:
        raise UsageError(
            f"{declared.source}: host 'fleet' cannot be reported: its report would be "
            f"{reports_dir / 'fleet.json'}, which is the fleet report's own output",
            USAGE_EXIT,
        )
    fleet = build_fleet(reports_dir, declared, args.slow_fraction)
    _write(reports_dir / "fleet.json", (json.dumps(fleet, indent=2) + "\n").encode())
    _write(reports_dir / "fleet.html", fleet_html(fleet).encode())
    _write(reports_dir / "fleet.junit.xml", junit_xml(fleet))
    for line in table_lines(fleet):
        print(line)
    print(f"wrote {', '.join(str(reports_dir / name) for name in OUTPUTS)}")
    return 0 if fleet["ready"] else 1
