"""``rocmlab health``: its arguments, and the run over rocmlab.health. Needs no PyTorch (tier 1
and 2 start processes that do)."""

from __future__ import annotations

import argparse
import re
import signal
import socket
import sys
from pathlib import Path

from rocmlab import __version__, docs_url
from rocmlab.commands import smoke as smoke_command
from rocmlab.commands.argtypes import Parser, existing_directory, number
from rocmlab.common import contract
from rocmlab.common.errors import ExitCode, OutputError, RocmlabError, UsageError
from rocmlab.common.outputs import writable_output

NAME = "health"
EXIT_CODES = contract.exit_codes_help(NAME)
_SIZE = re.compile(r"^(\d+)\s*([KMGT]?)(?:i?B)?$", re.IGNORECASE)
_ACCOUNT = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31}\$?$")


def size(text: str) -> int:
    """``5G``, ``300M``, ``512K``, ``1024`` (bytes; binary units) as bytes."""
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size: expected a whole number of bytes with an optional K, M, G "
            "or T (binary units), e.g. 5G or 300M"
        )
    return int(match[1]) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[match[2].lower()]


def account_name(text: str) -> str:
    """An account name as /etc/passwd holds one."""
    if not _ACCOUNT.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an account name: letters, digits, '.', '_' and '-', at most 32"
        )
    return text


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rocmlab health``."""
    from rocmlab.health.context import (
        DEFAULT_MIN_FREE,
        DEFAULT_MIN_FREE_BOOT,
        DEFAULT_SMOKE_DATA,
        DEFAULT_STATE_DIR,
    )
    from rocmlab.health.table import tier_budget

    parser = sub.add_parser(
        NAME,
        help="check a running node in tiers a scheduler can afford: one line per check with "
        "the fix",
        description=(
            f"Tier 0 (passive, {tier_budget(0):g} s): the driver, the device nodes and their\n"
            "group, the accounts' groups, the GPU count, new amdgpu lines in the kernel log,\n"
            "DKMS, PCIe links, RAS error counters and PCIe replays that rose since the last\n"
            "run, ROCm and framework versions against what was provisioned, free space.\n"
            f"Tier 1 ({tier_budget(1):g} s): tier 0 and a matrix multiply with an exact sum on\n"
            f"each GPU. Tier 2 ({tier_budget(2):g} s): tier 1, the smoke job and the all-reduce\n"
            "across the node's GPUs. Every check runs in its own process, cut at its budget.\n"
            "Prints PASS/WARN/FAIL/SKIP/ERROR per check with the fix; the checks:\n"
            f"{docs_url('health.md')}"
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--tier",
        type=int,
        choices=(0, 1, 2),
        default=0,
        help="0 passive, 1 and a GPU computation, 2 and the smoke job (default: %(default)s)",
    )
    for option, default, what in (
        ("--sysfs-root", "/sys", "where sysfs is (a copied tree for tests)"),
        ("--dev-root", "/dev", "where /dev is"),
        ("--root", "/", "where the rest of the file system is: /etc, /opt, /var/lib, /boot, "
         "/proc"),
    ):  # fmt: skip
        parser.add_argument(
            option, type=Path, default=Path(default), metavar="DIR",
            help=f"{what} (default: %(default)s)",
        )  # fmt: skip
    parser.add_argument(
        "--kernel-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="read the kernel log from FILE (default: `journalctl -k -b 0`, else `dmesg`)",
    )
    parser.add_argument(
        "--commands-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="answer `dkms status` and the kernel log from files saved in DIR, as "
        "`rocmlab doctor --commands-from` does",
    )
    parser.add_argument(
        "--expect-gpus",
        type=number(int, 0, 1024, "a whole number from 0 to 1024"),
        default=None,
        metavar="N",
        help="GPUs the KFD topology must list; 0 = a host without GPU on purpose (tier 1 then "
        "computes on the CPU) (default: at least one)",
    )
    parser.add_argument(
        "--account",
        type=account_name,
        action="append",
        default=[],
        metavar="NAME",
        dest="accounts",
        help="an account that trains here: its groups in /etc/group must open the GPU nodes "
        "(repeat for more; default: the account running the check, none when it is root)",
    )
    parser.add_argument(
        "--render-group",
        default="render",
        metavar="NAME",
        help="the group the GPU nodes must belong to (default: %(default)s)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        metavar="DIR",
        help="where the counters and kernel log lines of the last run are kept (created when "
        "missing) (default: %(default)s)",
    )
    parser.add_argument(
        "--min-free",
        type=size,
        default=DEFAULT_MIN_FREE,
        metavar="SIZE",
        help="free space below which /opt/rocm's and the venvs' file systems warn (a quarter "
        f"of it fails) (default: {DEFAULT_MIN_FREE >> 30}G)",
    )
    parser.add_argument(
        "--min-free-boot",
        type=size,
        default=DEFAULT_MIN_FREE_BOOT,
        metavar="SIZE",
        help=f"the same for /boot (default: {DEFAULT_MIN_FREE_BOOT >> 20}M)",
    )
    parser.add_argument(
        "--smoke-data",
        type=Path,
        default=DEFAULT_SMOKE_DATA,
        metavar="DIR",
        help="tier 2: the smoke job's --data (default: %(default)s, where the smoke_test role "
        "stages it)",
    )
    parser.add_argument(
        "--smoke-dataset",
        default="mnist",
        metavar="NAME",
        help="tier 2: the smoke job's --dataset (default: %(default)s)",
    )
    parser.add_argument(
        "--smoke-arg",
        action="append",
        default=[],
        metavar="ARG",
        dest="smoke_args",
        help="tier 2: one more argument for `rocmlab smoke` (repeat: --smoke-arg=--epochs "
        "--smoke-arg=1); --data, --dataset and --json are health's own",
    )
    parser.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        dest="json_path",
        help="also write the report as JSON to FILE, atomically (- = stdout, and then the "
        "lines go to stderr)",
    )
    parser.add_argument(
        "--textfile",
        type=Path,
        default=None,
        metavar="FILE.prom",
        help="also write the verdict for node_exporter's textfile collector, atomically "
        "(the file must end in .prom, in the collector's directory)",
    )
    parser.add_argument(
        "--slurm-gate",
        action="store_true",
        help="then act on the verdict in Slurm (as HealthCheckProgram, as root): a failure drains "
        "the node with Reason='rocmlab: CHECK: FIX' and records the drain in --state-dir; a pass "
        "resumes it only when that record says rocmlab drained it, this tier covers it and the "
        "checks that drained it passed; an operator's drain stays",
    )
    parser.add_argument(
        "--slurm-node",
        default=None,
        metavar="NAME",
        help="--slurm-gate: the node's name in Slurm (default: $SLURMD_NODENAME, which slurmd "
        "sets, else the short host name)",
    )
    parser.add_argument(
        "--scontrol",
        default="scontrol",
        metavar="PATH",
        help="--slurm-gate: the scontrol command (default: %(default)s, from PATH)",
    )
    parser.set_defaults(func=run)


RESERVED_SMOKE_ARGS = ("--data", "--dataset", "--json", "-h", "--help")


def _check_smoke_args(args: argparse.Namespace) -> None:
    """The pass-through arguments, parsed by ``rocmlab smoke``'s own parser before anything
    runs: what it would refuse is refused here (exit 2)."""
    for arg in args.smoke_args:
        if arg.split("=", 1)[0] in RESERVED_SMOKE_ARGS:
            raise UsageError(
                f"--smoke-arg {arg}: set by rocmlab health itself (use --smoke-data, "
                "--smoke-dataset; the report is read back from a private directory)"
            )
    # rocmlab smoke's own parser: what it would refuse is refused here.
    sub = Parser(prog="rocmlab").add_subparsers(dest="command")
    smoke_command.add_parser(sub)
    smoke = sub.choices["smoke"]
    argv = ["--data", str(args.smoke_data), "--dataset", args.smoke_dataset, *args.smoke_args]
    try:
        smoke.parse_args(argv)
    except UsageError as exc:
        first = str(exc).splitlines()[0]
        raise UsageError(f"--smoke-arg/--smoke-dataset: rocmlab smoke says: {first}") from None


def run(args: argparse.Namespace) -> int:
    """Run ``rocmlab health``."""
    from rocmlab.common import rocm_installed
    from rocmlab.doctor.context import Context, recorded_runner, run_command
    from rocmlab.doctor.model import format_line, format_verdict, write_json
    from rocmlab.health import textfile
    from rocmlab.health.context import HealthContext, Options
    from rocmlab.health.report import document
    from rocmlab.health.run import run as run_health

    for option, path in (
        ("--sysfs-root", args.sysfs_root),
        ("--dev-root", args.dev_root),
        ("--root", args.root),
    ):
        existing_directory(option, path)
    if args.commands_from is not None:
        existing_directory("--commands-from", args.commands_from)
    if args.kernel_log is not None and not args.kernel_log.is_file():
        raise UsageError(f"--kernel-log {args.kernel_log}: not a readable file")
    if args.state_dir.exists() and not args.state_dir.is_dir():
        raise UsageError(f"--state-dir {args.state_dir}: not a directory")
    if args.json_path not in (None, "-"):
        writable_output("--json", Path(args.json_path))
    if args.textfile is not None:
        if args.textfile.suffix != ".prom":
            raise UsageError(
                f"--textfile {args.textfile}: node_exporter's textfile collector reads only "
                "files ending in .prom"
            )
        writable_output("--textfile", args.textfile)
    if args.tier >= 2:
        _check_smoke_args(args)
    slurm_node = _slurm_node(args) if args.slurm_gate else None
    runner = recorded_runner(args.commands_from) if args.commands_from else run_command
    ctx = Context(
        sysfs_root=args.sysfs_root,
        dev_root=args.dev_root,
        root=args.root,
        run=runner,
        expect_gpus=args.expect_gpus,
    )
    options = Options(
        tier=args.tier,
        accounts=tuple(dict.fromkeys(args.accounts)),
        render_group=args.render_group,
        min_free=args.min_free,
        min_free_boot=args.min_free_boot,
        smoke_data=args.smoke_data.absolute(),  # the job runs in a directory of its own
        smoke_dataset=args.smoke_dataset,
        smoke_args=tuple(args.smoke_args),
        kernel_log_file=args.kernel_log,
    )
    h = HealthContext(ctx, options, python=sys.executable)
    # SIGTERM (systemd stopping the timer's unit, a scheduler) ends the run as SIGINT does: the
    # checks still running are killed with what they started, nothing is written.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    done = run_health(h, args.state_dir, args.tier)
    out = sys.stderr if args.json_path == "-" else sys.stdout
    for result in done.results:
        print(format_line(result), file=out)
    print(
        f"{format_verdict(done.results)} in {done.duration:.1f} s "
        f"(tier {done.tier}, budget {done.budget:g} s)",
        file=out,
    )
    doc = document(
        done,
        version=__version__,
        host=socket.gethostname(),
        user=ctx.user.name,
        rocm=rocm_installed.summary(ctx.rocm()),
    )
    for option, target, write in (
        ("--json", args.json_path, lambda t: write_json(doc, t)),
        ("--textfile", args.textfile, lambda t: textfile.write(Path(t), doc, done.finished)),
    ):
        if target is None:
            continue
        try:
            write(str(target))
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise OutputError(f"{option} {target}: cannot write it ({why})") from None
    if slurm_node is not None:
        _slurm_gate(doc, slurm_node, args, runner=run_command, out=out)
    return int(doc["exit_code"])


class SlurmGateFailed(RocmlabError):
    """--slurm-gate could not read or change the node's state: exit 6."""

    exit_code = ExitCode.SLURM_GATE_FAILED


