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
    """Waits that end early when the owner stops, or when something tells them to wake."""

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds`; True when stopped (at once, or during the wait)."""

    def wake(self) -> None:
        """End the current wait (or, if none runs, the next one) early, without stopping."""

    def stop(self) -> None:
        """End every current and future wait at once."""

    @property
    def stopped(self) -> bool: ...


class EventWaiter:
    """The real-time `Waiter`, on a `threading.Condition`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._stopped = False
        self._woken = False

    def wait(self, seconds: float) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._stopped or self._woken, max(0.0, seconds))
            self._woken = False
            return self._stopped

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    @property
    def stopped(self) -> bool:
        return self._stopped


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


class ApiHeldBack(ApiThrottled):
    """A call the `ApiBackoffGate` did not send: the server asked us to wait (a 429), or is
    failing (5xx, refused connections). The core treats both alike (an unsent call, retried after
    `retry_after`); `outage` tells a caller that reports it which it was, so a driver hears
    UNAVAILABLE during an outage rather than a quota's RESOURCE_EXHAUSTED."""

    def __init__(self, message: str, *, retry_after: float, outage: bool) -> None:
        super().__init__(message, retry_after=retry_after)
        self.outage = outage


class ApiBackoffGate:
    """One back-off shared by every API call: what makes every path honour the server.

    The watch has its own loop, but creates, deletes and lists are retried by reconcilers that
    run every round (a second), and a round does not know what the last one was told. So the
    gateway asks this gate before each call: after a 5xx or a connection failure nothing is sent
    for a jittered, exponentially growing delay (`Backoff`); the first call the server answers
    normally resets it. A call made while the gate is closed fails at once, unsent, as
    `ApiHeldBack` (an `ApiThrottled`) naming the seconds left, so callers back off as if the
    server had said so and the server sees at most one probe per delay, however many loops want
    it.

    A 429 does not close the gate: it refuses one request, which waits its Retry-After and is
    sent again (the gateway's `throttle_retries`), while the others go on at the rate limiter's
    pace, as client-go does. Closing every call for the Retry-After of one 429 ran a server that
    caps its rate (a gateway, an admission webhook, max-inflight) at about half its cap.

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
        self._outage = False  # what closed the gate last: a failing server, or a 429
        self._listeners: list[Callable[[], None]] = []
        self.refused = 0
        """Calls failed locally, unsent, because the gate was closed (for tests and metrics)."""

    def remaining(self) -> float:
        """Seconds until calls may be sent again (0: now)."""
        with self._lock:
            return max(0.0, self._open_at - self._clock())

    def check(self, what: str) -> None:
        """Raise `ApiHeldBack` (unsent) while the gate is closed."""
        with self._lock:
            left = self._open_at - self._clock()
            if left <= 0:
                return
            self.refused += 1
            outage = self._outage
        cause = "API failures" if outage else "the API throttled us (429)"
        raise ApiHeldBack(
            f"{what} was not sent: backing off for {left:.2f}s more after {cause}",
            retry_after=left,
            outage=outage,
        )

    def failed(self, error: PodOperationError) -> float:
        """Close the gate after a failed call (5xx, no answer); returns the seconds it stays
        closed. A 429 leaves it as it is (see the class). Any other error (404, 409, 422, ...)
        is a server answering normally: it resets the gate.
        """
        if isinstance(error, ApiThrottled):
            return self.remaining()
        if not isinstance(error, ApiUnavailable):
            self.succeeded()
            return 0.0
        with self._lock:
            now = self._clock()
            if now < self._open_at:
                return self._open_at - now  # a call that was in flight: one failure, not two
            delay = self._backoff.next_delay(None)
            self._open_at = now + delay
            self._outage = True
            return delay

    def succeeded(self) -> None:
        """The server answered normally: the next failure starts the back-off afresh, and the
        listeners hear of a recovery (the first normal answer after failures)."""
        with self._lock:
            recovered = self._backoff.attempts > 0
            self._backoff.reset()
            listeners = list(self._listeners) if recovered else []
        for listener in listeners:
            listener()

    def on_recovery(self, listener: Callable[[], None]) -> None:
        """Call `listener` (on the calling thread, quickly) whenever a call succeeds after
        failures: the watch cuts its retry wait short then (a loop waiting out its own back-off
        would otherwise sleep through the recovery)."""
        with self._lock:
            self._listeners.append(listener)
