"""What the checks read, behind one injectable object.

Every path is under a root that defaults to the live machine (``/sys``, ``/dev``, ``/``) and that
tests point at fixture trees; the environment, the account, the commands (clinfo, modinfo,
mokutil, dkms) and PyTorch are injectable too, so the checks run unchanged on fixtures.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocmlab.common import rocm_installed
from rocmlab.common.hostread import KIB, MIB, HostRead, describe_limit, read_bounded
from rocmlab.common.rocm_wheels import RocmWheels
from rocmlab.common.rocm_wheels import installed as wheels_installed

# Seconds a probed command may take (clinfo on a hung GPU can block), and how long to wait for
# it to end once killed.
COMMAND_TIMEOUT = 20.0
KILL_WAIT = 5.0

# How much of a host file or a command's output is read, at most. sysfs attributes hold at most
# a page; the rest are generous for what a healthy machine has. What is cut is reported by the
# host_files check (and by the check that read it, where it matters).
SMALL_FILE_LIMIT = 64 * KIB  # sysfs attributes, /proc/cmdline, os-release, version files
ACCOUNTS_LIMIT = 4 * MIB  # /etc/group, /etc/passwd
DPKG_STATUS_LIMIT = 32 * MIB  # /var/lib/dpkg/status (a few MiB on a full desktop)
MOUNTS_LIMIT = 1 * MIB  # /proc/mounts
KERNEL_LOG_LIMIT = 16 * MIB  # the kernel log of one boot, from a file or a command
OUTPUT_LIMIT = 16 * MIB  # what a probed command prints on stdout
STDERR_LIMIT = 64 * KIB

DPKG_STATUS = "/var/lib/dpkg/status"


@dataclass(frozen=True)
class CommandResult:
    """What a command printed and how it exited."""

    returncode: int
    stdout: str
    stderr: str = ""
    truncated: bool = False  # stdout was longer than OUTPUT_LIMIT: only its start is here


# argv -> its result, or None when the command is not installed.
CommandRunner = Callable[[Sequence[str]], "CommandResult | None"]


def run_command(
    argv: Sequence[str], timeout: float | None = None, tail: int | None = None
) -> CommandResult | None:
    """Run a probe command on this machine; None when it is not installed.

    Bounded: at most OUTPUT_LIMIT bytes of stdout and STDERR_LIMIT of stderr are kept (a command
    that prints more is stopped, and its result says so), and it may take ``timeout`` s
    (default COMMAND_TIMEOUT). With ``tail`` the command runs on and the last ``tail`` bytes of
    its stdout are kept instead (``truncated`` when more came); a command that runs out of time
    then keeps what it printed before. Never through a shell; the command and its children are
    killed together (its own session) when they run out of time.
    """
    timeout = COMMAND_TIMEOUT if timeout is None else timeout
    if shutil.which(argv[0]) is None:
        return None
    try:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return CommandResult(126, "", str(exc))
    started = time.monotonic()
    try:
        out, err, finished, cut = _bounded_output(process, timeout, tail)
    except BaseException:  # interrupted: the command does not outlive the wait for it
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        raise
    finally:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    stdout = out.decode("utf-8", errors="replace")
    stderr = err.decode("utf-8", errors="replace")
    if finished and (not cut or tail):
        # Both pipes ended; the command may still be running (a child kept them open).
        try:
            code = process.wait(max(0.1, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            finished = False
        else:
            return CommandResult(code, stdout, stderr, truncated=cut)
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    process.kill()
    # Never wait without a bound: a command stuck in the kernel (a hung GPU) ignores SIGKILL
    # until it leaves there; it is left to end on its own.
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(KILL_WAIT)
    if not finished:
        why = f"{argv[0]} did not finish within {timeout:g} s"
        return CommandResult(124, stdout if tail else "", why, truncated=cut)
    # It printed more than OUTPUT_LIMIT: what came up to the bound is kept, the rest not read.
    return CommandResult(0, stdout, stderr, truncated=True)


def _bounded_output(
    process: subprocess.Popen[bytes], timeout: float, tail: int | None = None
) -> tuple[bytes, bytes, bool, bool]:
    """(stdout, stderr, whether both ended in time, whether stdout passed its bound: OUTPUT_LIMIT,
    or with ``tail`` that many bytes, of which the last are kept)."""
    assert process.stdout is not None and process.stderr is not None
    limits = {process.stdout: tail or OUTPUT_LIMIT, process.stderr: STDERR_LIMIT}
    data: dict[object, bytearray] = {process.stdout: bytearray(), process.stderr: bytearray()}
    deadline = time.monotonic() + timeout
    cut = False
    with selectors.DefaultSelector() as selector:
        for stream in limits:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(data[process.stdout]), bytes(data[process.stderr]), False, cut
            for key, _unused in selector.select(left):
                stream = key.fileobj
                chunk = os.read(key.fd, 64 * KIB)
                if not chunk:
                    selector.unregister(stream)
                    continue
                if tail and stream is process.stdout:
                    data[stream] += chunk
                    if len(data[stream]) > tail:
                        del data[stream][:-tail]
                        cut = True
                    continue
                room = limits[stream] - len(data[stream])
                data[stream] += chunk[: max(room, 0)]
                if len(chunk) > room:
                    if stream is process.stdout:
                        return bytes(data[process.stdout]), bytes(data[process.stderr]), True, True
                    selector.unregister(stream)  # more stderr than we keep: the rest is dropped
    return bytes(data[process.stdout]), bytes(data[process.stderr]), True, cut


# The commands the checks run, and the file name each one's output has in a recorded folder.
RECORDED_NAMES = {
    ("clinfo", "-l"): "clinfo-l.txt",
    ("modinfo", "-F", "signer", "amdgpu"): "modinfo-signer-amdgpu.txt",
    ("dkms", "status"): "dkms-status.txt",
    ("mokutil", "--sb-state"): "mokutil-sb-state.txt",
    ("mokutil", "--test-key"): "mokutil-test-key.txt",
    ("journalctl", "-k", "-b", "0", "--no-pager", "-q"): "journalctl-k.txt",
    ("dmesg",): "dmesg.txt",
}


def recorded_runner(folder: Path) -> CommandRunner:
    """A runner that answers from files saved earlier (``--commands-from``): DIR/clinfo-l.txt
    holds what ``clinfo -l`` printed (RECORDED_NAMES lists them all, the kernel log included);
    a missing file means the command is not installed. The key argument of ``mokutil
    --test-key`` is ignored."""

    def answer(argv: Sequence[str]) -> CommandResult | None:
        key = tuple(argv[:2]) if argv[:2] == ["mokutil", "--test-key"] else tuple(argv)
        name = RECORDED_NAMES.get(key)
        if name is None or not (folder / name).exists():
            return None
        read = read_bounded(folder / name, OUTPUT_LIMIT)
        text = read.text()
        if text is None:
            return CommandResult(126, "", f"{folder / name}: {read.error}")
        return CommandResult(0, text, truncated=read.truncated)

    return answer


@dataclass(frozen=True)
class UserInfo:
    """The account the doctor runs as and the groups of this login (not of /etc/group)."""

    name: str
    uid: int
    gid: int
    groups: frozenset[int]


def current_user() -> UserInfo:
    """This process's account and effective groups."""
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = os.environ.get("USER", str(uid))
    return UserInfo(name, uid, os.getgid(), frozenset(os.getgroups()) | {os.getegid()})


