"""A progress bar with no dependencies, for long sweeps: on a terminal only, on stderr."""

from __future__ import annotations

from typing import TextIO

__all__ = ("ProgressBar",)

WIDTH = 30


class ProgressBar:
    """Redraws one line, ``label [#####.....] done/total``, each time it is called.

    It draws nothing unless ``stream`` is a terminal, so piped and captured output stays clean,
    and it erases itself when the work is done.
    """

    def __init__(self, label: str, stream: TextIO) -> None:
        self.label = label
        self.stream = stream
        self.live = stream.isatty()

    def __call__(self, done: int, total: int) -> None:
        """Show that ``done`` of ``total`` steps are finished."""
        if not self.live:
            return
        filled = WIDTH * done // total if total else WIDTH
        bar = "#" * filled + "." * (WIDTH - filled)
        line = f"{self.label} [{bar}] {done}/{total}"
        self.stream.write("\r" + line)
        if done >= total:
            self.stream.write("\r" + " " * len(line) + "\r")
        self.stream.flush()
