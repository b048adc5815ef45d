"""The crash-loop brake on a manual clock: what fails at start, the rate that pauses requests, the
growing pauses, the resume on its own, the probing after it, and the quiet minute that ends it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from execpods.core import (
    EXECUTOR_CONTAINER_NAME,
    ContainerStatus,
    ContainerTerminated,
    ContainerWaiting,
    ExecutorPod,
    ManualClock,
    NoticeKind,
)
from execpods.core.crashloop import CrashLoopBrake, CrashLoopSettings, failed_at_start
from execpods.core.states import classify

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def failed(ran: float | None, *, phase: str = "Failed") -> ExecutorPod:
    """A pod whose executor container ran `ran` seconds (None: it never ran)."""
    if ran is None:
        state: ContainerTerminated | ContainerWaiting = ContainerWaiting(reason="PodInitializing")
    else:
        state = ContainerTerminated(
            exit_code=1, started_at=T0, finished_at=T0 + timedelta(seconds=ran)
        )
    return ExecutorPod(
        name="p",
        phase=phase,
        container_statuses=(ContainerStatus(name=EXECUTOR_CONTAINER_NAME, state=state),),
    )


@pytest.mark.parametrize(
    ("pod", "at_start"),
    [
        (failed(None), True),  # an init container or the kubelet failed it
        (failed(2.0), True),
        (failed(59.9), True),
        (failed(60.0), False),
        (failed(3600.0), False),
        (failed(2.0, phase="Running"), True),  # its executor exited: a Running pod failed
        (ExecutorPod(name="p", phase="Running"), False),  # not failed
        (ExecutorPod(name="p", phase="Failed"), True),  # no container status at all
        (
            ExecutorPod(
                name="p",
                phase="Failed",
                container_statuses=(
                    ContainerStatus(
                        name=EXECUTOR_CONTAINER_NAME, state=ContainerTerminated(exit_code=1)
                    ),
                ),
            ),
            False,  # ran for an unknown time: not taken for a start failure
        ),
    ],
)
def test_what_failed_at_start(pod: ExecutorPod, at_start: bool) -> None:
    assert failed_at_start(classify(pod), start_window=60.0) is at_start


def brake(rate: str = "10", retry: str = "3s", maximum: str = "5min") -> CrashLoopBrake:
    return CrashLoopBrake(
        CrashLoopSettings.from_properties(
            {
                "execpods.crashLoop.maxFailureRate": rate,
                "execpods.crashLoop.retryInterval": retry,
                "execpods.crashLoop.maxRetryInterval": maximum,
            }
        )
    )


def test_below_the_rate_nothing_pauses() -> None:
    clock, subject = ManualClock(), brake()
    for executor_id in range(1, 11):  # 10 failures, 7 s apart: never 10 in one minute
        assert subject.failed(executor_id, "exit 1", clock.monotonic()) is None
        clock.advance(7.0)
    assert not subject.paused
    assert subject.allowed(starting=50, wanted=20) == 20


def test_the_rate_pauses_requests_on_a_growing_back_off_and_they_resume_on_their_own() -> None:
    clock, subject = ManualClock(), brake()
    notices = [subject.failed(i, f"executor {i} exited 1", clock.monotonic()) for i in range(1, 10)]
    assert notices == [None] * 9
    paused = subject.failed(10, "executor 10 exited 1", clock.monotonic())
    assert paused is not None
    assert paused.kind is NoticeKind.CRASH_LOOP_PAUSED
    assert paused.retry_in == 3.0
    assert "10 executors failed at start within the last minute" in paused.message
    assert "executor 10 exited 1" in paused.message
    assert subject.allowed(starting=0, wanted=5) == 0
    assert subject.failed(10, "again", clock.monotonic()) is None  # one executor counts once

    clock.advance(2.9)
    assert subject.tick(clock.monotonic()) is None
    assert subject.allowed(starting=0, wanted=5) == 0
    clock.advance(0.1)
    resumed = subject.tick(clock.monotonic())
    assert resumed is not None
    assert resumed.kind is NoticeKind.CRASH_LOOP_RESUMED
    # probing: at most the rate's worth starting at once
    assert subject.allowed(starting=0, wanted=50) == 10
    assert subject.allowed(starting=7, wanted=50) == 3
    assert subject.allowed(starting=12, wanted=50) == 0


def test_a_loop_that_goes_on_pauses_longer_each_time_and_spends_a_probe_per_pause() -> None:
    """Every executor fails 2 s after it is requested: each resume lets 10 start, they fail, the
    next pause is twice as long. The failure budget drains 10 a pause, not 10 a second."""
    clock, subject = ManualClock(), brake()
    next_id = 0

    def fail(count: int) -> list[float]:
        nonlocal next_id
        clock.advance(2.0)
        pauses = []
        for _ in range(count):
            next_id += 1
            notice = subject.failed(next_id, "exit 1", clock.monotonic())
            if notice is not None:
                pauses.append(notice.retry_in)
        return pauses

    pauses = fail(10)  # the first burst trips the brake
    spent_per_cycle = []
    for _ in range(8):
        clock.advance(pauses[-1])
        assert subject.tick(clock.monotonic()) is not None  # resumed, probing
        probes = subject.allowed(starting=0, wanted=100)
        before = next_id
        new = fail(probes)
        assert len(new) == 1  # one pause per cycle, the other failures fall in it
        pauses += new
        spent_per_cycle.append(next_id - before)
    assert pauses == [3.0, 6.0, 12.0, 24.0, 48.0, 96.0, 192.0, 300.0, 300.0]
    assert spent_per_cycle == [10] * 8
    minutes = clock.monotonic() / 60.0
    assert next_id / minutes < 10.0  # over the whole loop, fewer than the rate a minute
    assert subject.trips == 9


def test_a_quiet_minute_of_probing_ends_it_and_forgets_the_pauses() -> None:
    clock, subject = ManualClock(), brake(rate="2", retry="10s")
    subject.failed(1, "exit 1", clock.monotonic())
    first = subject.failed(2, "exit 1", clock.monotonic())
    assert first is not None
    assert first.retry_in == 10.0
    clock.advance(10.0)
    assert subject.tick(clock.monotonic()) is not None
    assert subject.allowed(starting=2, wanted=5) == 0  # probing: 2 may start at once
    clock.advance(59.0)
    subject.tick(clock.monotonic())
    assert subject.allowed(starting=2, wanted=5) == 0
    clock.advance(1.0)
    subject.tick(clock.monotonic())
    assert subject.allowed(starting=100, wanted=100) == 100
    # a later loop starts again from the first pause
    subject.failed(3, "exit 1", clock.monotonic())
    again = subject.failed(4, "exit 1", clock.monotonic())
    assert again is not None
    assert again.retry_in == 10.0


def test_failures_older_than_a_minute_do_not_count_and_zero_turns_it_off() -> None:
    clock, subject = ManualClock(), brake(rate="3")
    subject.failed(1, "exit 1", clock.monotonic())
    subject.failed(2, "exit 1", clock.monotonic())
    clock.advance(60.0)
    assert subject.start_failures(clock.monotonic()) == 0
    assert subject.failed(3, "exit 1", clock.monotonic()) is None
    off = brake(rate="0")
    for executor_id in range(100):
        assert off.failed(executor_id, "exit 1", 0.0) is None
    assert off.allowed(starting=0, wanted=7) == 7
