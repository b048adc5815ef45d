"""Counts executor failures; too many within the validity interval fail the application.

Spark's `ExecutorFailureTracker`: each failure is remembered with the time it happened; failures
older than `spark.executor.failuresValidityInterval` (when set) are forgotten; once more than
`spark.executor.maxNumFailures` are remembered, the application should fail (Spark stops the
SparkContext with EXCEED_MAX_EXECUTOR_FAILURES). Executors whose pods fail while the driver counts
on them and pod creations the API refuses both count: either way an executor the application asked
for did not serve it.

The allocator and the lifecycle manager run on different threads and both register failures, so
the tracker is thread-safe. Once tripped it stays tripped: allocation stops for good. A failure
rule (`failurerules.py`) may also trip it at once (`fail`).
"""

from __future__ import annotations

import threading
from collections import deque

from execpods.core.clock import Clock
from execpods.core.settings import CoreSettings


class ExecutorFailureTracker:
    """Failure times within the validity window, and whether their number exceeds the limit."""

    def __init__(self, *, max_failures: int, validity_interval: float | None, clock: Clock) -> None:
        if max_failures < 0:
            raise ValueError(f"max_failures must not be negative, not {max_failures}")
        self.max_failures = max_failures
        self._validity = validity_interval
        self._clock = clock
        self._times: deque[float] = deque()
        self._lock = threading.Lock()
        self._tripped: str | None = None

    @classmethod
    def from_settings(cls, settings: CoreSettings, clock: Clock) -> ExecutorFailureTracker:
        return cls(
            max_failures=settings.max_executor_failures,
            validity_interval=settings.failures_validity_interval,
            clock=clock,
        )

    def set_limit(self, *, max_failures: int, validity_interval: float | None) -> None:
        """The driver's limit and window replace the settings' (the Spark plugin sends its own
        `spark.executor.maxNumFailures` and `failuresValidityInterval`, so the two never
        disagree). Failures counted so far keep counting; a tracker already tripped stays so."""
        if max_failures < 0:
            raise ValueError(f"max_failures must not be negative, not {max_failures}")
        if validity_interval is not None and validity_interval <= 0:
            raise ValueError(f"validity_interval must be positive, not {validity_interval}")
        with self._lock:
            self.max_failures = max_failures
            self._validity = validity_interval

    def register_failure(self) -> None:
        """One executor failed (its pod failed, or its pod could not be created)."""
        self.register_failures(1)

    def fail(self, message: str) -> None:
        """The application must fail now, for `message` (a failure rule's FailApplication); a
        tracker already tripped keeps its first reason."""
        with self._lock:
            if self._tripped is None:
                self._tripped = message

    def register_failures(self, count: int) -> None:
        """`count` executors failed at once (a batch of creates the API refused)."""
        with self._lock:
            now = self._clock.monotonic()
            self._times.extend([now] * count)

    def _count_locked(self) -> int:
        if self._validity is not None:
            oldest = self._clock.monotonic() - self._validity
            while self._times and self._times[0] < oldest:
                self._times.popleft()
        return len(self._times)

    @property
    def validity_interval(self) -> float | None:
        return self._validity

    @property
    def failed_executors(self) -> int:
        """Failures that still count (within the validity interval)."""
        with self._lock:
            return self._count_locked()

    @property
    def application_failure(self) -> str | None:
        """Why the application should fail, once too many executors failed; None until then."""
        with self._lock:
            if self._tripped is None:
                count = self._count_locked()
                if count > self.max_failures:
                    window = (
                        "in total"
                        if self._validity is None
                        else f"within spark.executor.failuresValidityInterval ({self._validity:g}s)"
                    )
                    self._tripped = (
                        f"Max number of executor failures ({self.max_failures}) reached: "
                        f"{count} executors failed {window}, more than "
                        f"spark.executor.maxNumFailures allows. Executor allocation stopped; "
                        f"the application should fail."
                    )
            return self._tripped
