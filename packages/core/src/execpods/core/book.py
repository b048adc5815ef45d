"""The book of outstanding requests: executors asked of Kubernetes that no snapshot showed yet.

Spark's allocator keeps them in `newlyCreatedExecutors` and `schedulerKnownNewlyCreatedExecs`;
here they are one value, apart from the decision (`allocation.py`), so a round reads as
"bring the book up to date, then decide". Each round, before any decision:

1. executors seen in any snapshot of the batch leave the book (only what a delta snapshot changed
   is looked up, so a batch of thousands of watch updates costs what changed);
2. creates whose answer was lost (a 5xx, a broken connection) are read back with one list: those
   whose pods do not exist leave the book at once, instead of holding their slots for the
   creation timeout as Spark does (`recovery.LostCreates`);
3. unseen executors the driver already knows move aside (as good as running: they never block a
   profile); those the driver let go leave (Spark keeps them, and their target is never met);
4. a request older than the pod creation timeout (max(5 x batch.delay,
   allocation.executor.timeout)) is assumed lost: it leaves the book and the caller deletes its
   pod by label.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from execpods.core.creator import Requested
from execpods.core.labels import ExecutorLabels
from execpods.core.ports import PodOperations
from execpods.core.recovery import LostCreates
from execpods.core.snapshot import ExecutorPodsSnapshot

__all__ = ["BookUpdate", "RequestBook"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class BookUpdate:
    """What bringing the book up to date dropped without a snapshot showing it."""

    lost: tuple[int, ...] = ()
    """Creates that failed without an answer and made no pod: to be replaced."""
    expired: tuple[int, ...] = ()
    """Requests older than the creation timeout: their pods are to be deleted."""


class RequestBook:
    """Unseen requests by executor id: when each was made (monotonic) and of which profile.

    Used by the allocator's thread only."""

    def __init__(self, *, timeout: float, labels: ExecutorLabels, pods: PodOperations) -> None:
        self._timeout = timeout
        self._labels = labels
        self._pods = pods
        self._unseen: dict[int, tuple[float, int]] = {}
        """Executor id -> (monotonic time of its request, its resource profile)."""
        self._known: dict[int, int] = {}
        """Unseen executors the driver knows -> their resource profile."""
        self._lost = LostCreates()

    def __len__(self) -> int:
        """Requests unseen that the driver does not know (Spark's outstanding share)."""
        return len(self._unseen)

    def adopt(self, live: Mapping[int, int], now: float) -> None:
        """Live pods (id -> profile) a restarted allocator found: requested until seen."""
        self._unseen.update({i: (now, p) for i, p in live.items()})

    def add_requested(self, requested: Iterable[Requested]) -> None:
        """Executors whose creates were sent (a lost answer is read back next round)."""
        for r in requested:
            self._unseen[r.executor_id] = (r.at, r.resource_profile_id)
            if r.answer_lost:
                self._lost.add((r.executor_id,))

    def drop(self, executor_ids: Iterable[int]) -> None:
        """Scale-down deleted these requests."""
        for executor_id in executor_ids:
            self._unseen.pop(executor_id, None)

    def update(
        self,
        snapshots: Sequence[ExecutorPodsSnapshot],
        known: Collection[int],
        *,
        app_id: str,
        now: float,
    ) -> BookUpdate:
        """Steps 1-4 of the module's round: seen, lost, known, expired."""
        self._forget_seen(snapshots)
        lost = self._lost.read_back(self._pods, self._labels, app_id, self._unseen)
        for executor_id in lost:
            del self._unseen[executor_id]
        for executor_id in [i for i in self._unseen if i in known]:
            self._known[executor_id] = self._unseen.pop(executor_id)[1]
        for executor_id in [i for i in self._known if i not in known]:
            del self._known[executor_id]  # the driver let it go: it no longer holds a slot
        return BookUpdate(lost=tuple(lost), expired=tuple(self._expire(now)))

    def _forget_seen(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        waiting = set(self._unseen) | set(self._known)
        if not waiting or not snapshots:
            return
        seen: set[int] = set()
        for snapshot in snapshots:
            if snapshot.changed_ids is None:
                seen.update(i for i in waiting if i in snapshot.executor_pods)
            else:
                seen.update(waiting.intersection(snapshot.changed_ids))
        for executor_id in seen:
            self._unseen.pop(executor_id, None)
            self._known.pop(executor_id, None)

    def _expire(self, now: float) -> list[int]:
        expired = sorted(i for i, (at, _) in self._unseen.items() if now - at > self._timeout)
        if not expired:
            return []
        logger.warning(
            "Executors with ids %s were not detected in the Kubernetes cluster after %.0f s "
            "despite the fact that a previous allocation attempt tried to create them. The "
            "executors may have been deleted but the application missed the deletion event.",
            ",".join(map(str, expired)),
            self._timeout,
        )
        for executor_id in expired:
            del self._unseen[executor_id]
        return expired

    # What the decision reads.

    def unseen_of(self, profile_id: int) -> list[int]:
        """Unseen requests of a profile the driver does not know, oldest id first."""
        return sorted(i for i, (_, p) in self._unseen.items() if p == profile_id)

    def known_count(self, profile_id: int) -> int:
        """Unseen executors of a profile that the driver already knows."""
        return sum(1 for p in self._known.values() if p == profile_id)

    def age(self, executor_id: int, now: float) -> float:
        """Seconds since the request of this unseen executor was made."""
        return now - self._unseen[executor_id][0]
