"""Cluster timing and admission limits: start-latency distributions and the create-rate cap.

Both are drawn from or measured on the simulator's own clock and seeded generator, so a benchmark
or test on the virtual clock sees the same numbers on every run.

A real API server protects itself with API Priority and Fairness (APF): beyond its capacity it
answers 429 with a ``Retry-After`` header and the client is expected to wait that long. The
simulator models the capacity for pod creates as a token bucket (``rate`` creates per second of
clock time, ``burst`` at once), which is what lets a benchmark state a physical bound: no
allocator can bring N pods up faster than ``start latency + N / rate``.
"""

from __future__ import annotations

import math
import random
import threading
from typing import Literal, get_args

from execpods.kubesim.clock import Clock
from execpods.kubesim.errors import ApiError

__all__ = ["DISTRIBUTIONS", "CreateRateLimit", "Distribution", "check_latency", "sample_latency"]

Distribution = Literal["uniform", "fixed", "normal", "lognormal"]
#: The start-latency distributions, by the name ClusterConfig, the CLI and the control take.
DISTRIBUTIONS: tuple[str, ...] = get_args(Distribution)


def check_latency(distribution: str, mean: float, spread: float) -> None:
    """Raise ValueError for an unknown distribution or a negative (or non-finite) parameter."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(
            f"unknown start-latency distribution {distribution!r}; "
            f"one of {', '.join(DISTRIBUTIONS)}"
        )
    for name, value in (("mean", mean), ("spread", spread)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"start-latency {name} must be a finite number >= 0, not {value!r}")


def sample_latency(rng: random.Random, distribution: str, mean: float, spread: float) -> float:
    """One latency in seconds, never negative.

    ``uniform``: within ``mean +/- spread``. ``fixed``: exactly ``mean`` (no draw).
    ``normal``: mean and standard deviation ``spread``, cut at 0. ``lognormal``: a log-normal
    whose own mean and standard deviation are ``mean`` and ``spread`` (a long right tail: most
    containers start near the median, a few take much longer, as image pulls do).
    """
    if distribution == "fixed":
        return mean
    if distribution == "normal":
        return max(0.0, rng.normalvariate(mean, spread))
    if distribution == "lognormal":
        if mean <= 0:
            return 0.0
        sigma2 = math.log1p((spread / mean) ** 2)
        return rng.lognormvariate(math.log(mean) - sigma2 / 2, math.sqrt(sigma2))
    return max(0.0, mean + rng.uniform(-spread, spread))


class CreateRateLimit:
    """A token bucket on the simulator's clock: ``rate`` pod creates per second, ``burst`` at once.

    ``rate == 0`` means no cap. A refill is computed from the clock at each request, so on the
    virtual clock the bucket refills only as the test advances time.
    """

    def __init__(self, clock: Clock, rate: float = 0.0, burst: int = 0) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.configure(rate, burst)

    @staticmethod
    def effective_burst(rate: float, burst: int) -> int:
        """``burst``, or when 0 one second's worth of the rate (at least 1)."""
        return burst if burst > 0 else max(1, math.ceil(rate))

    def configure(self, rate: float, burst: int = 0) -> None:
        """Set (or with ``rate == 0`` lift) the cap; the bucket starts full."""
        if not math.isfinite(rate) or rate < 0:
            raise ValueError(f"create rate must be a finite number >= 0, not {rate!r}")
        if burst < 0:
            raise ValueError(f"create burst must be >= 0, not {burst!r}")
        with self._lock:
            self._rate = float(rate)
            self._burst = self.effective_burst(rate, burst)
            self._tokens = float(self._burst)
            self._stamp = self._clock.now()
            self.rejected = 0

    @property
    def rate(self) -> float:
        return self._rate

    @property
    def burst(self) -> int:
        return self._burst

    def take(self) -> None:
        """Admit one create, or raise 429 with ``Retry-After`` (whole seconds, at least 1) until
        the next token, as APF does. A refused create takes no token."""
        with self._lock:
            if self._rate <= 0:
                return
            now = self._clock.now()
            elapsed = max(0.0, now - self._stamp)
            self._tokens = min(float(self._burst), self._tokens + elapsed * self._rate)
            self._stamp = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return
            self.rejected += 1
            wait = (1.0 - self._tokens) / self._rate
        raise ApiError(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
            retry_after=max(1, math.ceil(wait)),
        )

    def state(self) -> dict[str, float | int]:
        with self._lock:
            return {"perSecond": self._rate, "burst": self._burst, "rejected": self.rejected}