@dataclass(frozen=True)
class Group:
    """One line of /etc/group."""

    name: str
    gid: int
    members: tuple[str, ...]


@dataclass(frozen=True)
class KernelLog:
    """The kernel log of this boot, or why it could not be read."""

    text: str | None
    source: str
    error: str = ""
    truncated: bool = False  # longer than KERNEL_LOG_LIMIT: only its start was read


@dataclass
class TorchInfo:
    """What PyTorch says about itself; ``error`` is set when it cannot be imported."""

    error: str = ""
    version: str = ""
    hip: str | None = None
    cuda: str | None = None
    cuda_available: bool = False
    device_count: int = 0
    arch_list: list[str] = field(default_factory=list)
    device_archs: list[str] = field(default_factory=list)


def probe_torch() -> TorchInfo:
    """Import torch (when it is installed) and read its build and devices."""
    try:
        with warnings.catch_warnings():
            # CPU wheels without numpy warn about it on import; that is no finding.
            warnings.simplefilter("ignore")
            import torch
    except ImportError as exc:
        return TorchInfo(error=f"PyTorch is not importable here ({exc})")
    available = bool(torch.cuda.is_available())
    count = torch.cuda.device_count() if available else 0
    archs = []
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        archs.append(str(getattr(props, "gcnArchName", "") or ""))
    return TorchInfo(
        version=str(torch.__version__),
        hip=getattr(torch.version, "hip", None),
        cuda=torch.version.cuda,
        cuda_available=available,
        device_count=count,
        arch_list=list(torch.cuda.get_arch_list()) if available else [],
        device_archs=archs,
    )


