"""Scale-down deletions, followed until they took effect (Spark's `isDeleted`, made to hold).

Scale-down deletes excess Pending pods by label with `status.phase=Pending`, as Spark does, and
answers `is_deleted` true for them so that a driver refuses their late registration. Spark marks
the ids before the call and never looks again: when the delete fails (a webhook or a policy
denies it, the API is down) nothing retries it, the counts leave the pods out and `isDeleted`
stays true, so they run on as orphans until the application ends.

Here every id scale-down picks is followed until its pod is gone:
- a failed delete is retried, by the same selector, after a back-off (one batch delay, doubling
  up to `MAX_RETRY_S`; the API client's own back-off gate paces the calls too) until it is
  accepted, and the ids count as deleted meanwhile (`is_deleted` true: "being retried");
- an accepted delete is checked `CHECK_AFTER_DELAYS` batch delays later: a pod still Pending is
  deleted again; a pod that turned Running before the call reached it was not deleted (the phase
  selector spared it), so it is no longer counted as deleted: it is a running executor like any
  other, never deleted by scale-down;
- an id leaves the set once its pod is gone from the snapshots (or finished, or terminating).
Memory: one entry per id picked, until its pod is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial

from execpods.core.allocation import ProfileState, excess_to_delete
from execpods.core.book import RequestBook
from execpods.core.errors import PodOperationError
from execpods.core.labels import ExecutorLabels
from execpods.core.ports import Clock, PodOperations, PodSelector
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorState

logger = logging.getLogger(__name__)

MAX_RETRY_S = 30.0
CHECK_AFTER_DELAYS = 5
"""An accepted delete is checked this many batch delays later."""

DeleteCall = Callable[[frozenset[int]], None]
"""Deletes the Pending pods of these executors; raises `PodOperationError` when it fails."""


class ScaleDownDeletions:
    """The executors scale-down deleted (or is deleting), until their pods are gone."""

    def __init__(self, *, batch_delay: float) -> None:
        self._base = batch_delay
        self._deleted: frozenset[int] = frozenset()
        """Read from any thread (`is_deleted`): replaced whole, never changed in place."""
        self._due: dict[int, float] = {}
        """Ids still followed -> when to look at (or retry) them next (monotonic)."""
        self._failures = 0
        self._failing: set[int] = set()
        """Ids whose last delete failed: followed even before a snapshot shows their pods."""

    def __contains__(self, executor_id: object) -> bool:
        return executor_id in self._deleted

    @property
    def ids(self) -> frozenset[int]:
        return self._deleted

    def delete(self, ids: Iterable[int], call: DeleteCall, now: float) -> bool:
        """Delete these executors' Pending pods; returns whether the API accepted it. Either
        way they count as deleted from now on, and are followed until their pods are gone."""
        picked = frozenset(ids)
        self._deleted = self._deleted | picked
        return self._call(picked, call, now)

    def revisit(self, snapshot: ExecutorPodsSnapshot, call: DeleteCall, now: float) -> None:
        """Follow up on the ids whose time has come, against the round's latest snapshot."""
        due = [i for i, at in self._due.items() if at <= now]
        if not due:
            return
        again: list[int] = []
        spared: list[int] = []
        for executor_id in due:
            observed = snapshot.get(executor_id)
            if observed is None and executor_id in self._failing:
                again.append(executor_id)  # not seen yet, and its delete never went through
            elif (
                observed is None or observed.is_final or observed.pod.deletion_timestamp is not None
            ):
                del self._due[executor_id]  # gone or going: leaves the set with its pod
                self._failing.discard(executor_id)
            elif observed.state is ExecutorState.PENDING:
                again.append(executor_id)
            else:  # turned Running before the delete reached it: not deleted after all
                spared.append(executor_id)
                del self._due[executor_id]
                self._failing.discard(executor_id)
        if spared:
            logger.info(
                "Executors %s turned Running before their scale-down delete reached them: they "
                "were not deleted and count as running again.",
                ",".join(map(str, sorted(spared))),
            )
            self._deleted = self._deleted - frozenset(spared)
        if again:
            logger.info(
                "Deleting again the Pending pods of executors %s, which scale-down deleted.",
                ",".join(map(str, sorted(again))),
            )
            self._call(frozenset(again), call, now)

    def forget_gone(self, snapshot: ExecutorPodsSnapshot) -> None:
        """Drop the ids whose pods are not in the snapshots, unless their delete is failing."""
        kept = frozenset(i for i in self._deleted if i in snapshot or i in self._failing)
        for executor_id in self._deleted - kept:
            self._due.pop(executor_id, None)
        self._deleted = kept

    def _call(self, ids: frozenset[int], call: DeleteCall, now: float) -> bool:
        try:
            call(ids)
        except PodOperationError as error:
            self._failures += 1
            wait = min(MAX_RETRY_S, self._base * 2.0 ** min(self._failures - 1, 30))
            logger.warning(
                "Could not delete the Pending pods of executors %s (%s): they count as deleted "
                "and the delete is retried in %.1f s until their pods are gone.",
                ",".join(map(str, sorted(ids))),
                error,
                wait,
            )
            self._due.update(dict.fromkeys(ids, now + wait))
            self._failing.update(ids)
            return False
        self._failures = 0
        self._failing.difference_update(ids)
        self._due.update(dict.fromkeys(ids, now + CHECK_AFTER_DELAYS * self._base))
        return True


