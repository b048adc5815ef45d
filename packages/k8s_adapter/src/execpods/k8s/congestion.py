"""The adaptive rate limit: calls paced at the rate a `RateController` learns.

`execpods.kubernetes.api.ratePolicy=adaptive` (the default). The gateway takes a start from
`acquire` before every call, creates first among the sidecar's calls by volume, and deletes,
lists and patches alike, and tells `answered` how every call but a watch went (a watch's latency
is a stream's life, not the server's answer time). The controller (`ratecontrol.py`)
decides the rate; this class only paces:

- calls start `1 / rate` apart, in the order they asked (a reservation, as the token bucket);
- after an idle spell, up to `burst` calls may start at once (`execpods.kubernetes.api.burst`,
  as the static bucket's) while the controller is still in slow start, so a small scale-up is
  not paced at all; once the server has pushed back, an idle spell saves up only
  `PACED_SECONDS` of the rate, and a congestion signal saves up nothing: a client that was
  refused (its calls failing unsent behind the back-off gate) must not come back as a wall of
  requests that fills its queue again;
- a 429's Retry-After holds back only the request it refused (the gateway sends that one again
  after it); the others go on at the rate, which the 429 cut;
- it tells the controller whether the client uses its rate (a call waited for it in the last
  second, or calls came at `DEMAND` of it): only then does a clean answer raise it.

Thread-safe: the controller is used under the limiter's lock. Time and sleeping are injected, so
the pacing is proved with a fake clock (tests/k8s/test_congestion_limiter.py).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from execpods.k8s.ratecontrol import DEMAND, CongestionConfig, RateController, Signal
from execpods.k8s.ratelimit import RateLimiter, StartLog, TokenBucket
from execpods.k8s.ratesettings import ApiRateSettings

DEFAULT_BURST = 300
"""Calls an idle client may start at once in slow start (the static bucket's default burst)."""
PACED_SECONDS = 0.1
"""After the first congestion signal, how much of the rate an idle spell saves up."""


class AdaptiveRateLimiter(StartLog):
    """Pacing at a `RateController`'s rate; every answer goes back to the controller."""

    def __init__(
        self,
        config: CongestionConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        burst: int = DEFAULT_BURST,
        history: int = 100_000,
    ) -> None:
        if burst < 1:
            raise ValueError(f"an idle burst needs at least one call, not {burst}")
        super().__init__(history)
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self.controller = RateController(config, clock=clock)
        self._next = -math.inf
        self._last_second: deque[float] = deque()
        self._waited_at = -math.inf
        self.calls = 0
        self.waited = 0.0

    @classmethod
    def from_settings(cls, settings: ApiRateSettings) -> AdaptiveRateLimiter:
        """The controller bounded by minQps and maxQps, starting at qps."""
        return cls(
            CongestionConfig(
                floor=settings.min_qps, ceiling=settings.max_qps, initial=float(settings.qps)
            ),
            burst=settings.burst,
        )

    @property
    def rate(self) -> float:
        with self._lock:
            return self.controller.rate

    def acquire(self) -> float:
        """Wait for this call's start (paced, after any Retry-After); returns the seconds waited."""
        with self._lock:
            now = self._clock()
            rate = self.controller.rate
            # The reservation never lags more than a burst behind now: an idle spell saves up
            # at most that many calls.
            saved = (self.burst - 1) / rate if self.controller.slow_start else PACED_SECONDS
            base = max(self._next, now - saved)
            start = now if base <= now + 1e-9 else base  # float dust is no wait
            self._next = base + 1.0 / rate
            wait = start - now
            if wait > 0:
                self._waited_at = now
            self._starts.append(start)
            self._last_second.append(start)
            self.calls += 1
            self.waited += wait
        if wait > 0:
            self._sleep(wait)
        return wait

    def answered(
        self, *, verb: str, seconds: float, status: int, retry_after: float | None = None
    ) -> Signal:
        with self._lock:
            now = self._clock()
            recent = self._last_second
            while recent and recent[0] < now - 1.0:
                recent.popleft()
            rate = self.controller.rate
            # The rate binds: a call had to wait for it, or calls came near it, lately.
            signal = self.controller.answered(
                verb=verb,
                seconds=seconds,
                status=status,
                retry_after=retry_after,
                demand=now - self._waited_at < 1.0 or len(recent) >= DEMAND * rate,
            )
            if signal not in (Signal.CLEAN, Signal.IGNORED):
                self._next = max(self._next, now)  # nothing saved up survives a push-back
            return signal

    def bound(self, window: float = 1.0) -> float:
        """The most calls any `window` seconds may hold: the ceiling's, plus one burst."""
        return self.controller.config.ceiling * window + self.burst


def rate_limiter_for(settings: ApiRateSettings) -> RateLimiter:
    """The limiter `execpods.kubernetes.api.ratePolicy` names: adaptive or static."""
    if settings.policy == "static":
        return TokenBucket(qps=settings.qps, burst=settings.burst)
    return AdaptiveRateLimiter.from_settings(settings)


__all__ = ["DEFAULT_BURST", "PACED_SECONDS", "AdaptiveRateLimiter", "rate_limiter_for"]
