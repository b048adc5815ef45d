"""The snapshot store: the single writer of the current snapshot, and its subscribers.

Producers (the watch, the poll) push pods in through its write side (`SnapshotsWriter`); the
store turns each push into a new immutable snapshot and appends it to every subscriber's buffer.
Subscribers (the reconcilers, the streams) use its read side (`SnapshotsReader`). Each subscriber
drains its buffer on its own interval, so the allocator can react every second while another
consumer batches for longer, and neither waits for the other. The Protocols live in `ports`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable

from execpods.core.clock import SystemClock
from execpods.core.freshness import WriteLog
from execpods.core.labels import SPARK_LABELS, ExecutorLabels
from execpods.core.pods import ExecutorPod
from execpods.core.ports import (
    Cancellable,
    Clock,
    ListMark,
    Scheduler,
    SnapshotsCallback,
    SnapshotsReader,
    SnapshotsStore,
    SnapshotsWriter,
    Subscription,
)
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import DEFAULT_CLASSIFIER, PodClassifier

__all__ = [
    "SnapshotsCallback",
    "SnapshotsReader",
    "SnapshotsStore",
    "ScheduledSnapshotsStore",
    "SnapshotsWriter",
    "Subscription",
]

logger = logging.getLogger(__name__)


class _Subscriber:
    """One subscriber: a buffer, a callback, and a lock that keeps its deliveries serial."""

    __slots__ = ("buffer", "callback", "cancelled", "delivery_lock", "name", "task")

    def __init__(self, callback: SnapshotsCallback, first: ExecutorPodsSnapshot) -> None:
        self.buffer: deque[ExecutorPodsSnapshot] = deque((first,))
        self.callback = callback
        self.delivery_lock = threading.Lock()
        self.task: Cancellable | None = None
        self.cancelled = False
        self.name = getattr(callback, "__qualname__", repr(callback))


class _SubscriptionHandle:
    def __init__(self, store: ScheduledSnapshotsStore, subscriber: _Subscriber) -> None:
        self._store = store
        self._subscriber = subscriber

    def cancel(self) -> None:
        self._store._remove(self._subscriber)


class ScheduledSnapshotsStore:
    """The store, delivering on an injected scheduler (which it owns and shuts down on `stop`)."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        clock: Clock | None = None,
        labels: ExecutorLabels = SPARK_LABELS,
        classifier: PodClassifier = DEFAULT_CLASSIFIER,
    ) -> None:
        self._scheduler = scheduler
        self._clock = clock if clock is not None else SystemClock()
        self._labels = labels
        self._classifier = classifier
        self._lock = threading.Lock()
        self._current = ExecutorPodsSnapshot(labels=labels, classifier=classifier)
        self._writes = WriteLog()
        self._subscribers: list[_Subscriber] = []
        self._stopped = False

    @property
    def current_snapshot(self) -> ExecutorPodsSnapshot:
        return self._current

    @property
    def subscriber_count(self) -> int:
        """How many subscribers are registered (for health checks and leak tests)."""
        return len(self._subscribers)

    def add_subscriber(self, interval: float, callback: SnapshotsCallback) -> Subscription:
        if interval <= 0:
            raise ValueError(f"a subscriber's interval must be positive, not {interval}")
        with self._lock:
            if self._stopped:
                raise RuntimeError("the snapshots store is stopped")
            subscriber = _Subscriber(callback, self._current)
            self._subscribers = [*self._subscribers, subscriber]
        subscriber.task = self._scheduler.schedule_with_fixed_delay(
            0.0, interval, self._delivery_of(subscriber)
        )
        return _SubscriptionHandle(self, subscriber)

    def _remove(self, subscriber: _Subscriber) -> None:
        subscriber.cancelled = True
        if subscriber.task is not None:
            subscriber.task.cancel()
        with self._lock:
            self._subscribers = [s for s in self._subscribers if s is not subscriber]
            subscriber.buffer.clear()

    def update_pod(self, pod: ExecutorPod) -> None:
        with self._lock:
            updated = self._current.with_update(pod)
            if updated is not self._current:
                self._writes.updated(updated.changed_ids or ())
                self._publish(updated)

    def begin_list(self) -> ListMark:
        with self._lock:
            return self._writes.mark()

    def replace_snapshot(
        self, pods: Iterable[ExecutorPod], *, since: ListMark | None = None
    ) -> None:
        listed = ExecutorPodsSnapshot.from_pods(
            pods,
            full_snapshot_ts=self._clock.time(),
            labels=self._labels,
            classifier=self._classifier,
        )
        with self._lock:
            snapshot = self._writes.full_list(listed, self._current, since)
            if snapshot is not None:
                self._publish(snapshot)

    def _publish(self, snapshot: ExecutorPodsSnapshot) -> None:
        self._current = snapshot
        for subscriber in self._subscribers:
            subscriber.buffer.append(snapshot)

    def notify_subscribers(self) -> None:
        for subscriber in self._subscribers:
            self._scheduler.submit(self._delivery_of(subscriber))

    def _delivery_of(self, subscriber: _Subscriber) -> Callable[[], None]:
        return lambda: self._deliver(subscriber)

    def _deliver(self, subscriber: _Subscriber) -> None:
        with subscriber.delivery_lock:
            if subscriber.cancelled:
                return
            with self._lock:
                batch = list(subscriber.buffer)
                subscriber.buffer.clear()
            try:
                subscriber.callback(batch)
            except Exception:
                logger.exception(
                    "Snapshot subscriber %s failed on a batch of %d snapshots; it will be "
                    "called again at its next interval.",
                    subscriber.name,
                    len(batch),
                )

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            subscribers, self._subscribers = self._subscribers, []
        for subscriber in subscribers:
            subscriber.cancelled = True
            if subscriber.task is not None:
                subscriber.task.cancel()
        self._scheduler.shutdown()