class ScaleDown:
    """Scale-down carried out: a profile's excess requests and Pending pods deleted, and the
    deletes (and those of expired requests) followed until the pods are gone."""

    def __init__(
        self,
        *,
        pods: PodOperations,
        labels: ExecutorLabels,
        batch_delay: float,
        idle_timeout: float,
        clock: Clock,
    ) -> None:
        self._clock = clock
        self._pods = pods
        self._labels = labels
        self._idle_timeout = idle_timeout
        self.deleted = ScaleDownDeletions(batch_delay=batch_delay)

    def follow_up(self, snapshot: ExecutorPodsSnapshot, *, app_id: str, now: float) -> None:
        """Retry or check the deletes whose time has come; forget the pods that are gone."""
        self.deleted.revisit(snapshot, partial(self._delete_pending, app_id), now)
        self.deleted.forget_gone(snapshot)

    def delete_expired(self, ids: Iterable[int], *, app_id: str, now: float) -> None:
        """Spark's delete by id of requests that never showed; followed as scale-down's are
        (retried only while Pending): a denied delete must not leak them."""
        self.deleted.delete(ids, partial(self._delete_by_id, app_id), now)

    def trim(
        self,
        states: Iterable[ProfileState],
        *,
        snapshot: ExecutorPodsSnapshot,
        book: RequestBook,
        app_id: str,
        wall: float,
    ) -> list[ProfileState]:
        """Each profile without its excess, deleted (`allocation.excess_to_delete`). Unseen
        requests age on the monotonic clock (the book's), Pending pods by their creation
        stamps (`wall`)."""
        now = self._clock.monotonic()
        return [
            self._trim(s, snapshot=snapshot, book=book, app_id=app_id, now=now, wall=wall)
            for s in states
        ]

    def _trim(
        self,
        state: ProfileState,
        *,
        snapshot: ExecutorPodsSnapshot,
        book: RequestBook,
        app_id: str,
        now: float,
        wall: float,
    ) -> ProfileState:
        if state.pod_count <= state.target:
            return state
        pods = snapshot.executor_pods
        pending_ages: dict[int, float | None] = {}
        for executor_id in state.pending_unknown:
            stamp = pods[executor_id].pod.creation_timestamp
            pending_ages[executor_id] = None if stamp is None else wall - stamp.timestamp()
        excess = excess_to_delete(
            state,
            request_ages={i: book.age(i, now) for i in state.unseen},
            pending_ages=pending_ages,
            idle_timeout=self._idle_timeout,
        )
        if not excess:
            return state
        ids = excess.ids
        logger.info(
            "Deleting %d excess pod requests of resource profile %d (%s).",
            len(ids),
            state.profile_id,
            ",".join(map(str, ids)),
        )
        # Deleted or being retried, the ids count as deleted: never orphaned.
        self.deleted.delete(ids, partial(self._delete_pending, app_id), now)
        book.drop(excess.unseen)
        dropped = set(ids)
        return ProfileState(
            profile_id=state.profile_id,
            target=state.target,
            running=state.running,
            pending_unknown=tuple(i for i in state.pending_unknown if i not in dropped),
            pending_known=state.pending_known,
            unseen=tuple(i for i in state.unseen if i not in dropped),
            unseen_known=state.unseen_known,
        )

    def _delete_by_id(self, app_id: str, ids: frozenset[int]) -> None:
        self._pods.delete_by_selector(PodSelector.executors_of(self._labels, app_id, ids))

    def _delete_pending(self, app_id: str, ids: frozenset[int]) -> None:
        """Scale-down's one call: the Pending pods of `ids`, never one that turned Running."""
        selector = PodSelector(
            labels=self._labels.for_app(app_id),
            label_in={self._labels.executor_id: frozenset(str(i) for i in ids)},
            phase="Pending",
        )
        self._pods.delete_by_selector(selector)
