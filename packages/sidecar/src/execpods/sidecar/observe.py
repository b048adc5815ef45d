"""Observation points of a running sidecar, fanned out to whoever listens (metrics, health).

The core stays pure and the adapter knows nothing of Prometheus: the gateway reports each API
call to one callback, the pod operations the reconcilers use are wrapped to report pods created,
deleted and refused, and the store the reconcilers subscribe to is wrapped to time each of their
rounds. Everything reports to one `Observers` hub; a listener overrides the methods it cares
about. Listeners run on the reporting thread and must be quick and never raise (a failing
listener is logged and skipped, so observation can never break allocation).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

from execpods.core import (
    ApiThrottled,
    Clock,
    CoreSettings,
    ExecutorPod,
    ExecutorPodsAllocator,
    ExecutorPodsLifecycleManager,
    ExecutorPodsSnapshot,
    PodAdmissionRejected,
    PodForbidden,
    PodInvalid,
    PodManifest,
    PodOperationError,
    PodOperations,
    PodSelector,
    Scheduler,
    SnapshotsCallback,
    SnapshotsStore,
    SnapshotsStoreImpl,
    Subscription,
    SystemClock,
    ThreadScheduler,
)
from execpods.k8s import ApiCall

logger = logging.getLogger(__name__)

REFUSALS = (PodForbidden, PodInvalid, PodAdmissionRejected, ApiThrottled)
"""Errors by which the API refused a create (as opposed to not answering)."""


class Listener:
    """What a listener may hear; every method does nothing unless overridden."""

    def api_call(self, call: ApiCall) -> None:
        """An API call finished (any thread)."""

    def pods_created(self, count: int) -> None:
        """Executor pods the API accepted."""

    def pods_deleted(self, count: int) -> None:
        """Executor pods the API said it deleted."""

    def pod_refused(self, reason: str) -> None:
        """A create the API refused (403, 422, 429...): `reason` is the error's type name."""

    def round_finished(self, kind: str, seconds: float) -> None:
        """A reconciler round (`allocator` or `lifecycle`) finished."""

    def target_set(self, total: int) -> None:
        """The driver set the target number of executors."""

    def stream_opened(self) -> None:
        """A StreamSnapshots call subscribed."""

    def stream_closed(self) -> None:
        """A StreamSnapshots call ended."""

    def stream_sent(self, lag: float) -> None:
        """A stream sent snapshots `lag` seconds after the oldest of them reached it."""


