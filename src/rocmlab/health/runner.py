"""Running checks side by side, each in a process of its own, cut at its deadline.

A thread cannot stop a read that hangs (a sysfs attribute of a GPU that fell off the bus, a
statvfs on a dead NFS mount, a command waiting on the GPU): only a process can be killed. So each
check runs in a forked child, in a session of its own, and sends its outcome back as JSON on a
pipe. At its deadline the child, its process group and every process it started (also those
that started sessions of their own, as torchrun's workers do) are killed with SIGKILL, and the
check is reported as cut. A process stuck in the kernel ignores SIGKILL until it leaves there;
it is not waited for: the run goes on and ends in time, and the kernel reaps it later.

The child also arms an alarm at its budget (plus a second), so that it ends even when the run
that started it was killed first (Slurm kills a health check program after 60 s).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MAX_PAYLOAD = 4 * 1024 * 1024  # what one check may send back
REAP_WAIT = 0.5  # seconds to wait for a killed child before leaving it


@dataclass(frozen=True)
class Task:
    """Work to run in a child: ``work(deadline)`` returns a JSON-able object; ``deadline`` is
    on time.monotonic()'s clock."""

    name: str
    budget: float
    work: Callable[[float], Any]


@dataclass
class Done:
    """What became of a task: its payload, or why there is none."""

    name: str
    payload: Any = None
    seconds: float = 0.0
    cut: bool = False  # killed at its deadline
    error: str = ""  # the child crashed, or sent back something unreadable


# ---------------------------------------------------------------- process trees


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process in /proc."""
    found = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read(4096)
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses; the last ')' ends it.
        fields = data.rpartition(b")")[2].split()
        if len(fields) >= 2 and fields[1].isdigit():
            found[int(name)] = int(fields[1])
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, parents before their children."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def kill_tree(pid: int, group: bool = True) -> None:
    """SIGKILL ``pid`` (its process group too when it leads one) and every process below it.
    The tree is read before anything is killed: a killed parent's children move to init."""
    below = descendants(pid)
    if group:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    for target in [pid, *below]:
        with contextlib.suppress(OSError):
            os.kill(target, signal.SIGKILL)


def reap(pid: int, wait: float = REAP_WAIT) -> int | None:
    """The exit status of a child, waiting at most ``wait`` seconds; None if it has not ended
    (stuck in the kernel: it is left to end on its own)."""
    end = time.monotonic() + wait
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= end:
            return None
        time.sleep(0.01)


# ---------------------------------------------------------------- the child


def _child(task: Task, deadline: float, write_fd: int) -> None:
    """Runs in the forked child: never returns."""
    code = 0
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)

        def expire(_signum: int, _frame: Any) -> None:
            kill_tree(os.getpid(), group=False)
            os._exit(124)

        signal.signal(signal.SIGALRM, expire)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.alarm(max(1, int(deadline - time.monotonic()) + 1))
        try:
            payload: Any = {"ok": task.work(deadline)}
        except BaseException as exc:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
            payload = {"crashed": f"{type(exc).__name__}: {exc} (at {where})"}
        data = json.dumps(payload).encode("ascii")  # lone surrogates are written as escapes
        view = memoryview(data)
        while view:
            written = os.write(write_fd, view[: 1 << 16])
            view = view[written:]
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _start(task: Task, deadline: float) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(read_fd)
        _child(task, deadline, write_fd)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return pid, read_fd


@dataclass
class _Running:
    task: Task
    pid: int
    fd: int
    started: float
    deadline: float
    data: bytearray


def run_tasks(tasks: Sequence[Task], end: float) -> dict[str, Done]:
    """Run ``tasks`` side by side; each ends by its budget or by ``end`` (monotonic), whichever
    comes first. Returns each task's Done by name."""
    done: dict[str, Done] = {}
    running: dict[int, _Running] = {}
    try:
        for task in tasks:
            now = time.monotonic()
            deadline = min(now + task.budget, end)
            if deadline <= now:
                done[task.name] = Done(task.name, cut=True)
                continue
            pid, fd = _start(task, deadline)
            running[fd] = _Running(task, pid, fd, now, deadline, bytearray())
        with selectors.DefaultSelector() as selector:
            for fd in running:
                selector.register(fd, selectors.EVENT_READ)
            while running:
                now = time.monotonic()
                expired = [r for r in running.values() if r.deadline <= now]
                for item in expired:
                    selector.unregister(item.fd)
                done.update(_cut(expired, running))
                if not running:
                    break
                wait = min(r.deadline for r in running.values()) - time.monotonic()
                for key, _unused in selector.select(max(wait, 0)):
                    item = running[key.fd]
                    if _read(item):
                        selector.unregister(item.fd)
                        done[item.task.name] = _finish(item, running)
    finally:
        done.update(_cut(list(running.values()), running))
    return done


def _read(item: _Running) -> bool:
    """Read what the child sent; True at its end (or when it sends more than MAX_PAYLOAD)."""
    while True:
        try:
            chunk = os.read(item.fd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            return True
        if not chunk:
            return True
        item.data += chunk
        if len(item.data) > MAX_PAYLOAD:
            return True


def _cut(items: list[_Running], running: dict[int, _Running]) -> dict[str, Done]:
    """Kill every one of ``items`` first, then wait for them together (at most REAP_WAIT in
    all): children stuck in the kernel all at once (a hung GPU) do not add up their waits."""
    found = {}
    for item in items:
        running.pop(item.fd, None)
        kill_tree(item.pid)
        os.close(item.fd)
        found[item.task.name] = Done(
            item.task.name, seconds=time.monotonic() - item.started, cut=True
        )
    end = time.monotonic() + REAP_WAIT
    for item in items:
        reap(item.pid, max(0.0, end - time.monotonic()))
    return found


def _finish(item: _Running, running: dict[int, _Running]) -> Done:
    running.pop(item.fd, None)
    os.close(item.fd)
    seconds = time.monotonic() - item.started
    if len(item.data) > MAX_PAYLOAD:
        kill_tree(item.pid)
        reap(item.pid)
        return Done(item.task.name, seconds=seconds, error="sent back more than 4 MiB")
    status = reap(item.pid)
    if status is None:  # it closed the pipe but goes on (or is stuck in the kernel)
        kill_tree(item.pid)
        reap(item.pid)
    try:
        payload = json.loads(bytes(item.data).decode("ascii"))
    except ValueError:
        why = f"exit status {status}" if status is not None else "no answer"
        return Done(
            item.task.name, seconds=seconds, error=f"the check ended without a result ({why})"
        )
    if not isinstance(payload, dict):
        return Done(item.task.name, seconds=seconds, error="the check sent back no result")
    if "crashed" in payload:
        return Done(item.task.name, seconds=seconds, error=str(payload["crashed"]))
    return Done(item.task.name, payload=payload.get("ok"), seconds=seconds)
