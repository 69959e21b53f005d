"""``rocmlab doctor`` against a host that lies: escape sequences, bidi controls and undecodable
bytes in what it reads, FIFOs and devices where regular files belong, files and command output
far larger than any real one, and a --json FILE that cannot be written.

Each case starts from a fixture machine of tests/fixtures/doctor/ (doctor_fixtures.build) and
plants one hostile thing in its trees; the doctor runs in a subprocess with a timeout, as a user
runs it, so that a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from doctor_fixtures import FIXTURES, build
from rocmlab_testutil import REPO

from rocmlab.common.hostread import MIB, read_bounded
from rocmlab.common.textsafe import for_terminal, valid_unicode
from rocmlab.doctor import context as doctor_context
from rocmlab.doctor.context import (
    KERNEL_LOG_LIMIT,
    MOUNTS_LIMIT,
    OUTPUT_LIMIT,
    Context,
    load_kernel_log,
    recorded_runner,
    run_command,
)
from rocmlab.doctor.model import DOCTOR_SCHEMA

LOG = FIXTURES / "doctor" / "kernel-logs" / "radeon-7900xtx-boot.log"
RAW_UNSAFE = ["\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\u200f", "\u2028"]
# Seconds the doctor may take on a fixture machine before the test calls it hung (it takes
# about two; the margin is for a loaded 2-core test machine).
HANG = 120


@pytest.fixture
def machine(tmp_path: Path):
    counter = iter(range(100))

    def make(name: str = "radeon-healthy", **override: Any) -> Context:
        return build(name, tmp_path / f"{name}-{next(counter)}", **override)

    return make


def doctor(
    ctx: Context, *args: str, env: dict | None = None, preexec=None, kernel_log: Path = LOG
) -> subprocess.CompletedProcess[bytes]:
    """``rocmlab doctor`` on the fixture trees, its output as bytes (nothing decoded away)."""
    argv = [
        sys.executable, "-m", "rocmlab", "doctor",
        "--sysfs-root", str(ctx.sysfs_root), "--dev-root", str(ctx.dev_root),
        "--root", str(ctx.root), "--kernel-log", str(kernel_log), *args,
    ]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    for name in ("HSA_OVERRIDE_GFX_VERSION", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        if name not in (env or {}):
            environment.pop(name, None)
    return subprocess.run(
        argv, capture_output=True, env=environment, timeout=HANG, preexec_fn=preexec, check=False
    )


def lines_of(done: subprocess.CompletedProcess[bytes]) -> dict[str, str]:
    """The printed lines by check name (``WARN  host_files: ...`` -> host_files)."""
    text = done.stdout.decode("utf-8")
    found = {}
    for line in text.splitlines():
        status, _, rest = line.partition(" ")
        name, sep, _ = rest.strip().partition(": ")
        if sep and status in ("PASS", "WARN", "FAIL", "SKIP", "ERROR"):
            found[name] = line
    return found


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


# ---------------------------------------------------------------- text for the terminal


def test_for_terminal_escapes_controls_bidi_and_surrogates_and_keeps_the_rest() -> None:
    assert for_terminal("6.14\x1b]0;x\x07\nFAIL\tA\u202eB\u2066\x7f\x9b\u2028\udcff") == (
        "6.14\\x1b]0;x\\x07\\nFAIL\\tA\\u202eB\\u2066\\x7f\\x9b\\u2028\\udcff"
    )
    plain = "Navi 31 [Radeon RX 7900 XT/7900 XTX] — gfx1100, 0000:03:00.0, Größe ✓"
    assert for_terminal(plain) == plain


def test_valid_unicode_shows_an_undecodable_byte_and_keeps_controls() -> None:
    value = {"k\udcff": ["a\udcfe", "\ud800", "\x1b[31m"], "n": 3}
    assert valid_unicode(value) == {"k\\xff": ["a\\xfe", "\ufffd", "\x1b[31m"], "n": 3}


def test_sysfs_and_os_release_escapes_reach_stdout_escaped_and_json_faithful(
    machine, tmp_path: Path
) -> None:
    ctx = machine()
    version = "6.14.14\x1b[2J\x1b]0;owned\x07\nPASS  forged: all good\u202egnp.exe\u2066"
    (ctx.sysfs_root / "module" / "amdgpu" / "version").write_text(version)
    os_release = ctx.root / "etc" / "os-release"
    # Not Ubuntu any more (nor a derivative naming its base): the check prints the ID.
    text = os_release.read_text().replace("UBUNTU_CODENAME=noble\n", "")
    os_release.write_text(text.replace("ID=ubuntu\n", "ID=ubuntu\x9b31m\u200f\n"))
    report = tmp_path / "doctor.json"
    done = doctor(ctx, "--json", str(report))
    out = done.stdout.decode("utf-8")
    for char in RAW_UNSAFE:
        assert char not in out, repr(char)
    assert not any(line.startswith("PASS  forged") for line in out.splitlines())
    printed = lines_of(done)
    assert (
        "AMD's amdgpu-dkms 6.14.14\\x1b[2J\\x1b]0;owned\\x07\\nPASS  forged: all good"
        "\\u202egnp.exe\\u2066" in printed["amdgpu_driver"]
    )
    assert "ubuntu\\x9b31m\\u200f 24.04" in printed["kernel_support"]
    # The JSON document keeps what the host said (JSON escapes it), and is valid.
    doc = json.loads(report.read_bytes().decode("utf-8"))
    jsonschema.validate(doc, DOCTOR_SCHEMA)
    by_name = {c["name"]: c for c in doc["checks"]}
    assert f"AMD's amdgpu-dkms {version}" in by_name["amdgpu_driver"]["saw"]
    assert "ubuntu\x9b31m\u200f 24.04" in by_name["kernel_support"]["saw"]


def test_undecodable_bytes_give_valid_json_and_printable_lines(machine, tmp_path: Path) -> None:
    ctx = machine()
    # Bytes that are not UTF-8, in the environment (Python holds them as lone surrogates) and
    # in a sysfs value (read as U+FFFD).
    (ctx.sysfs_root / "module" / "amdgpu" / "version").write_bytes(b"6.14\xff\xfe")
    env = {"ROCR_VISIBLE_DEVICES": os.fsdecode(b"0,\xff7")}
    report = tmp_path / "doctor.json"
    done = doctor(ctx, "--json", str(report), env=env)
    assert done.returncode in (0, 1), done.stderr.decode(errors="replace")
    done.stdout.decode("utf-8")  # strict: every printed byte is UTF-8
    raw = report.read_bytes().decode("utf-8")
    doc = json.loads(raw)
    jsonschema.validate(doc, DOCTOR_SCHEMA)
    assert "\\ud" not in raw.lower()  # no surrogate escape written
    assert not any("\ud800" <= ch <= "\udfff" for s in strings(doc) for ch in s)
    evidence = [line for c in doc["checks"] for line in c["evidence"]]
    assert "ROCR_VISIBLE_DEVICES ignores \\xff7" in evidence
    by_name = {c["name"]: c for c in doc["checks"]}
    assert "amdgpu-dkms 6.14\ufffd\ufffd" in by_name["amdgpu_driver"]["saw"]


# ---------------------------------------------------------------- special and huge files


def test_read_bounded_refuses_fifos_and_devices_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    read = read_bounded(fifo, 4096)
    assert (read.data, read.refused, read.error) == (None, True, "a FIFO, not a regular file")
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    read = read_bounded(zero, 4096)
    assert (read.data, read.refused) == (None, True)
    assert read.error == "a character device, not a regular file"
    assert read_bounded(tmp_path, 4096).error == "a directory, not a regular file"
    assert time.monotonic() - start < 5
    missing = read_bounded(tmp_path / "missing", 4096)
    assert (missing.data, missing.refused, missing.error) == (
        None,
        False,
        "No such file or directory",
    )


def test_read_bounded_reads_at_most_the_bound_of_a_huge_file(tmp_path: Path) -> None:
    huge = tmp_path / "huge"
    with huge.open("wb") as handle:
        handle.write(b"tmpfs /dev/shm tmpfs rw,size=65536k 0 0\n")
        handle.truncate(1 << 30)  # 1 GiB, sparse: no disk used
    read = read_bounded(huge, MOUNTS_LIMIT)
    assert read.truncated and read.data is not None and len(read.data) == MOUNTS_LIMIT
    small = tmp_path / "small"
    small.write_bytes(b"x" * MOUNTS_LIMIT)
    exact = read_bounded(small, MOUNTS_LIMIT)
    assert not exact.truncated and exact.data == b"x" * MOUNTS_LIMIT


def test_fifos_in_the_trees_do_not_hang_the_doctor_and_are_reported(machine) -> None:
    ctx = machine()
    planted = [
        ctx.sysfs_root / "module" / "amdgpu" / "initstate",
        ctx.root / "etc" / "os-release",
        ctx.root / "proc" / "mounts",
    ]
    for path in planted:
        path.unlink(missing_ok=True)
        os.mkfifo(path)
    done = doctor(ctx)  # a hang raises subprocess.TimeoutExpired
    assert done.returncode in (0, 1), done.stderr.decode(errors="replace")
    printed = lines_of(done)
    host_files = printed["host_files"]
    assert host_files.startswith("WARN  host_files: ")
    for path in planted:
        assert f"{path} not read: a FIFO, not a regular file" in host_files
    assert "findmnt --target PATH" in host_files
    assert "/proc/mounts not read: a FIFO, not a regular file" in printed["dev_shm"]
    assert "(statvfs" in printed["dev_shm"]


def test_dev_zero_in_place_of_host_files_is_refused_unread(machine) -> None:
    ctx = machine()
    for path in (
        ctx.sysfs_root / "module" / "amdgpu" / "version",
        ctx.root / "proc" / "mounts",
        ctx.root / "etc" / "group",
    ):
        path.unlink(missing_ok=True)
        path.symlink_to("/dev/zero")
    # Address space for the interpreter and PyTorch's import, far below what reading
    # /dev/zero without a bound would take before the timeout.
    done = doctor(ctx, preexec=lambda: _limit_memory(4 << 30))
    assert done.returncode in (0, 1), done.stderr.decode(errors="replace")
    host_files = lines_of(done)["host_files"]
    assert "module/amdgpu/version not read: a character device, not a regular file" in host_files
    assert "etc/group not read: a character device" in host_files


def _limit_memory(size: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (size, size))


def test_a_1_gib_proc_mounts_is_read_to_1_mib_within_a_memory_limit(machine) -> None:
    ctx = machine()
    mounts = ctx.root / "proc" / "mounts"
    with mounts.open("wb") as handle:
        handle.write(b"tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=65536k 0 0\n")
        handle.truncate(1 << 30)
    # The checks without PyTorch (its import alone needs more address space than this), under
    # an address-space limit of 256 MiB: reading the file whole would need 1 GiB.
    script = f"""
