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

from execpods.core.errors import PodOperationError
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
