"""Observation points of a running sidecar, fanned out to whoever listens (metrics, health).

The core stays pure and the adapter knows nothing of Prometheus: the gateway reports each API
call to one callback, the pod operations the reconcilers and features use are wrapped to report
pods created, deleted and refused, the resize calls to report pods resized in place, and the
composition root reports each reconciler round to `round_finished` (its `on_round` hook).
Everything reports to one `Telemetry` hub; a listener overrides the methods it cares about.
Listeners run on the reporting thread and must be quick and never raise (a failing listener is
logged and skipped, so telemetry can never break allocation).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

from execpods.core import (
    ApiThrottled,
    ExecutorPod,
    ExecutorPodsSnapshot,
    MemoryUse,
    PodAdmissionRejected,
    PodForbidden,
    PodInvalid,
    PodManifest,
    PodOperationError,
    PodOperations,
    PodSelector,
    ResizeOperations,
    SnapshotsCallback,
)
from execpods.k8s import ApiCall

logger = logging.getLogger(__name__)

REFUSALS = (PodForbidden, PodInvalid, PodAdmissionRejected, ApiThrottled)
"""Errors by which the API refused a create (as opposed to not answering)."""


class TelemetryListener:
    """What a listener may hear; every method does nothing unless overridden."""

    def api_call(self, call: ApiCall) -> None:
        """An API call finished (any thread)."""

    def pods_created(self, count: int) -> None:
        """Executor pods the API accepted."""

    def pods_deleted(self, count: int) -> None:
        """Executor pods the API said it deleted."""

    def pods_resized(self, count: int) -> None:
        """Executor pods the API resized in place (their `resize` subresource)."""

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


class Telemetry(TelemetryListener):
    """The hub: reports go to every registered listener."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: tuple[TelemetryListener, ...] = ()

    def add(self, listener: TelemetryListener) -> None:
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def remove(self, listener: TelemetryListener) -> None:
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x is not listener)

    def _each(self) -> Iterable[TelemetryListener]:
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

    def pods_resized(self, count: int) -> None:
        for listener in self._each():
            _safely(listener.pods_resized, count)

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

    def stream(self) -> StreamTelemetry:
        """Observation of one new stream (reported as opened now)."""
        return StreamTelemetry(self)


class StreamTelemetry:
    """One stream's lag: from its subscriber callback receiving snapshots to their sending.

    `arrived` wraps the store callback (a scheduler thread) and notes when the oldest unsent
    snapshots arrived; `sent` (the stream's coroutine, after a message went out) reports the lag.
    """

    def __init__(self, telemetry: TelemetryListener) -> None:
        self._telemetry = telemetry
        self._oldest: float | None = None
        self._open = True
        telemetry.stream_opened()

    def arrived(self, callback: SnapshotsCallback) -> SnapshotsCallback:
        def stamped(snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
            if snapshots and self._oldest is None:
                self._oldest = time.monotonic()
            callback(snapshots)

        return stamped

    def sent(self) -> None:
        oldest, self._oldest = self._oldest, None
        if oldest is not None:
            self._telemetry.stream_sent(time.monotonic() - oldest)

    def close(self) -> None:
        if self._open:
            self._open = False
            self._telemetry.stream_closed()


def _safely(method: object, *args: object) -> None:
    try:
        method(*args)  # type: ignore[operator]
    except Exception:
        logger.exception("An observer failed; observation goes on without it.")


class CountedPodOperations:
    """`PodOperations` that report what the API did with each pod to `telemetry`."""

    def __init__(self, inner: PodOperations, telemetry: TelemetryListener) -> None:
        self._inner = inner
        self._telemetry = telemetry

    def create(self, manifest: PodManifest) -> None:
        try:
            self._inner.create(manifest)
        except PodOperationError as error:
            if isinstance(error, REFUSALS):
                self._telemetry.pod_refused(type(error).__name__)
            raise
        self._telemetry.pods_created(1)

    def delete(self, name: str) -> None:
        # Counted by the adapter when it can tell (a pod an earlier call deleted counts once).
        counted = getattr(self._inner, "delete_counted", None)
        if callable(counted):
            count = int(counted(name))
        else:
            self._inner.delete(name)
            count = 1
        if count:
            self._telemetry.pods_deleted(count)

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        count = self._inner.delete_by_selector(selector, grace_period_seconds=grace_period_seconds)
        if count:
            self._telemetry.pods_deleted(count)
        return count

    def patch_labels(self, name: str, labels: Mapping[str, str]) -> None:
        self._inner.patch_labels(name, labels)

    def patch_annotations(self, name: str, annotations: Mapping[str, str]) -> None:
        self._inner.patch_annotations(name, annotations)

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        return self._inner.list(selector)


class CountedResizeOperations:
    """`ResizeOperations` that report each in-place resize the API accepted to `telemetry`."""

    def __init__(self, inner: ResizeOperations, telemetry: TelemetryListener) -> None:
        self._inner = inner
        self._telemetry = telemetry

    def memory_uses(self, app_id: str) -> list[MemoryUse]:
        return self._inner.memory_uses(app_id)

    def resize_memory(self, pod: str, container: str, memory_bytes: int) -> None:
        self._inner.resize_memory(pod, container, memory_bytes)
        self._telemetry.pods_resized(1)