@dataclass
class Context:
    """Everything a check may read. Paths are relative to the roots."""

    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    root: Path = Path("/")
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    user: UserInfo = field(default_factory=current_user)
    run: CommandRunner = run_command
    kernel_log: KernelLog | None = None
    torch_probe: Callable[[], TorchInfo] = probe_torch
    expect_gpus: int | None = None
    # This environment's ROCm from wheels (rocm_wheels.installed: the interpreter's venv).
    wheels_probe: Callable[[], RocmWheels | None] = wheels_installed
    # The host files that were refused (not regular files) or cut at their bound, by path.
    unread: dict[str, HostRead] = field(default_factory=dict)
    _torch: TorchInfo | None = field(default=None, repr=False)
    _dpkg: dict[str, dict[str, str]] | None = field(default=None, repr=False)
    _rocm: dict | None = field(default=None, repr=False)
    _wheels: tuple[RocmWheels | None] | None = field(default=None, repr=False)

    def sys(self, *parts: str) -> Path:
        """A path under the sysfs root."""
        return self.sysfs_root.joinpath(*parts)

    def dev(self, *parts: str) -> Path:
        """A path under the /dev root."""
        return self.dev_root.joinpath(*parts)

    def path(self, absolute: str) -> Path:
        """An absolute path of the machine (``/etc/group``) under the root."""
        return self.root / absolute.lstrip("/")

    def read_file(self, path: Path, limit: int = SMALL_FILE_LIMIT) -> HostRead:
        """At most ``limit`` bytes of a host file (hostread.read_bounded); a file refused or
        cut is noted for the host_files check."""
        read = read_bounded(path, limit)
        if read.refused or read.truncated:
            self.unread[str(path)] = read
        return read

    def read_path(self, path: Path, limit: int = SMALL_FILE_LIMIT) -> str | None:
        """A text file (bounded, regular files only), None when missing, unreadable or
        refused."""
        return self.read_file(path, limit).text()

    def read_sys(self, relative: str, limit: int = SMALL_FILE_LIMIT) -> str | None:
        """A text file under the sysfs root, None when it is missing or unreadable."""
        return self.read_path(self.sysfs_root / relative, limit)

    def read(self, absolute: str, limit: int = SMALL_FILE_LIMIT) -> str | None:
        """A text file under the root, None when it is missing or unreadable."""
        return self.read_path(self.path(absolute), limit)

    def torch(self) -> TorchInfo:
        """PyTorch's answers, probed once."""
        if self._torch is None:
            self._torch = self.torch_probe()
        return self._torch

    def rocm_wheels(self) -> RocmWheels | None:
        """The ROCm wheels of the venv the doctor runs in, None without them; read once."""
        if self._wheels is None:
            self._wheels = (self.wheels_probe(),)
        return self._wheels[0]

    def groups(self) -> dict[str, Group]:
        """/etc/group by name."""
        return parse_group(self.read("/etc/group", ACCOUNTS_LIMIT) or "")

    def kernel_release(self) -> str | None:
        """``uname -r`` as /proc/sys/kernel/osrelease gives it."""
        text = self.read("/proc/sys/kernel/osrelease")
        return text.strip() if text and text.strip() else None

    def dpkg_packages(self) -> dict[str, dict[str, str]]:
        """/var/lib/dpkg/status by package name (read once, at most DPKG_STATUS_LIMIT)."""
        if self._dpkg is None:
            self._dpkg = parse_dpkg_status(self.read(DPKG_STATUS, DPKG_STATUS_LIMIT) or "")
        return self._dpkg

    def rocm(self) -> dict:
        """AMD's installed ROCm under the root (rocm_installed.probe, with dpkg's status as read
        above), probed once."""
        if self._rocm is None:
            self._rocm = rocm_installed.probe(str(self.root), packages=self.dpkg_packages())
        return self._rocm

    def os_release(self) -> dict[str, str]:
        """/etc/os-release as a mapping (quotes removed)."""
        text = self.read("/etc/os-release") or self.read("/usr/lib/os-release") or ""
        fields = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.startswith("#"):
                fields[key.strip()] = value.strip().strip("\"'")
        return fields


