"""Adaptive batches: how many creates one round of one profile may make, learnt from how they went.

Spark creates `batch.size` pods per round, whatever happens: at 20 a second, 10,000 executors take
over eight minutes however fast the cluster is, and a refused quota is hit 20 times a second. The
Kubernetes Job controller does better with *slow start*: it creates in steps of 1, 2, 4, 8... and
takes the next, twice as large, step only when every create of the previous one succeeded, so a
healthy API is filled quickly and a failing one sees a handful of calls.

`AdaptiveBatch` applies that to a profile's rounds:
- a round is a series of steps; the first is the step the previous round ended with (at first
  `batch.size`), and each step after a clean one doubles, up to the round's cap;
- the round's cap is the pending caps' allowance, bounded by what the rate limit lets through in
  five batch delays (`ceiling`), so a round never outlasts a few rate-limited seconds;
- a refusal or throttling ends the round and halves the step; a pod that failed to start (it went
  Failed, or its container cannot start: ErrImagePull and the like) halves it too.

Off (`execpods.allocation.adaptiveBatches=false`), a round is one step of `batch.size`, as Spark.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from execpods.core.pods import ContainerWaiting
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorState, ObservedPod

ROUND_SECONDS = 5
"""A round may hold up to this many batch delays' worth of rate-limited creates."""
API_RATE_CEILING = 2000.0
"""The most API calls a second a client's rate policy may allow, unless its composer says
otherwise (the adapter's adaptive policy's default ceiling, `execpods.kubernetes.api.maxQps`)."""

START_FAILURE_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
        "RunContainerError",
    }
)


def round_ceiling(*, batch_size: int, api_qps: float, batch_delay: float) -> int:
    """The most creates one round may make: what the rate limit passes in ROUND_SECONDS delays."""
    return max(batch_size, math.ceil(api_qps * batch_delay * ROUND_SECONDS))


class AdaptiveBatch:
    """One profile's step size (slow start) and its response to trouble."""

    def __init__(self, *, batch_size: int, ceiling: int, enabled: bool) -> None:
        self._batch_size = batch_size
        self._ceiling = max(ceiling, batch_size) if enabled else batch_size
        self._enabled = enabled
        self._step = batch_size

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def step(self) -> int:
        """The size of the next round's first step."""
        return self._step

    @property
    def round_cap(self) -> int:
        """The most creates the next round may make."""
        return self._ceiling

    def steps(self, wanted: int) -> list[int]:
        """The step sizes for `wanted` creates, if every step goes cleanly."""
        if not self._enabled:
            return [min(wanted, self._batch_size)] if wanted > 0 else []
        sizes: list[int] = []
        left = min(wanted, self._ceiling)
        step = self._step
        while left > 0:
            take = min(step, left)
            sizes.append(take)
            left -= take
            step = min(step * 2, self._ceiling)
        return sizes

    def clean_step(self, size: int) -> None:
        """A step of `size` was all created: the next round starts from the doubled step."""
        if self._enabled:
            self._step = max(self._step, min(size * 2, self._ceiling))

    def trouble(self) -> None:
        """Refusals, throttling or start failures: halve the step (never below one)."""
        if self._enabled:
            self._step = max(1, self._step // 2)


def start_failed(observed: ObservedPod) -> bool:
    """Whether a pod shows that its executor could not start (not a failure after running)."""
    if observed.state is ExecutorState.FAILED:
        return True
    container = observed.executor_container()
    if container is None or not isinstance(container.state, ContainerWaiting):
        return False
    return container.state.reason in START_FAILURE_REASONS


class StartTracker:
    """Executors this allocator created that have not started yet, and which failed to start."""

    def __init__(self) -> None:
        self._waiting: set[int] = set()

    def created(self, executor_ids: Iterable[int]) -> None:
        self._waiting.update(executor_ids)

    def forget(self, executor_ids: Iterable[int]) -> None:
        self._waiting.difference_update(executor_ids)

    def observe_all(self, snapshots: Iterable[ExecutorPodsSnapshot]) -> int:
        """`observe` each snapshot of a batch in order; a delta snapshot costs what it changed."""
        failures = 0
        for snapshot in snapshots:
            if not self._waiting:
                break
            changed = snapshot.changed_ids
            if changed is None:
                failures += self.observe(snapshot)
            else:
                failures += self.observe(snapshot, self._waiting.intersection(changed))
        return failures

    def observe(self, snapshot: ExecutorPodsSnapshot, ids: Iterable[int] | None = None) -> int:
        """Note started and failed executors; returns how many failed to start.

        An executor that is gone (deleted, succeeded) without a start failure is simply forgotten:
        scale-down and kills are not the cluster's fault.
        """
        failures = 0
        for executor_id in list(self._waiting if ids is None else ids):
            observed = snapshot.get(executor_id)
            if observed is None:
                continue
            if start_failed(observed):
                self._waiting.discard(executor_id)
                failures += 1
            elif observed.state is not ExecutorState.PENDING:
                self._waiting.discard(executor_id)
        return failures

    def __len__(self) -> int:
        return len(self._waiting)
