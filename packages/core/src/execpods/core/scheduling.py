"""Schedulers: where periodic work (subscriber deliveries, polls) runs.

The store and the sources never start threads themselves; they ask a `Scheduler`. Production uses
`ThreadScheduler` (a few worker threads, like Spark's scheduled executors); tests use
`DeterministicScheduler`, which runs nothing until the test moves virtual time, so ordering is
exact and no test sleeps.

A periodic task runs with a *fixed delay*: its next run is scheduled when the current one ends, so
one task never overlaps itself. That is what makes each subscriber serial.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from dataclasses import dataclass, field

from execpods.core.clock import ManualClock, SystemClock
from execpods.core.ports import Action, Cancellable, Scheduler

__all__ = ["Action", "Cancellable", "DeterministicScheduler", "Scheduler", "ThreadScheduler"]

logger = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class _Task:
    action: Action
    period: float | None
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass(order=True, slots=True)
class _Entry:
    due: float
    seq: int
    task: _Task = field(compare=False)


class _TaskQueue:
    """A heap of tasks by due time; FIFO among tasks due at the same time."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._seq = itertools.count()

    def push(self, due: float, task: _Task) -> None:
        heapq.heappush(self._heap, _Entry(due, next(self._seq), task))

    def next_due(self) -> float | None:
        while self._heap and self._heap[0].task.cancelled:
            heapq.heappop(self._heap)
        return self._heap[0].due if self._heap else None

    def pop(self) -> _Entry:
        return heapq.heappop(self._heap)

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)


def _run_logged(task: _Task) -> None:
    try:
        task.action()
    except Exception:
        logger.exception("A scheduled task failed; it keeps its schedule.")


class _SchedulingMethods:
    """The three ways to schedule, on top of one `_add(delay, period, action)`."""

    __slots__ = ()

    def _add(self, delay: float, period: float | None, action: Action) -> _Task:
        raise NotImplementedError

    def submit(self, action: Action) -> Cancellable:
        return self._add(0.0, None, action)

    def schedule(self, delay: float, action: Action) -> Cancellable:
        return self._add(delay, None, action)

    def schedule_with_fixed_delay(
        self, initial_delay: float, delay: float, action: Action
    ) -> Cancellable:
        if delay <= 0:
            raise ValueError(f"a periodic task needs a positive delay, not {delay}")
        return self._add(initial_delay, delay, action)


class ThreadScheduler(_SchedulingMethods):
    """A scheduled executor on a few daemon threads, started lazily by the first task."""

    def __init__(self, *, workers: int = 2, name: str = "execpods") -> None:
        if workers < 1:
            raise ValueError(f"a scheduler needs at least one worker, not {workers}")
        self._clock = SystemClock()
        self._queue = _TaskQueue()
        self._cond = threading.Condition()
        self._workers = workers
        self._name = name
        self._threads: list[threading.Thread] = []
        self._shut_down = False

    def _add(self, delay: float, period: float | None, action: Action) -> _Task:
        task = _Task(action, period)
        with self._cond:
            if self._shut_down:
                raise RuntimeError(f"scheduler {self._name} is shut down")
            self._queue.push(self._clock.monotonic() + max(delay, 0.0), task)
            if not self._threads:
                self._start_threads()
            self._cond.notify()
        return task

    def _start_threads(self) -> None:
        for index in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"{self._name}-{index}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                task = self._next_task()
                if task is None:
                    return
            _run_logged(task)
            if task.period is not None and not task.cancelled:
                with self._cond:
                    if not self._shut_down:
                        self._queue.push(self._clock.monotonic() + task.period, task)
                        self._cond.notify()

    def _next_task(self) -> _Task | None:
        """Wait (holding the condition) for a due task; None once shut down."""
        while not self._shut_down:
            due = self._queue.next_due()
            if due is None:
                self._cond.wait()
                continue
            wait = due - self._clock.monotonic()
            if wait > 0:
                # A task due beyond what a wait can take (settings refuse such durations) must
                # not end the worker: wait the longest a wait can, then look again.
                self._cond.wait(min(wait, threading.TIMEOUT_MAX))
                continue
            return self._queue.pop().task
        return None

    def shutdown(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._shut_down = True
            self._queue.clear()
            self._cond.notify_all()
            threads, self._threads = self._threads, []
        current = threading.current_thread()
        for thread in threads:
            if thread is not current:
                thread.join(timeout)


class DeterministicScheduler(_SchedulingMethods):
    """Runs tasks only when the test moves virtual time (like jmock's DeterministicScheduler).

    It shares a `ManualClock` with the code under test, so a task due at t runs with the clock
    reading t.
    """

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock if clock is not None else ManualClock()
        self._queue = _TaskQueue()
        self._shut_down = False

    def _add(self, delay: float, period: float | None, action: Action) -> _Task:
        task = _Task(action, period)
        if not self._shut_down:
            self._queue.push(self.clock.monotonic() + max(delay, 0.0), task)
        return task

    def run_until_idle(self) -> None:
        """Run every task that is due now, including ones those tasks make due now."""
        self._run_due(self.clock.monotonic())

    def tick(self, seconds: float) -> None:
        """Advance time by `seconds`, running each task at its due time, in order."""
        deadline = self.clock.monotonic() + seconds
        self._run_due(deadline)
        self.clock.set_time(deadline)

    def _run_due(self, deadline: float) -> None:
        while True:
            due = self._queue.next_due()
            if due is None or due > deadline:
                return
            entry = self._queue.pop()
            if entry.due > self.clock.monotonic():
                self.clock.set_time(entry.due)
            _run_logged(entry.task)
            if entry.task.period is not None and not entry.task.cancelled and not self._shut_down:
                self._queue.push(self.clock.monotonic() + entry.task.period, entry.task)

    @property
    def pending_tasks(self) -> int:
        return len(self._queue)

    def shutdown(self) -> None:
        self._shut_down = True
        self._queue.clear()
