"""What the checks read, behind one injectable object.

Every path is under a root that defaults to the live machine (``/sys``, ``/dev``, ``/``) and that
tests point at fixture trees; the environment, the account, the commands (clinfo, modinfo,
mokutil, dkms) and PyTorch are injectable too, so the checks run unchanged on fixtures.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Seconds a probed command may take (clinfo on a hung GPU can block).
COMMAND_TIMEOUT = 20.0


@dataclass(frozen=True)
class CommandResult:
    """What a command printed and how it exited."""

    returncode: int
    stdout: str
    stderr: str = ""


# argv -> its result, or None when the command is not installed.
CommandRunner = Callable[[Sequence[str]], "CommandResult | None"]


def run_command(argv: Sequence[str]) -> CommandResult | None:
    """Run a probe command on this machine; None when it is not installed."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]} did not finish within {COMMAND_TIMEOUT:g} s")
    except OSError as exc:
        return CommandResult(126, "", str(exc))
    return CommandResult(done.returncode, done.stdout, done.stderr)


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
        if name is None or not (folder / name).is_file():
            return None
        return CommandResult(0, (folder / name).read_text(encoding="utf-8", errors="replace"))

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
    _torch: TorchInfo | None = field(default=None, repr=False)

    def sys(self, *parts: str) -> Path:
        """A path under the sysfs root."""
        return self.sysfs_root.joinpath(*parts)

    def dev(self, *parts: str) -> Path:
        """A path under the /dev root."""
        return self.dev_root.joinpath(*parts)

    def path(self, absolute: str) -> Path:
        """An absolute path of the machine (``/etc/group``) under the root."""
        return self.root / absolute.lstrip("/")

    def read_sys(self, relative: str) -> str | None:
        """A text file under the sysfs root, None when it is missing or unreadable."""
        return read_text(self.sysfs_root / relative)

    def read(self, absolute: str) -> str | None:
        """A text file under the root, None when it is missing or unreadable."""
        return read_text(self.path(absolute))

    def torch(self) -> TorchInfo:
        """PyTorch's answers, probed once."""
        if self._torch is None:
            self._torch = self.torch_probe()
        return self._torch

    def groups(self) -> dict[str, Group]:
        """/etc/group by name."""
        return parse_group(self.read("/etc/group") or "")

    def kernel_release(self) -> str | None:
        """``uname -r`` as /proc/sys/kernel/osrelease gives it."""
        text = self.read("/proc/sys/kernel/osrelease")
        return text.strip() if text and text.strip() else None

    def os_release(self) -> dict[str, str]:
        """/etc/os-release as a mapping (quotes removed)."""
        text = self.read("/etc/os-release") or self.read("/usr/lib/os-release") or ""
        fields = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.startswith("#"):
                fields[key.strip()] = value.strip().strip("\"'")
        return fields


def read_text(path: Path) -> str | None:
    """A small text file, None when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


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
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if "Package" in fields:
            packages[fields["Package"]] = fields
    return packages


def load_kernel_log(path: Path | None, run: CommandRunner) -> KernelLog:
    """The kernel log: FILE when given, else ``journalctl -k -b 0``, else ``dmesg``."""
    if path is not None:
        text = read_text(path)
        if text is None:
            return KernelLog(None, str(path), f"cannot read {path}")
        return KernelLog(text, str(path))
    errors = []
    for argv in (["journalctl", "-k", "-b", "0", "--no-pager", "-q"], ["dmesg"]):
        result = run(argv)
        if result is None:
            errors.append(f"{argv[0]} is not installed")
        elif result.returncode != 0 or not result.stdout.strip():
            why = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no output"
            errors.append(f"{argv[0]}: {why}")
        else:
            return KernelLog(result.stdout, " ".join(argv))
    return KernelLog(None, "journalctl, dmesg", "; ".join(errors))
