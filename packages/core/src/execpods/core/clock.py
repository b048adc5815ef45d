"""Time, injected.

Every component that needs time takes a `Clock`, so tests move time explicitly (as trio's
MockClock) instead of sleeping, and a timeout test runs in microseconds.
"""

from __future__ import annotations

import threading
import time

from execpods.core.ports import Clock

__all__ = ["Clock", "ManualClock", "SystemClock"]


class SystemClock:
    """The real clocks of the machine."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to; `monotonic()` and `time()` move together."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {seconds})")
        with self._lock:
            self._now += seconds

    def set_time(self, now: float) -> None:
        with self._lock:
            if now < self._now:
                raise ValueError(f"a clock cannot go backwards (from {self._now} to {now})")
            self._now = now