def _slurm_node(args: argparse.Namespace) -> str:
    """The node's name in Slurm: --slurm-node, else $SLURMD_NODENAME, else the short host name."""
    import os

    from rocmlab.health.slurm import SlurmGateError, node_name

    if args.slurm_node is not None:
        source, name = "--slurm-node", args.slurm_node
    elif os.environ.get("SLURMD_NODENAME"):
        source, name = "SLURMD_NODENAME", os.environ["SLURMD_NODENAME"]
    else:
        source, name = "the host name", socket.gethostname().split(".")[0]
    try:
        return node_name(name)
    except SlurmGateError as exc:
        raise UsageError(f"{source}: {exc}") from None


def _slurm_gate(doc: dict, node: str, args: argparse.Namespace, runner, out) -> None:
    """Drain or resume ``node`` as the verdict says (rocmlab.health.slurm), with root's record
    of rocmlab's drains in the state directory; exit 6 when its state could not be read or
    changed."""
    from rocmlab.common.textsafe import for_terminal
    from rocmlab.health.drains import this_boot
    from rocmlab.health.slurm import SlurmGateError, gate
    from rocmlab.health.table import resume_tiers

    try:
        action = gate(
            doc, node, runner, resume_tiers(), args.scontrol, state_dir=args.state_dir,
            boot_id=this_boot(),
        )  # fmt: skip
    except SlurmGateError as exc:
        raise SlurmGateFailed(f"--slurm-gate: {for_terminal(str(exc))}") from None
    print(f"slurm: {for_terminal(action.why)}", file=out)
