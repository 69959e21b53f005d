"""Command line: ``rocmlab COMMAND``. A thin dispatcher: each command's arguments and entry point
live in its module under ``rocmlab.commands``.

Importing this module does not import torch: the commands that need none run on hosts without it.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from rocmlab import __version__, docs_url
from rocmlab.commands import (
    allreduce,
    doctor,
    fetch_mnist,
    fleet_report,
    health,
    smoke,
    verified,
)
from rocmlab.commands.argtypes import Parser
from rocmlab.common import contract
from rocmlab.common.errors import ExitCode, RocmlabError

# In the order ``rocmlab --help`` lists them.
COMMANDS = (smoke, fetch_mnist, doctor, health, fleet_report, verified, allreduce)


def build_parser() -> Parser:
    """The ``rocmlab`` argument parser."""
    parser = Parser(
        prog="rocmlab",
        description="Prove that ROCm (or CUDA) GPUs train correctly, one machine or a lab.",
        epilog=f"{contract.exit_codes_help()}\n(each command's --help lists its own; "
        f"{docs_url('cli.md')})",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rocmlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    parser.subcommands = sub.choices
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rocmlab`` console script; the exit code is the table's
    (rocmlab/data/cli_contract.json): a refused argument or path is one line and exit 2."""
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:
            # Reported by the command's own parser, with its usage line.
            owner = parser.subcommands.get(args.command, parser) if args.command else parser
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        if args.command is None:
            parser.print_help(sys.stderr)
            return int(ExitCode.BAD_ARGUMENTS)
        return int(args.func(args))
    except RocmlabError as exc:
        print(f"rocmlab: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a fault in rocmlab: never the code of a failed check
        traceback.print_exc()
        print(f"rocmlab: error: a fault in rocmlab ({type(exc).__name__}); the traceback above "
              "says where: please report it", file=sys.stderr)  # fmt: skip
        return int(ExitCode.FAULT)
