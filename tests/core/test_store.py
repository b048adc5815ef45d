"""Spark's ExecutorPodsSnapshotsStoreSuite (SPARK-24248) on a deterministic scheduler, and more."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from execpods.core import (
    DeterministicScheduler,
    ExecutorPod,
    ExecutorPodsSnapshot,
    ManualClock,
    ThreadScheduler,
)
from execpods.core.store import ScheduledSnapshotsStore


def pod_with_index(index: int) -> ExecutorPod:
    return ExecutorPod(name=f"pod-{index}", labels={"spark-exec-id": str(index)}, phase="running")


def snapshot(*indices: int) -> ExecutorPodsSnapshot:
    return ExecutorPodsSnapshot.from_pods([pod_with_index(i) for i in indices])


@pytest.fixture
def scheduler() -> DeterministicScheduler:
    return DeterministicScheduler(ManualClock())


@pytest.fixture
def store(scheduler: DeterministicScheduler) -> ScheduledSnapshotsStore:
    return ScheduledSnapshotsStore(scheduler, clock=scheduler.clock)


def test_subscribers_get_notified_of_events_periodically(
    scheduler: DeterministicScheduler, store: ScheduledSnapshotsStore
) -> None:
    received1: list[ExecutorPodsSnapshot] = []
    received2: list[ExecutorPodsSnapshot] = []
    store.add_subscriber(1.0, received1.extend)
    store.add_subscriber(2.0, received2.extend)
    scheduler.run_until_idle()
    assert received1 == [snapshot()]
    assert received2 == [snapshot()]

    store.update_pod(pod_with_index(1))
    scheduler.tick(1.0)
    assert received1 == [snapshot(), snapshot(1)]
    assert received2 == [snapshot()]

    scheduler.tick(1.0)
    assert received1 == [snapshot(), snapshot(1)], "snapshots are never repeated"
    assert received2 == [snapshot(), snapshot(1)]

    store.update_pod(pod_with_index(2))
    store.update_pod(pod_with_index(3))
    scheduler.tick(1.0)
    assert received1 == [snapshot(), snapshot(1), snapshot(1, 2), snapshot(1, 2, 3)]
    assert received2 == [snapshot(), snapshot(1)]

    scheduler.tick(1.0)
    assert received1 == received2


def test_even_without_events_a_subscriber_first_receives_the_current_snapshot(
    scheduler: DeterministicScheduler, store: ScheduledSnapshotsStore
) -> None:
    received: list[Sequence[ExecutorPodsSnapshot]] = []
    store.add_subscriber(1.0, received.append)
    assert received == []
    scheduler.run_until_idle()
    assert received == [[snapshot()]]


def test_replacing_the_snapshot_passes_the_new_snapshot_to_subscribers(
    scheduler: DeterministicScheduler, store: ScheduledSnapshotsStore
) -> None:
    received: list[ExecutorPodsSnapshot] = []
    store.add_subscriber(1.0, received.extend)
    store.update_pod(pod_with_index(1))
    scheduler.tick(1.0)
    assert received == [snapshot(), snapshot(1)]
    scheduler.clock.advance(10.0)
    store.replace_snapshot([pod_with_index(2)])
    scheduler.tick(1.0)
    full = ExecutorPodsSnapshot.from_pods([pod_with_index(2)], full_snapshot_ts=11.0)
    assert received == [snapshot(), snapshot(1), full]
    assert received[-1].full_snapshot_ts == 11.0
    assert received[-1].parent_serial is None


def test_a_late_subscriber_starts_from_the_current_snapshot(
    scheduler: DeterministicScheduler, store: ScheduledSnapshotsStore
) -> None:
    store.update_pod(pod_with_index(1))
    store.update_pod(pod_with_index(2))
    received: list[ExecutorPodsSnapshot] = []
    store.add_subscriber(1.0, received.extend)
    scheduler.run_until_idle()
    assert received == [snapshot(1, 2)]


def test_a_failing_subscriber_is_logged_and_called_again(
    scheduler: DeterministicScheduler,
    store: ScheduledSnapshotsStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def flaky(batch: Sequence[ExecutorPodsSnapshot]) -> None:
        calls.append(len(batch))
        if len(calls) == 1:
            raise RuntimeError("boom")

    healthy: list[ExecutorPodsSnapshot] = []
    store.add_subscriber(1.0, flaky)
    store.add_subscriber(1.0, healthy.extend)
    scheduler.run_until_idle()
    store.update_pod(pod_with_index(1))
    scheduler.tick(1.0)
    assert calls == [1, 1]
    assert healthy == [snapshot(), snapshot(1)]
    assert "failed on a batch of 1 snapshots" in caplog.text


def test_notify_subscribers_delivers_without_waiting_for_the_interval(
    scheduler: DeterministicScheduler, store: ScheduledSnapshotsStore
) -> None:
    received: list[ExecutorPodsSnapshot] = []
    store.add_subscriber(60.0, received.extend)
    scheduler.run_until_idle()
    store.update_pod(pod_with_index(1))
    store.notify_subscribers()
    scheduler.run_until_idle()
    assert received == [snapshot(), snapshot(1)]
    assert scheduler.clock.monotonic() == 0.0


def test_cancel_and_stop_end_deliveries(
    scheduler: DeterministicScheduler, store: ScheduledSnapshotsStore
) -> None:
    cancelled: list[ExecutorPodsSnapshot] = []
    kept: list[ExecutorPodsSnapshot] = []
    subscription = store.add_subscriber(1.0, cancelled.extend)
    store.add_subscriber(1.0, kept.extend)
    scheduler.run_until_idle()
    assert store.subscriber_count == 2
    subscription.cancel()
    assert store.subscriber_count == 1
    store.update_pod(pod_with_index(1))
    scheduler.tick(1.0)
    assert cancelled == [snapshot()]
    assert kept == [snapshot(), snapshot(1)]
    store.stop()
    store.update_pod(pod_with_index(2))
    scheduler.tick(5.0)
    assert kept == [snapshot(), snapshot(1)]
    assert scheduler.pending_tasks == 0
    with pytest.raises(RuntimeError, match="stopped"):
        store.add_subscriber(1.0, kept.extend)


def test_on_real_threads_each_subscriber_is_serial_and_stop_joins_workers() -> None:
    scheduler = ThreadScheduler(workers=2, name="test-store")
    store = ScheduledSnapshotsStore(scheduler)
    active = 0
    overlap = False
    seen: list[ExecutorPodsSnapshot] = []
    done = threading.Event()
    guard = threading.Lock()

    def subscriber(batch: Sequence[ExecutorPodsSnapshot]) -> None:
        nonlocal active, overlap
        with guard:
            active += 1
            overlap = overlap or active > 1
        seen.extend(batch)
        if seen and seen[-1] == snapshot(*range(50)):
            done.set()
        with guard:
            active -= 1

    store.add_subscriber(0.001, subscriber)
    for index in range(50):
        store.update_pod(pod_with_index(index))
        store.notify_subscribers()
    assert done.wait(10), "the last snapshot never arrived"
    store.stop()
    assert not overlap
    assert len(seen) == 51
    assert not [t for t in threading.enumerate() if t.name.startswith("test-store")]
