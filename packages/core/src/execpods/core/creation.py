"""Creating executor pods: concurrency within a round, classified failures, backoff, notices.

A round's creates run concurrently up to `execpods.allocation.batch.concurrency` through a
`CreateRunner` (serial in deterministic tests, a thread pool in the sidecar); the API client's rate
limiter paces them, so concurrency only hides each call's latency and never raises the request rate.

Every failure is classified, counted and reported, never raised out of the round (SPARK-55075):
- admission refusals and invalid pods (403, 422) back the profile off exponentially, with
  jitter so many drivers refused by one admission do not retry in lockstep, and are reported to
  the driver: retrying them every round, as Spark does, only repeats the refusal;
- an exhausted ResourceQuota is capacity, not a failure: a feature takes it (`quota.py` caps the
  profile); a LimitRange or a quota's constraint is namespace policy: backed off, told, and not
  counted;
- throttling (429) and an unavailable API (5xx, transport) pause every create until the API's
  Retry-After has passed (or one batch delay when it named none).
"""

from __future__ import annotations

import enum
import logging
import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from execpods.core.errors import (
    AdmissionPolicyRefused,
    ApiThrottled,
    ApiUnavailable,
    PodAdmissionRejected,
    PodForbidden,
    PodInvalid,
    PodOperationError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_BACKOFF = 300.0
"""The longest a refused profile waits before trying again (seconds)."""


class CreateRunner(Protocol):
    """Runs a round's create calls, at most `limit` at once, and returns their results in order."""

    def run(self, tasks: Sequence[Callable[[], T]], limit: int) -> list[T]: ...


class SerialRunner:
    """One call after another, on the caller's thread: deterministic, for tests and small rounds."""

    def run(self, tasks: Sequence[Callable[[], T]], limit: int) -> list[T]:
        return [task() for task in tasks]


class ThreadPoolRunner:
    """Calls on a pool of worker threads, started on first use and kept for later rounds."""

    def __init__(self, *, workers: int, name: str = "execpods-creates") -> None:
        self._workers = workers
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, tasks: Sequence[Callable[[], T]], limit: int) -> list[T]:
        if len(tasks) <= 1 or limit <= 1:
            return [task() for task in tasks]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix=self._name)
            pool = self._pool
        # At most `limit` in flight: submit in waves of `limit` (the pool may be larger).
        results: list[T] = []
        for start in range(0, len(tasks), limit):
            futures = [pool.submit(task) for task in tasks[start : start + limit]]
            results.extend(future.result() for future in futures)
        return results

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class CreateResult(enum.Enum):
    """How one create went, as the allocator acts on it."""

    CREATED = "created"
    UNKNOWN = "unknown"  # the API may have created it (a lost answer): track it until the timeout
    REFUSED = "refused"  # 403/422: quota, admission, invalid pod; back the profile off
    POLICY = "policy"  # a LimitRange, a quota's constraint: not a failure; back the profile off
    THROTTLED = "throttled"  # 429 or 5xx: pause every create for Retry-After
    FAILED = "failed"  # anything else; counted, retried next round
    NOT_SENT = "not_sent"  # held back before it was sent (throttled meanwhile, no id reserved)


def classify_create_error(error: Exception) -> CreateResult:
    """The result a failed create stands for (the type decides, never the message)."""
    if isinstance(error, ApiThrottled):
        return CreateResult.THROTTLED
    if isinstance(error, ApiUnavailable):
        return CreateResult.THROTTLED
    if isinstance(error, AdmissionPolicyRefused):
        return CreateResult.POLICY
    if isinstance(error, PodAdmissionRejected | PodForbidden | PodInvalid):
        return CreateResult.REFUSED
    if isinstance(error, PodOperationError) and error.status in (403, 422):
        return CreateResult.REFUSED
    return CreateResult.FAILED


class CreateBackoff:
    """When creates may run again: per profile after refusals, for everyone after throttling."""

    def __init__(self, *, base: float, rng: random.Random | None = None) -> None:
        self._base = base
        self._rng = rng if rng is not None else random.Random()
        self._refusals: dict[int, int] = {}
        self._profile_until: dict[int, float] = {}
        self._paused_until = 0.0

    def wait_for(self, profile_id: int, now: float) -> float:
        """Seconds until `profile_id` may create again (0: now)."""
        until = max(self._paused_until, self._profile_until.get(profile_id, 0.0))
        return max(0.0, until - now)

    def refused(self, profile_id: int, now: float) -> float:
        """Back the profile off: base x 2^(refusals-1), equal jitter, capped; returns the wait."""
        count = self._refusals.get(profile_id, 0) + 1
        self._refusals[profile_id] = count
        ceiling: float = min(MAX_BACKOFF, self._base * 2.0 ** min(count - 1, 30))
        delay: float = ceiling / 2 + self._rng.uniform(0.0, ceiling / 2)
        self._profile_until[profile_id] = now + delay
        return delay

    def throttled(self, retry_after: float | None, now: float) -> float:
        """Pause every create for the API's Retry-After (one base delay when it gave none)."""
        delay = self._base if retry_after is None else min(max(retry_after, 0.0), MAX_BACKOFF)
        self._paused_until = max(self._paused_until, now + delay)
        return delay

    def succeeded(self, profile_id: int) -> None:
        """A create of this profile went through: its refusals are forgiven."""
        self._refusals.pop(profile_id, None)
        self._profile_until.pop(profile_id, None)

    def refusals(self, profile_id: int) -> int:
        return self._refusals.get(profile_id, 0)
