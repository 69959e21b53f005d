"""SIGINT and SIGTERM during a run: stop, and say in which phase. No torch needed.

``timeout`` sends SIGTERM, Ctrl-C sends SIGINT. While ``interruptible`` is active, the first of
them raises ``Interrupted`` in the main thread (exit code 128 + the signal's number: 130, 143),
which the smoke job turns into a report with ``passed: false``; later ones are ignored so that the
report can be written. A signal that the parent process set to be ignored (a background job of a
non-interactive shell ignores SIGINT) stays ignored, as Python itself does for SIGINT.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from rocmlab.common.errors import RocmlabError

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Phase:
    """What the run is doing now, as a phrase that follows "while" (``training (epoch 2/3)``), for
    the message of an interrupted run."""

    def __init__(self, name: str = "starting") -> None:
        self.name = name
        self.step = ""

    def enter(self, name: str) -> None:
        """Start a new phase."""
        self.name, self.step = name, ""

    def at(self, step: str) -> None:
        """Where within the phase the run is (``epoch 2/3``)."""
        self.step = step

    def __str__(self) -> str:
        return f"{self.name} ({self.step})" if self.step else self.name


class Interrupted(RocmlabError):
    """The run received SIGINT or SIGTERM; exit code 128 + the signal's number."""

    def __init__(self, signum: int, phase: str) -> None:
        self.signal_name = signal.Signals(signum).name
        self.phase = phase
        self.exit_code = 128 + signum
        self.note = ""
        super().__init__(f"interrupted by {self.signal_name} while {phase}")

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}; {self.note}" if self.note else text


@contextmanager
def interruptible(phase: Phase) -> Iterator[None]:
    """Raise ``Interrupted`` (once) on SIGINT/SIGTERM while the block runs; restore on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed by the main thread
        return
    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            return  # already stopping: let the report be written
        fired.append(signum)
        raise Interrupted(signum, str(phase))

    previous = {}
    for signum in SIGNALS:
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
