"""Issue 32 item 4: the one way to say that allocation cannot make progress, in the core.

A stall is told once per reason until it resumes, reaches every stream as a notice (a stream
opened while stalled hears it first), and the allocator stalls on an id ledger it cannot read,
resuming once it can.
"""

from __future__ import annotations

import logging
import threading

import pytest
from execpods.core import (
    AllocatorNotice,
    CoreSettings,
    DeterministicScheduler,
    ManualClock,
    NoticeKind,
    PodOperationError,
    ProgressChange,
    ProgressMonitor,
)
from execpods.core.progress import ID_LEDGER_UNREADABLE, THREAD_DIED, watch_threads
from execpods.core.testing import InMemoryIdLedger, InMemoryPodOperations, compose_deterministic


def test_a_reason_is_told_once_until_it_resumes() -> None:
    clock = ManualClock(100.0)
    monitor = ProgressMonitor(clock=clock)
    heard: list[ProgressChange] = []
    monitor.add_listener(heard.append)
    assert [s.reason for s in monitor.stalls] == []
    monitor.stall("Broken", "first")
    clock.advance(5)
    monitor.stall("Broken", "second wording")
    assert [(c.stall.reason, c.stalled) for c in heard] == [("Broken", True)]
    (stall,) = monitor.stalls
    assert (stall.message, stall.since) == ("second wording", 100.0)
    assert not monitor.progressing
    monitor.resume("Other")  # never stalled: nothing
    monitor.resume("Broken")
    monitor.resume("Broken")
    assert [(c.stall.reason, c.stalled) for c in heard] == [("Broken", True), ("Broken", False)]
    assert monitor.progressing


def test_a_stall_needs_a_reason() -> None:
    with pytest.raises(ValueError, match="reason"):
        ProgressMonitor(clock=ManualClock()).stall("", "why")


class FailingLedger(InMemoryIdLedger):
    """A ledger whose reads fail while `readable` is false (a 403, an outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.readable = False

    def highest_reserved(self) -> int:
        if not self.readable:
            raise PodOperationError("configmaps is forbidden (403)", status=403)
        return super().highest_reserved()


def test_an_unreadable_ledger_stalls_allocation_on_every_stream_until_it_reads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(1_000.0)
    scheduler = DeterministicScheduler(clock)
    ledger = FailingLedger()
    pods = InMemoryPodOperations()
    composed = compose_deterministic(
        settings=CoreSettings(executor_instances=0, batch_size=5),
        pod_operations=pods,
        clock=clock,
        request_scheduler=scheduler,
        id_ledger=ledger,
    )
    backend, store = composed.backend, composed.store
    early: list[AllocatorNotice] = []
    backend.open_stream(
        1.0, on_snapshots=lambda s: None, on_removal=lambda r: None, on_notice=early.append
    )
    backend.start(initial_executors=2)
    scheduler.tick(1.0)
    store.notify_subscribers()
    assert pods.created == []
    assert [(n.kind, n.reason) for n in early] == [
        (NoticeKind.ALLOCATION_STALLED, ID_LEDGER_UNREADABLE)
    ]
    assert "403" in early[0].message
    assert not backend.progress.progressing

    late: list[AllocatorNotice] = []  # opened while stalled: told at once
    backend.open_stream(
        1.0, on_snapshots=lambda s: None, on_removal=lambda r: None, on_notice=late.append
    )
    assert [(n.kind, n.reason) for n in late] == [
        (NoticeKind.ALLOCATION_STALLED, ID_LEDGER_UNREADABLE)
    ]

    for _ in range(3):  # rounds go on failing: told once
        scheduler.tick(1.0)
        store.notify_subscribers()
    assert len(early) == 1
    warned = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "Could not read the executor id ledger" in r.message
    ]
    assert len(warned) == 1  # each round's retry is DEBUG while the stall is on

    ledger.readable = True
    scheduler.tick(1.0)
    store.notify_subscribers()
    assert len(pods.created) == 2
    resumed = [(n.kind, n.reason) for n in late[1:] if n.kind is NoticeKind.ALLOCATION_RESUMED]
    assert resumed == [(NoticeKind.ALLOCATION_RESUMED, ID_LEDGER_UNREADABLE)]
    assert backend.progress.progressing


def test_a_dead_execpods_thread_stalls_and_others_do_not() -> None:
    monitor = ProgressMonitor(clock=ManualClock())
    previous = threading.excepthook
    seen: list[str] = []
    threading.excepthook = lambda args: seen.append(args.thread.name if args.thread else "")
    unwatch = watch_threads(monitor)
    try:

        def die() -> None:
            raise OverflowError("timeout value is too large")

        for name in ("someone-else", "execpods-subscribers-0"):
            thread = threading.Thread(target=die, name=name)
            thread.start()
            thread.join()
    finally:
        unwatch()
        threading.excepthook = previous
    (stall,) = monitor.stalls
    assert stall.reason == THREAD_DIED
    assert "execpods-subscribers-0" in stall.message
    assert "OverflowError" in stall.message
    assert seen == ["someone-else", "execpods-subscribers-0"]  # the hook in place still ran
