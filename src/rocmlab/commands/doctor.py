"""``rocmlab doctor``: its arguments, and the run over rocmlab.doctor. Needs no PyTorch."""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

from rocmlab import __version__, docs_url
from rocmlab.commands.argtypes import existing_directory, number
from rocmlab.common import contract
from rocmlab.common.errors import OutputError, UsageError
from rocmlab.common.outputs import writable_output

NAME = "doctor"
EXIT_CODES = contract.exit_codes_help(NAME)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rocmlab doctor``."""
    doctor = sub.add_parser(
        NAME,
        help="diagnose this machine's ROCm setup: one line per check with the fix",
        description=(
            "Check the amdgpu driver, /dev/kfd and the render nodes, the account's groups,\n"
            "the GPUs and their gfx targets, HSA_OVERRIDE_GFX_VERSION and iGPU hiding, the\n"
            "ROCm release against PyTorch's, OpenCL, the kernel log, Secure Boot and DKMS,\n"
            "the kernel against AMD's list, PCIe links and /dev/shm. Prints one line per\n"
            "check: PASS/WARN/FAIL/SKIP/ERROR, what it saw, and the fix. Standard library\n"
            "only; PyTorch is checked when it is importable. The checks, with the symptom each\n"
            f"explains and the fix: {docs_url('doctor.md')}"
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for option, default, what in (
        ("--sysfs-root", "/sys", "where sysfs is (a copied tree for tests)"),
        ("--dev-root", "/dev", "where /dev is"),
        ("--root", "/", "where the rest of the file system is: /etc, /opt/rocm, /var/lib/dpkg, "
         "/proc, /lib/modules"),
    ):  # fmt: skip
        doctor.add_argument(
            option, type=Path, default=Path(default), metavar="DIR",
            help=f"{what} (default: %(default)s)",
        )  # fmt: skip
    doctor.add_argument(
        "--kernel-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="read the kernel log from FILE (default: `journalctl -k -b 0`, else `dmesg`)",
    )
    doctor.add_argument(
        "--commands-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="answer clinfo -l, modinfo, mokutil, dkms status and the kernel log from files "
        "saved in DIR (clinfo-l.txt, modinfo-signer-amdgpu.txt, mokutil-test-key.txt, "
        "dkms-status.txt, journalctl-k.txt or dmesg.txt; a missing file = not installed) "
        "instead of running them",
    )
    doctor.add_argument(
        "--expect-gpus",
        type=number(int, 0, 1024, "a whole number from 0 to 1024"),
        default=None,
        metavar="N",
        help="GPUs the KFD topology must list (integrated ones count); 0 = a host without "
        "GPU on purpose (default: at least one)",
    )
    doctor.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        dest="json_path",
        help="also write the report as JSON to FILE, atomically (- = stdout, and then the "
        "lines go to stderr)",
    )
    doctor.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``rocmlab doctor``."""
    from rocmlab.common import rocm_installed
    from rocmlab.doctor import run_checks
    from rocmlab.doctor.context import Context, load_kernel_log, recorded_runner, run_command
    from rocmlab.doctor.model import document, exit_code, format_line, format_verdict, write_json

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
    if args.json_path not in (None, "-"):
        writable_output("--json", Path(args.json_path))
    runner = recorded_runner(args.commands_from) if args.commands_from else run_command
    ctx = Context(
        sysfs_root=args.sysfs_root,
        dev_root=args.dev_root,
        root=args.root,
        run=runner,
        expect_gpus=args.expect_gpus,
    )
    ctx.kernel_log = load_kernel_log(args.kernel_log, runner)
    results = run_checks(ctx)
    out = sys.stderr if args.json_path == "-" else sys.stdout
    for result in results:
        print(format_line(result), file=out)
    print(format_verdict(results), file=out)
    if args.json_path is not None:
        doc = document(
            results,
            version=__version__,
            host=socket.gethostname(),
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            user=ctx.user.name,
            rocm=rocm_installed.summary(ctx.rocm()),
        )
        try:
            write_json(doc, args.json_path)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise OutputError(f"--json {args.json_path}: cannot write it ({why})") from exc
    return exit_code(results)