import resource, sys
sys.path[:0] = [{str(REPO / "tests" / "python")!r}, {str(REPO / "src")!r}]
from pathlib import Path
from rocmlab.doctor import run_checks
from rocmlab.doctor.context import Context, KernelLog, TorchInfo, UserInfo
ctx = Context(
    sysfs_root=Path({str(ctx.sysfs_root)!r}), dev_root=Path({str(ctx.dev_root)!r}),
    root=Path({str(ctx.root)!r}), env={{}}, user=UserInfo("alice", 1000, 1000, frozenset()),
    run=lambda argv: None, kernel_log=KernelLog("", "none"),
    torch_probe=lambda: TorchInfo(error="not probed here"),
)
resource.setrlimit(resource.RLIMIT_AS, (256 << 20, 256 << 20))
for result in run_checks(ctx):
    print(result.status, result.name, result.saw)
print("read", len(ctx.unread[str(ctx.path("/proc/mounts"))].data))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    shm = next(line for line in out if line.startswith("warn dev_shm "))
    assert "/dev/shm is 64 MiB (/proc/mounts; only the first 1 MiB of /proc/mounts read" in shm
    assert next(line for line in out if " host_files " in line).startswith("warn host_files ")
    assert f"read {MOUNTS_LIMIT}" in out


