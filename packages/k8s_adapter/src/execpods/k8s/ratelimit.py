"""One client-side rate limit for every Kubernetes API call the sidecar makes: a token bucket.

client-go gives every controller one (5 QPS, burst 10 by default); the fabric8 client Spark uses has
none, so Spark's only brake is its batch size. Here the `ApiGateway` takes a token before every
request (create, delete, list, watch), so no combination of allocation settings, concurrency or
retries can send the API server more than `burst` calls at once or more than `qps` a second for
long: in any window of T seconds at most `burst + qps x T` calls start.

Callers that find the bucket empty reserve the next token and sleep until it is theirs, so waiting
callers are served in order and a burst of concurrent creates is spread at exactly `qps`. Time and
sleeping are injected, so the bound is proved with a fake clock (tests) and measured live (the
benchmark reads `peak_rate`).

This is the `static` policy (`execpods.kubernetes.api.ratePolicy`); the default, `adaptive`, is
`congestion.AdaptiveRateLimiter`, which paces at a rate learnt from the API's answers. Both are a
`RateLimiter`: the gateway takes a start from it before every call and tells it every answer.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

DEFAULT_QPS = 200
DEFAULT_BURST = 300


class RateLimiter(Protocol):
    """What the gateway asks before every call and tells after every answer."""

    calls: int
    waited: float

    def acquire(self) -> float:
        """Wait until a call may start; returns the seconds waited."""

    def answered(
        self, *, verb: str, seconds: float, status: int, retry_after: float | None = None
    ) -> object:
        """An answer (HTTP status; 0 when none came) to a `verb` call that took `seconds`."""

    @property
    def rate(self) -> float:
        """The calls a second allowed now."""

    def peak_rate(self, window: float = 1.0) -> int:
        """The most calls let through in any `window` seconds of the recent history."""

    def bound(self, window: float = 1.0) -> float:
        """The most calls any `window` seconds may hold under this limiter."""


class StartLog:
    """When recent calls were let through, and the busiest window of them."""

    def __init__(self, history: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._starts: deque[float] = deque(maxlen=history)

    def add(self, start: float) -> None:
        with self._lock:
            self._starts.append(start)

    def start_times(self) -> list[float]:
        """When the recent calls were let through (their reserved start times), oldest first."""
        with self._lock:
            return sorted(self._starts)

    def peak_rate(self, window: float = 1.0) -> int:
        """The most calls let through in any `window` seconds of the recent history."""
        starts = self.start_times()
        peak = 0
        first = 0
        for last, at in enumerate(starts):
            while at - starts[first] >= window:
                first += 1
            peak = max(peak, last - first + 1)
        return peak


class TokenBucket(StartLog):
    """`burst` tokens refilled at `qps` a second; `acquire` takes one, waiting if none is left."""

    def __init__(
        self,
        *,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        history: int = 100_000,
    ) -> None:
        if qps <= 0 or burst <= 0:
            raise ValueError(f"a rate limit needs a positive qps and burst, not {qps} and {burst}")
        super().__init__(history)
        self.qps = float(qps)
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._updated = clock()
        self.calls = 0
        self.waited = 0.0

    def acquire(self) -> float:
        """Take a token, sleeping until one is free; returns the seconds waited."""
        with self._lock:
            now = self._clock()
            self._refill(now)
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            self._starts.append(now + wait)
            self.calls += 1
            self.waited += wait
        if wait > 0:
            self._sleep(wait)
        return wait

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._updated)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._updated = now

    @property
    def rate(self) -> float:
        return self.qps

    def answered(
        self, *, verb: str, seconds: float, status: int, retry_after: float | None = None
    ) -> None:
        """A static rate learns nothing from answers (the back-off gate honours 429s)."""

    def bound(self, window: float = 1.0) -> float:
        """The most calls any `window` seconds can hold: burst + qps x window."""
        return self.burst + self.qps * window
