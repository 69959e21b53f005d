"""Training progress: one line per epoch, plus a live bar when stderr is a terminal."""

from __future__ import annotations

import sys
from typing import TextIO

BAR_WIDTH = 30
UPDATES_PER_EPOCH = 40


class Progress:
    """Prints epoch lines to ``out``; draws a bar on ``bar_stream`` when it is a terminal."""

    def __init__(
        self, enabled: bool = True, out: TextIO | None = None, bar_stream: TextIO | None = None
    ) -> None:
        self.enabled = enabled
        self.out = out if out is not None else sys.stdout
        self.bar_stream = bar_stream if bar_stream is not None else sys.stderr
        self.live = enabled and self.bar_stream.isatty()
        self._drawn = False

    def wants_bar(self, step: int, steps: int) -> bool:
        """Whether to redraw the bar at this step (each redraw costs a device sync)."""
        return self.live and step % max(1, steps // UPDATES_PER_EPOCH) == 0

    def draw(self, epoch: int, epochs: int, step: int, steps: int, loss: float) -> None:
        """Redraw the bar in place."""
        done = int(BAR_WIDTH * step / steps)
        drawn = "#" * done + "." * (BAR_WIDTH - done)
        self.bar_stream.write(f"\repoch {epoch}/{epochs} [{drawn}] {step}/{steps} loss {loss:.4f}")
        self.bar_stream.flush()
        self._drawn = True

    def line(self, text: str) -> None:
        """Print a line, clearing the bar first."""
        if not self.enabled:
            return
        if self._drawn:
            self.bar_stream.write("\r" + " " * (BAR_WIDTH + 60) + "\r")
            self.bar_stream.flush()
            self._drawn = False
        print(text, file=self.out, flush=True)