class Observers(Listener):
    """The hub: reports go to every registered listener."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: tuple[Listener, ...] = ()

    def add(self, listener: Listener) -> None:
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def remove(self, listener: Listener) -> None:
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x is not listener)

    def _each(self) -> Iterable[Listener]:
        return self._listeners  # an immutable tuple: read without the lock

    def api_call(self, call: ApiCall) -> None:
        for listener in self._each():
            _safely(listener.api_call, call)

    def pods_created(self, count: int) -> None:
        for listener in self._each():
            _safely(listener.pods_created, count)

    def pods_deleted(self, count: int) -> None:
        for listener in self._each():
            _safely(listener.pods_deleted, count)

    def pod_refused(self, reason: str) -> None:
        for listener in self._each():
            _safely(listener.pod_refused, reason)

    def round_finished(self, kind: str, seconds: float) -> None:
        for listener in self._each():
            _safely(listener.round_finished, kind, seconds)

    def target_set(self, total: int) -> None:
        for listener in self._each():
            _safely(listener.target_set, total)

    def stream_opened(self) -> None:
        for listener in self._each():
            _safely(listener.stream_opened)

    def stream_closed(self) -> None:
        for listener in self._each():
            _safely(listener.stream_closed)

    def stream_sent(self, lag: float) -> None:
        for listener in self._each():
            _safely(listener.stream_sent, lag)

    def stream(self) -> StreamObservation:
        """Observation of one new stream (reported as opened now)."""
        return StreamObservation(self)


class StreamObservation:
    """One stream's lag: from its subscriber callback receiving snapshots to their sending.

    `arrived` wraps the store callback (a scheduler thread) and notes when the oldest unsent
    snapshots arrived; `sent` (the stream's coroutine, after a message went out) reports the lag.
    """

    def __init__(self, observers: Listener) -> None:
        self._observers = observers
        self._oldest: float | None = None
        self._open = True
        observers.stream_opened()

    def arrived(self, callback: SnapshotsCallback) -> SnapshotsCallback:
        def stamped(snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
            if snapshots and self._oldest is None:
                self._oldest = time.monotonic()
            callback(snapshots)

        return stamped

    def sent(self) -> None:
        oldest, self._oldest = self._oldest, None
        if oldest is not None:
            self._observers.stream_sent(time.monotonic() - oldest)

    def close(self) -> None:
        if self._open:
            self._open = False
            self._observers.stream_closed()


def _safely(method: object, *args: object) -> None:
    try:
        method(*args)  # type: ignore[operator]
    except Exception:
        logger.exception("An observer failed; observation goes on without it.")


class ObservedPodOperations:
    """`PodOperations` that report what the API did with each pod to `observers`."""

    def __init__(self, inner: PodOperations, observers: Listener) -> None:
        self._inner = inner
        self._observers = observers

    def create(self, manifest: PodManifest) -> None:
        try:
            self._inner.create(manifest)
        except PodOperationError as error:
            if isinstance(error, REFUSALS):
                self._observers.pod_refused(type(error).__name__)
            raise
        self._observers.pods_created(1)

    def delete(self, name: str) -> None:
        self._inner.delete(name)
        self._observers.pods_deleted(1)

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        count = self._inner.delete_by_selector(selector, grace_period_seconds=grace_period_seconds)
        if count:
            self._observers.pods_deleted(count)
        return count

    def patch_labels(self, name: str, labels: Mapping[str, str]) -> None:
        self._inner.patch_labels(name, labels)

    def patch_annotations(self, name: str, annotations: Mapping[str, str]) -> None:
        self._inner.patch_annotations(name, annotations)

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        return self._inner.list(selector)


ROUND_KINDS = ((ExecutorPodsAllocator, "allocator"), (ExecutorPodsLifecycleManager, "lifecycle"))


def _round_kind(callback: SnapshotsCallback) -> str | None:
    """`allocator` or `lifecycle` for a reconciler's round method, else None (a stream...)."""
    owner = getattr(callback, "__self__", None)
    for cls, kind in ROUND_KINDS:
        if isinstance(owner, cls):
            return kind
    return None


class TimedRounds:
    """A `SnapshotsStore` whose reconciler subscribers' rounds are timed and reported.

    A subscriber that is a reconciler's bound method (the allocator's or the lifecycle manager's
    `on_new_snapshots`) is wrapped to report each round's duration; any other (streams, metrics)
    subscribes unchanged.
    """

    def __init__(self, store: SnapshotsStore, observers: Listener) -> None:
        self._store = store
        self._observers = observers

    def add_subscriber(self, interval: float, callback: SnapshotsCallback) -> Subscription:
        kind = _round_kind(callback)
        if kind is None:
            return self._store.add_subscriber(interval, callback)
        observers = self._observers

        def timed(snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
            started = time.perf_counter()
            try:
                callback(snapshots)
            finally:
                observers.round_finished(kind, time.perf_counter() - started)

        timed.__qualname__ = getattr(callback, "__qualname__", kind)
        return self._store.add_subscriber(interval, timed)

    def update_pod(self, pod: ExecutorPod) -> None:
        self._store.update_pod(pod)

    def replace_snapshot(self, pods: Iterable[ExecutorPod]) -> None:
        self._store.replace_snapshot(pods)

    def notify_subscribers(self) -> None:
        self._store.notify_subscribers()

    def stop(self) -> None:
        self._store.stop()

    @property
    def current_snapshot(self) -> ExecutorPodsSnapshot:
        return self._store.current_snapshot

    @property
    def subscriber_count(self) -> int:
        """The wrapped store's subscriber count (for leak tests), when it keeps one."""
        count: int = getattr(self._store, "subscriber_count", 0)
        return count


def timed_store(
    settings: CoreSettings,
    observers: Listener,
    *,
    clock: Clock | None = None,
    scheduler: Scheduler | None = None,
) -> TimedRounds:
    """The production store (as `compose_backend` would make it), with reconciler rounds timed."""
    return TimedRounds(
        SnapshotsStoreImpl(
            scheduler
            if scheduler is not None
            else ThreadScheduler(workers=2, name="execpods-subscribers"),
            clock=clock if clock is not None else SystemClock(),
            labels=settings.labels,
        ),
        observers,
    )