def test_a_kernel_log_larger_than_its_bound_is_read_to_the_bound(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    with log.open("wb") as handle:
        handle.write(b"[    4.1] amdgpu 0000:03:00.0: amdgpu: Fatal error during GPU init\n")
        handle.truncate(KERNEL_LOG_LIMIT * 4)
    loaded = load_kernel_log(log, recorded_runner(tmp_path))
    assert loaded.truncated and loaded.text is not None
    assert len(loaded.text.encode()) == KERNEL_LOG_LIMIT
    ctx = Context(kernel_log=loaded)
    from rocmlab.doctor.checks_kernel import check_kernel_log

    result = check_kernel_log(ctx)
    assert result.status == "fail"
    assert f"{log} (the first 16 MiB; the rest was not read)" in result.saw


def test_a_fifo_as_kernel_log_is_bad_usage(machine, tmp_path: Path) -> None:
    fifo = tmp_path / "kern.fifo"
    os.mkfifo(fifo)
    done = doctor(machine(), kernel_log=fifo)
    assert done.returncode == 2
    assert f"--kernel-log {fifo}: not a readable file" in done.stderr.decode()


def test_a_recorded_command_file_that_is_a_fifo_is_an_error_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "clinfo-l.txt")
    result = recorded_runner(tmp_path)(["clinfo", "-l"])
    assert result is not None and result.returncode == 126
    assert result.stderr.endswith("clinfo-l.txt: a FIFO, not a regular file")


