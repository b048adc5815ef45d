"""Clocks that drive the simulated cluster.

Everything the scheduler and kubelet do is a timer on a clock. The virtual clock only moves when a
test says so (``advance``/``run_until_idle``), which makes cluster behaviour deterministic and lets
tests avoid sleeping. The real clock runs the same timers from one background thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

_log = logging.getLogger(__name__)

#: The virtual clock starts at 2026-01-01T00:00:00Z so timestamps look plausible and are stable.
VIRTUAL_EPOCH = 1_767_225_600.0


@dataclass(order=True, slots=True)
class Timer:
    """A callback due at ``due`` (seconds since the epoch on its clock); ``cancel`` disarms it."""

    due: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class Clock:
    """Common timer bookkeeping; subclasses decide how time moves."""

    def __init__(self) -> None:
        self._lock = threading.Condition(threading.Lock())
        self._heap: list[Timer] = []
        self._seq = itertools.count()

    def now(self) -> float:
        raise NotImplementedError

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` after ``delay`` seconds of this clock's time."""
        with self._lock:
            timer = Timer(self.now() + max(0.0, delay), next(self._seq), callback)
            heapq.heappush(self._heap, timer)
            self._lock.notify_all()
        return timer

    def pending(self) -> int:
        """The number of armed timers (cancelled ones excluded)."""
        with self._lock:
            return sum(1 for t in self._heap if not t.cancelled)

    def next_due(self) -> float | None:
        with self._lock:
            self._drop_cancelled()
            return self._heap[0].due if self._heap else None

    def _drop_cancelled(self) -> None:
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)

    def _pop_due(self, limit: float) -> Timer | None:
        with self._lock:
            self._drop_cancelled()
            if self._heap and self._heap[0].due <= limit:
                return heapq.heappop(self._heap)
            return None

    @staticmethod
    def _run(timer: Timer) -> None:
        try:
            timer.callback()
        except Exception:  # a broken timer must not stop the cluster
            _log.exception("kubesim timer callback failed")

    def start(self) -> None:
        """Start driving timers (a no-op for the virtual clock)."""

    def stop(self) -> None:
        """Stop driving timers and release any thread."""


class VirtualClock(Clock):
    """A clock that moves only when told to; timers run in the caller's thread."""

    def __init__(self, start: float = VIRTUAL_EPOCH) -> None:
        super().__init__()
        self._now = start
        self._run_lock = threading.RLock()

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> int:
        """Move time forward by ``seconds``, running every timer that falls due, in order.

        Returns how many timers ran. Timers scheduled by callbacks within the window run too.
        """
        with self._run_lock:
            target = self._now + max(0.0, seconds)
            ran = 0
            while (timer := self._pop_due(target)) is not None:
                self._now = max(self._now, timer.due)
                self._run(timer)
                ran += 1
            self._now = target
            return ran

    def step(self) -> bool:
        """Jump to the next timer and run it (and any due at the same instant)."""
        with self._run_lock:
            due = self.next_due()
            if due is None:
                return False
            self.advance(due - self._now)
            return True

    def run_until_idle(self, max_seconds: float = 3600.0, max_timers: int = 1_000_000) -> int:
        """Run timers until none is left, or until ``max_seconds`` of virtual time have passed.

        Bounded so that a self-rescheduling timer (a crash-looping container) cannot hang a test.
        """
        with self._run_lock:
            limit = self._now + max_seconds
            ran = 0
            while ran < max_timers:
                due = self.next_due()
                if due is None or due > limit:
                    break
                ran += self.advance(due - self._now)
            return ran


class RealClock(Clock):
    """Wall-clock time; one daemon thread runs timers as they fall due."""

    def __init__(self) -> None:
        super().__init__()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def now(self) -> float:
        return time.time()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="kubesim-clock", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopping:
                    self._drop_cancelled()
                    if self._heap and self._heap[0].due <= self.now():
                        break
                    wait = self._heap[0].due - self.now() if self._heap else None
                    self._lock.wait(wait)
                if self._stopping:
                    return
                timer = heapq.heappop(self._heap)
            self._run(timer)
