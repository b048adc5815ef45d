"""The schedulers: virtual time runs tasks at their due times; real threads stop cleanly."""

from __future__ import annotations

import threading

import pytest
from execpods.core import DeterministicScheduler, ManualClock, ThreadScheduler


def test_tick_runs_each_task_at_its_due_time_in_order() -> None:
    clock = ManualClock()
    scheduler = DeterministicScheduler(clock)
    runs: list[tuple[str, float]] = []
    scheduler.schedule_with_fixed_delay(0.0, 1.0, lambda: runs.append(("a", clock.monotonic())))
    scheduler.schedule_with_fixed_delay(0.5, 2.0, lambda: runs.append(("b", clock.monotonic())))
    scheduler.schedule(1.5, lambda: runs.append(("once", clock.monotonic())))
    scheduler.tick(3.0)
    assert runs == [
        ("a", 0.0),
        ("b", 0.5),
        ("a", 1.0),
        ("once", 1.5),
        ("a", 2.0),
        ("b", 2.5),
        ("a", 3.0),
    ]
    assert clock.monotonic() == 3.0


def test_cancelled_tasks_do_not_run_and_failing_tasks_keep_their_schedule() -> None:
    scheduler = DeterministicScheduler()
    runs: list[str] = []
    task = scheduler.schedule_with_fixed_delay(0.0, 1.0, lambda: runs.append("cancelled"))
    task.cancel()

    def failing() -> None:
        runs.append("failing")
        raise RuntimeError("boom")

    scheduler.schedule_with_fixed_delay(0.0, 1.0, failing)
    scheduler.tick(2.0)
    assert runs == ["failing", "failing", "failing"]


def test_run_until_idle_does_not_move_time() -> None:
    scheduler = DeterministicScheduler()
    runs: list[str] = []

    def chain() -> None:
        scheduler.submit(lambda: runs.append("chained"))

    scheduler.submit(chain)
    scheduler.schedule(1.0, lambda: runs.append("later"))
    scheduler.run_until_idle()
    assert runs == ["chained"]
    assert scheduler.clock.monotonic() == 0.0


def test_thread_scheduler_runs_work_and_its_threads_end_on_shutdown() -> None:
    scheduler = ThreadScheduler(workers=2, name="sched-test")
    assert not [t for t in threading.enumerate() if t.name.startswith("sched-test")], "lazy"
    ran = threading.Event()
    periodic = threading.Semaphore(0)
    scheduler.submit(ran.set)
    scheduler.schedule_with_fixed_delay(0.0, 0.001, periodic.release)
    assert ran.wait(5)
    for _ in range(3):
        assert periodic.acquire(timeout=5)
    scheduler.shutdown()
    assert not [t for t in threading.enumerate() if t.name.startswith("sched-test")]
    with pytest.raises(RuntimeError, match="shut down"):
        scheduler.submit(ran.set)
