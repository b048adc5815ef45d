"""Backoff with jitter, and a stoppable wait.

The watch retries forever (it must outlive any outage), so the retry rate is what protects an API
server that is already down: exponential growth, capped, with full jitter so a fleet of drivers does
not reconnect in lockstep, and never below a floor, so even an unlucky draw is not a tight loop.

Waiting goes through a `Waiter`, so `stop()` can cut a long backoff short and a test can run a
30-second outage in virtual time.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from execpods.core import ApiThrottled, ApiUnavailable, PodOperationError

RETRY_AFTER_CAP = 300.0
"""The longest Retry-After honoured: the server's hint wins over our cap, but not an absurd one."""


class Waiter(Protocol):
    """Waits that end early when the owner stops."""

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds`; True when stopped (at once, or during the wait)."""

    def stop(self) -> None:
        """End every current and future wait at once."""

    @property
    def stopped(self) -> bool: ...


class EventWaiter:
    """The real-time `Waiter`, on a `threading.Event`."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(max(0.0, seconds))

    def stop(self) -> None:
        self._event.set()

    @property
    def stopped(self) -> bool:
        return self._event.is_set()


@dataclass(slots=True, kw_only=True)
class Backoff:
    """Exponential backoff, full jitter: delay n is uniform in [floor, min(max, initial*2^n)]."""

    initial: float
    maximum: float
    rng: random.Random = field(default_factory=random.Random)
    floor_fraction: float = 0.1
    attempts: int = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        """The next delay; never shorter than the server's Retry-After when it gave one."""
        cap = min(self.maximum, self.initial * (2.0 ** min(self.attempts, 32)))
        self.attempts += 1
        floor = self.initial * self.floor_fraction
        delay = self.rng.uniform(min(floor, cap), cap)
        if retry_after is not None:
            delay = max(delay, min(retry_after, RETRY_AFTER_CAP))
        return delay

    def reset(self) -> None:
        self.attempts = 0


class ApiBackoffGate:
    """One back-off shared by every API call: what makes every path honour the server.

    The watch has its own loop, but creates, deletes and lists are retried by reconcilers that
    run every round (a second), and a round does not know what the last one was told. So the
    gateway asks this gate before each call: after a 429 nothing is sent until its Retry-After has
    passed; after a 5xx or a connection failure nothing is sent for a jittered, exponentially
    growing delay (`Backoff`); the first call the server answers normally resets it. A call made
    while the gate is closed fails at once, unsent, as `ApiThrottled` naming the seconds left, so
    callers back off as if the server had said so and the server sees at most one probe per
    delay, however many loops want it.

    Failures of calls that were already in flight when the gate closed only extend the wait to
    their own Retry-After: a burst of concurrent creates failing together counts as one failure,
    not as ten doublings.
    """

    def __init__(
        self,
        *,
        initial: float,
        maximum: float,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._backoff = Backoff(
            initial=initial, maximum=maximum, rng=rng if rng is not None else random.Random()
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._open_at = 0.0
        self.refused = 0
        """Calls failed locally, unsent, because the gate was closed (for tests and metrics)."""

    def remaining(self) -> float:
        """Seconds until calls may be sent again (0: now)."""
        with self._lock:
            return max(0.0, self._open_at - self._clock())

    def check(self, what: str) -> None:
        """Raise `ApiThrottled` (unsent) while the gate is closed."""
        with self._lock:
            left = self._open_at - self._clock()
            if left <= 0:
                return
            self.refused += 1
        raise ApiThrottled(
            f"{what} was not sent: backing off for {left:.2f}s more after API failures",
            retry_after=left,
        )

    def failed(self, error: PodOperationError) -> float:
        """Close the gate after a throttled or failed call; returns the seconds it stays closed.

        Any other error (404, 409, 422, ...) is a server answering normally: it resets the gate.
        """
        if isinstance(error, ApiThrottled):
            retry_after: float | None = error.retry_after
        elif isinstance(error, ApiUnavailable):
            retry_after = None
        else:
            self.succeeded()
            return 0.0
        with self._lock:
            now = self._clock()
            if now < self._open_at:
                # Already closed: a call that was in flight. Only honour its own Retry-After.
                if retry_after is not None:
                    self._open_at = max(self._open_at, now + min(retry_after, RETRY_AFTER_CAP))
                return self._open_at - now
            delay = self._backoff.next_delay(retry_after)
            self._open_at = now + delay
            return delay

    def succeeded(self) -> None:
        """The server answered normally: the next failure starts the back-off afresh."""
        with self._lock:
            self._backoff.reset()
