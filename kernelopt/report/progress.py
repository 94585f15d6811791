"""Progress on a terminal: a line per finished step, and the elapsed time while one runs.

Long work (an engine batch, an optimize run, a suite) reports through callbacks; this
renders them on stderr when stderr is a terminal. A heartbeat rewrites one status line
every second, so a slow or hung candidate is never silent. When stderr is not a terminal
(a log, CI, a coding agent) only milestones are written, one plain line each (a round,
a suite problem): enough to see a long run move, never a status line rewritten in place.
Nothing goes to stdout, so `--json` stays clean.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO


class TerminalProgress:
    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None, interval_s: float = 1.0) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.interval_s = interval_s
        self.status = ""
        self.started = time.monotonic()
        self._status_since = self.started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "TerminalProgress":
        if self.enabled:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self._clear()

    def line(self, text: str) -> None:
        """A permanent line (a finished trial, candidate, round)."""
        if not self.enabled:
            return
        with self._lock:
            self._clear_locked()
            self.stream.write(f"[{time.monotonic() - self.started:6.1f}s] {text}\n")
            self.stream.flush()

    def milestone(self, text: str) -> None:
        """A line worth seeing in a log too (a round finished, a suite problem done): written
        whether or not stderr is a terminal."""
        with self._lock:
            if self.enabled:
                self._clear_locked()
            self.stream.write(f"[{time.monotonic() - self.started:6.1f}s] {text}\n")
            self.stream.flush()

    def set_status(self, text: str) -> None:
        """What is running now; shown with its elapsed time until the next status or line."""
        with self._lock:
            self.status = text
            self._status_since = time.monotonic()

    def engine_event(self, event: Any) -> None:
        """An engine ProgressEvent: 'done' and trial results become lines, the rest the status."""
        text = f"{event.candidate}: {event.text}"
        if event.text.startswith(("done", "trial")):
            self.line(text)
        self.set_status(f"{event.candidate}: {event.text}")

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                if self.status:
                    elapsed = time.monotonic() - self._status_since
                    self.stream.write(f"\r\033[K  ... {self.status} ({elapsed:.0f} s)")
                    self.stream.flush()

    def _clear(self) -> None:
        if self.enabled:
            with self._lock:
                self._clear_locked()

    def _clear_locked(self) -> None:
        self.stream.write("\r\033[K")
