"""The watch's retry pacing: exponential, capped, full jitter from a seeded rng, Retry-After."""

from __future__ import annotations

import random
import threading

from execpods.k8s import Backoff, EventWaiter
from execpods.k8s.backoff import RETRY_AFTER_CAP


def delays(seed: int, count: int = 12) -> list[float]:
    backoff = Backoff(initial=0.5, maximum=30.0, rng=random.Random(seed))
    return [backoff.next_delay() for _ in range(count)]


def test_jitter_is_random_but_reproducible() -> None:
    assert delays(1) == delays(1)
    assert delays(1) != delays(2)
    # Full jitter: the draws are spread, not a fixed ladder.
    assert len({round(d, 6) for d in delays(3, count=50)}) == 50


def test_growth_is_exponential_floored_and_capped() -> None:
    for seed in range(20):
        for attempt, delay in enumerate(delays(seed, count=40)):
            ceiling = min(30.0, 0.5 * 2**attempt)
            assert 0.05 <= delay <= ceiling, (seed, attempt, delay)
    late = delays(0, count=200)[20:]
    assert max(late) <= 30.0
    assert sum(late) / len(late) > 10.0  # after many failures the delays are long, not a loop


def test_retry_after_is_honoured_but_not_without_bound() -> None:
    backoff = Backoff(initial=0.5, maximum=30.0, rng=random.Random(0))
    assert backoff.next_delay(retry_after=5.0) >= 5.0
    assert backoff.next_delay(retry_after=0.0) >= 0.05
    assert backoff.next_delay(retry_after=10_000.0) == RETRY_AFTER_CAP


def test_reset_starts_over() -> None:
    backoff = Backoff(initial=1.0, maximum=60.0, rng=random.Random(0))
    for _ in range(10):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() <= 1.0


def test_the_event_waiter_ends_waits_when_stopped() -> None:
    waiter = EventWaiter()
    assert waiter.wait(0.0) is False
    stopper = threading.Timer(0.05, waiter.stop)
    stopper.start()
    assert waiter.wait(30.0) is True  # cut short by stop(), not by the 30 s
    assert waiter.stopped
    assert waiter.wait(30.0) is True  # every later wait returns at once
    stopper.join()
