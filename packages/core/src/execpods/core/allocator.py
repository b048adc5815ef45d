"""The allocator: reconciles the desired number of executors against the latest snapshot.

Spark's rules (SPARK-24248): executors are requested in batches, and no new batch is requested
while any executor is pending or any requested executor has not yet appeared in a snapshot. An
executor requested but unseen for longer than the pod creation timeout is assumed lost (the create
never took effect, or its creation and deletion events were both missed): its pod is deleted by
label, if it exists, and it is forgotten, which makes room for a replacement.

State is kept per resource profile so per-profile targets, a cap on pending pods and scale-down of
excess requests can be added by changing the decision, not the bookkeeping.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from execpods.core.errors import PodOperationError
from execpods.core.labels import ExecutorLabels
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    Clock,
    ExecutorPodBuilder,
    PodOperations,
    PodSelector,
    SnapshotsReader,
)
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import PodState

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorCounts:
    """What the latest snapshot says, per state, for one allocation decision."""

    running: int
    pending: int

    @classmethod
    def of(cls, snapshot: ExecutorPodsSnapshot) -> ExecutorCounts:
        running = pending = 0
        for state in snapshot.executor_pods.values():
            kind = state.state
            if kind is PodState.RUNNING:
                running += 1
            elif kind is PodState.PENDING:
                pending += 1
        return cls(running=running, pending=pending)


def executors_to_request(
    *, target: int, counts: ExecutorCounts, outstanding_requests: int, batch_size: int
) -> int:
    """How many executors to request this round (SPARK-24248's rule, as a pure function).

    Nothing while any executor is pending or requested-but-unseen: a batch must start running
    before the next is asked for, which keeps a slow cluster from being flooded with pods.
    """
    if outstanding_requests > 0 or counts.pending > 0 or counts.running >= target:
        return 0
    return min(target - counts.running, batch_size)


@dataclass(slots=True)
class _Request:
    created_at: float
    resource_profile_id: int


class ExecutorPodsAllocator:
    """Creates executor pods until the latest snapshot shows the target running."""

    def __init__(
        self,
        *,
        settings: CoreSettings,
        pod_builder: ExecutorPodBuilder,
        pod_operations: PodOperations,
        store: SnapshotsReader,
        clock: Clock,
    ) -> None:
        self._settings = settings
        self._labels: ExecutorLabels = settings.labels
        self._builder = pod_builder
        self._pods = pod_operations
        self._store = store
        self._clock = clock
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._targets: dict[int, int] = {DEFAULT_RESOURCE_PROFILE_ID: 0}
        self._requested: dict[int, _Request] = {}
        self._has_pending_pods = False
        self._last_snapshot: ExecutorPodsSnapshot | None = None
        self._app_id: str | None = None

    @property
    def pod_creation_timeout(self) -> float:
        return self._settings.pod_creation_timeout

    def start(self, app_id: str) -> None:
        """Subscribe to the store; rounds run every `spark.kubernetes.allocation.batch.delay`."""
        self._app_id = app_id
        self._store.add_subscriber(self._settings.batch_delay, self.on_new_snapshots)

    def set_total_expected_executors(
        self, total: int, *, resource_profile_id: int = DEFAULT_RESOURCE_PROFILE_ID
    ) -> None:
        """Set the target; re-evaluate at once when nothing is outstanding (quick scale-up).

        The total was validated where it was received (`ExecutorPodsBackend.request_total`).
        """
        with self._lock:
            self._targets[resource_profile_id] = total
            notify = not self._has_pending_pods
        logger.info("Target set to %d executors (resource profile %d).", total, resource_profile_id)
        if notify:
            self._store.notify_subscribers()

    @property
    def total_expected_executors(self) -> int:
        with self._lock:
            return sum(self._targets.values())

    def on_new_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """One allocation round (the store calls it serially)."""
        if self._app_id is None:
            raise RuntimeError("the allocator was not started")
        if snapshots:
            self._last_snapshot = snapshots[-1]
            self._forget_seen(snapshots)
        self._expire_unseen_requests()
        latest = self._last_snapshot
        if latest is None:
            return
        counts = ExecutorCounts.of(latest)
        with self._lock:
            target = self._targets.get(DEFAULT_RESOURCE_PROFILE_ID, 0)
        wanted = executors_to_request(
            target=target,
            counts=counts,
            outstanding_requests=len(self._requested),
            batch_size=self._settings.batch_size,
        )
        if wanted > 0:
            logger.info(
                "Going to request %d executors from Kubernetes (%d running, target %d).",
                wanted,
                counts.running,
                target,
            )
            self._request(self._app_id, wanted, DEFAULT_RESOURCE_PROFILE_ID)
        elif counts.running >= target:
            logger.debug("%d executors running, target %d: not scaling up.", counts.running, target)
        else:
            logger.debug(
                "Still waiting for %d executors to begin running before requesting more "
                "(%d pending in the cluster, %d requested but not yet seen).",
                counts.pending + len(self._requested),
                counts.pending,
                len(self._requested),
            )
        with self._lock:
            self._has_pending_pods = counts.pending > 0 or bool(self._requested)

    def _forget_seen(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        if not self._requested:
            return
        seen = [
            executor_id
            for executor_id in self._requested
            if any(executor_id in snapshot.executor_pods for snapshot in snapshots)
        ]
        for executor_id in seen:
            del self._requested[executor_id]

    def _expire_unseen_requests(self) -> None:
        if not self._requested:
            return
        now = self._clock.monotonic()
        timeout = self._settings.pod_creation_timeout
        expired = [i for i, r in self._requested.items() if now - r.created_at > timeout]
        for executor_id in expired:
            logger.warning(
                "Executor with id %d was not detected in the Kubernetes cluster after %.0f s "
                "despite the fact that a previous allocation attempt tried to create it. The "
                "executor may have been deleted but the application missed the deletion event.",
                executor_id,
                timeout,
            )
            self._delete_executor_pods([executor_id])
            del self._requested[executor_id]

    def _delete_executor_pods(self, executor_ids: list[int]) -> None:
        assert self._app_id is not None
        selector = PodSelector.executors_of(self._labels, self._app_id, executor_ids)
        try:
            self._pods.delete_by_selector(selector)
        except PodOperationError as error:
            logger.warning("Could not delete executor pods %s: %s", executor_ids, error)

    def _request(self, app_id: str, count: int, resource_profile_id: int) -> None:
        for _ in range(count):
            executor_id = next(self._ids)
            manifest = self._builder.build(
                executor_id=executor_id, app_id=app_id, resource_profile_id=resource_profile_id
            )
            try:
                self._pods.create(manifest)
            except PodOperationError as error:
                if error.outcome_unknown:
                    # The pod may exist: track it, so the creation timeout cleans it up if not.
                    self._requested[executor_id] = _Request(
                        self._clock.monotonic(), resource_profile_id
                    )
                logger.warning(
                    "Could not create the pod of executor %d (%s: %s); the rest of this batch "
                    "waits for the next round.",
                    executor_id,
                    type(error).__name__,
                    error,
                )
                return
            self._requested[executor_id] = _Request(self._clock.monotonic(), resource_profile_id)
            logger.debug("Requested executor with id %d from Kubernetes.", executor_id)
