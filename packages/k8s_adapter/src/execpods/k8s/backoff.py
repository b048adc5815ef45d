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
from dataclasses import dataclass, field
from typing import Protocol

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
