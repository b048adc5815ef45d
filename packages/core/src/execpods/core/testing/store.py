"""SPARK-24248's deterministic snapshots store, split from the doubles of the other ports.

Its deliveries are the test's to time (`notify_subscribers()`), which is what makes a round of
the reconcilers a step a test takes; it is the one double whose point is control, not memory.
"""

from __future__ import annotations

from collections.abc import Iterable

from execpods.core.freshness import WriteLog
from execpods.core.labels import SPARK_LABELS, ExecutorLabels
from execpods.core.pods import ExecutorPod
from execpods.core.ports import Clock, ListMark
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import DEFAULT_CLASSIFIER, PodClassifier
from execpods.core.store import SnapshotsCallback, Subscription


class _Cancelled:
    def __init__(self, store: DeterministicSnapshotsStore, callback: SnapshotsCallback) -> None:
        self._store = store
        self._callback = callback

    def cancel(self) -> None:
        self._store._subscribers.remove(self._callback)


class DeterministicSnapshotsStore:
    """Spark's `DeterministicExecutorPodsSnapshotsStore` (SPARK-24248): one shared buffer,
    delivered on `notify_subscribers()`."""

    def __init__(
        self,
        *,
        labels: ExecutorLabels = SPARK_LABELS,
        clock_time: float = 0.0,
        classifier: PodClassifier = DEFAULT_CLASSIFIER,
        clock: Clock | None = None,
    ) -> None:
        self._labels = labels
        self._clock = clock
        self._classifier = classifier
        self._subscribers: list[SnapshotsCallback] = []
        self._buffer: list[ExecutorPodsSnapshot] = []
        self._current = ExecutorPodsSnapshot(labels=labels, classifier=classifier)
        self._writes = WriteLog()
        self.full_snapshot_time = clock_time
        self.stopped = False

    @property
    def current_snapshot(self) -> ExecutorPodsSnapshot:
        return self._current

    def add_subscriber(self, interval: float, callback: SnapshotsCallback) -> Subscription:
        self._subscribers.append(callback)
        return _Cancelled(self, callback)

    def update_pod(self, pod: ExecutorPod) -> None:
        updated = self._current.with_update(pod)
        if updated is not self._current:
            self._writes.updated(updated.changed_ids or ())
            self._current = updated
            self._buffer.append(updated)

    def begin_list(self) -> ListMark:
        return self._writes.mark()

    def replace_snapshot(
        self, pods: Iterable[ExecutorPod], *, since: ListMark | None = None
    ) -> None:
        listed = ExecutorPodsSnapshot.from_pods(
            pods,
            full_snapshot_ts=(
                self.full_snapshot_time if self._clock is None else self._clock.time()
            ),
            labels=self._labels,
            classifier=self._classifier,
        )
        snapshot = self._writes.full_list(listed, self._current, since)
        if snapshot is not None:
            self._current = snapshot
            self._buffer.append(snapshot)

    def notify_subscribers(self) -> None:
        batch, self._buffer = self._buffer, []
        for subscriber in list(self._subscribers):
            subscriber(batch)

    def stop(self) -> None:
        self.stopped = True