def test_command_output_is_bounded_and_a_hung_command_times_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    start = time.monotonic()
    endless = run_command(["yes", "amdgpu: ring gfx timeout"])
    assert endless is not None and endless.truncated
    assert len(endless.stdout.encode()) == OUTPUT_LIMIT
    monkeypatch.setattr(doctor_context, "COMMAND_TIMEOUT", 1.0)
    hung = run_command(["sleep", "60"])
    assert hung is not None and hung.returncode == 124
    assert hung.stderr == "sleep did not finish within 1 s"
    # A command that closes its output and keeps running is not waited for without end either.
    silent = run_command(["sh", "-c", "exec >&- 2>&-; sleep 60"])
    assert silent is not None and silent.returncode == 124
    assert time.monotonic() - start < 30
    done = run_command([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"])
    assert done is not None and (done.returncode, done.stdout, done.truncated) == (
        3,
        "out\n",
        False,
    )


# ---------------------------------------------------------------- --json that cannot be written


def test_json_into_a_directory_exits_2_before_any_check(machine, tmp_path: Path) -> None:
    done = doctor(machine(), "--json", str(tmp_path))
    assert done.returncode == 2
    err = done.stderr.decode()
    assert f"--json {tmp_path}: is a directory; give a file name" in err
    assert done.stdout == b""  # refused before any check ran


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a mode 0555 directory")
def test_json_into_a_directory_it_cannot_write_exits_2(machine, tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o555)
    done = doctor(machine(), "--json", str(closed / "doctor.json"))
    assert done.returncode == 2
    assert f"cannot write in the directory {closed} (Permission denied)" in done.stderr.decode()


def test_a_write_that_fails_after_the_checks_exits_5_and_keeps_the_old_file(
    machine, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    report = out / "doctor.json"
    report.write_text('{"old": true}\n')

    def small_files() -> None:
        # The probe file is empty and passes; the document does not fit: EFBIG on write.
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    done = doctor(machine(), "--json", str(report), preexec=small_files)
    assert done.returncode == 5, done.stderr.decode()
    assert f"--json {report}: cannot write it (File too large)" in done.stderr.decode()
    assert done.stdout.decode().splitlines()[-1].startswith("verdict: ")  # the lines came first
    assert report.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in out.iterdir()) == ["doctor.json"]  # no temporary file left


def test_many_big_reads_stay_within_their_bounds(machine) -> None:
    # dpkg's status and /etc/group larger than their bounds: cut, reported, no crash.
    ctx = machine()
    status = ctx.root / "var" / "lib" / "dpkg" / "status"
    status.parent.mkdir(parents=True, exist_ok=True)
    with status.open("ab") as handle:
        handle.truncate(status.stat().st_size + 40 * MIB)
    done = doctor(ctx)
    assert done.returncode in (0, 1), done.stderr.decode(errors="replace")
    assert f"{status}: only the first 32 MiB read" in lines_of(done)["host_files"]