def read_text(path: Path, limit: int = SMALL_FILE_LIMIT) -> str | None:
    """A small text file, None when it is missing, unreadable or not a regular file; at most
    ``limit`` bytes of it (hostread.read_bounded: never blocks, never opens a device)."""
    return read_bounded(path, limit).text()


def parse_group(text: str) -> dict[str, Group]:
    """/etc/group lines ``name:x:gid:member,member`` by name."""
    groups = {}
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) != 4 or not parts[2].isdigit():
            continue
        members = tuple(member for member in parts[3].split(",") if member)
        groups[parts[0]] = Group(parts[0], int(parts[2]), members)
    return groups


def group_name(groups: dict[str, Group], gid: int) -> str:
    """The name /etc/group gives a gid (the gid itself when it has none)."""
    names = [group.name for group in groups.values() if group.gid == gid]
    return names[-1] if names else str(gid)


def parse_dpkg_status(text: str) -> dict[str, dict[str, str]]:
    """/var/lib/dpkg/status stanzas by package name (Status, Version, ...)."""
    packages: dict[str, dict[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _unused, value = line.partition(":")
            fields[key] = value.strip()
        if "Package" in fields:
            packages[fields["Package"]] = fields
    return packages


def load_kernel_log(path: Path | None, run: CommandRunner) -> KernelLog:
    """The kernel log: FILE when given, else ``journalctl -k -b 0``, else ``dmesg``; at most
    KERNEL_LOG_LIMIT bytes of it."""
    if path is not None:
        read = read_bounded(path, KERNEL_LOG_LIMIT)
        text = read.text()
        if text is None:
            return KernelLog(None, str(path), f"cannot read {path}: {read.error}")
        return KernelLog(text, str(path), truncated=read.truncated)
    errors = []
    for argv in (["journalctl", "-k", "-b", "0", "--no-pager", "-q"], ["dmesg"]):
        result = run(argv)
        if result is None:
            errors.append(f"{argv[0]} is not installed")
        elif result.returncode != 0 or not result.stdout.strip():
            why = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no output"
            errors.append(f"{argv[0]}: {why}")
        else:
            return KernelLog(result.stdout, " ".join(argv), truncated=result.truncated)
    return KernelLog(None, "journalctl, dmesg", "; ".join(errors))


def limit_text(limit: int) -> str:
    """``the first 1 MiB``: how much of a cut file was read."""
    return f"the first {describe_limit(limit)}"
