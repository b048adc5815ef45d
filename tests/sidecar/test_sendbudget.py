"""The send budget: large stream messages take turns within a byte bound, in order, and a share is
given back however its holder ends. The unit tests take event-loop steps only (no time passes,
nothing sleeps); the last test runs the budget in a sidecar over real gRPC."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator
from typing import Any

import grpc
import pytest
from execpods.client import AllocatorClient
from execpods.kubesim import KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar
from execpods.sidecar.stream.sendbudget import SMALL, SendBudget
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sidecar.conftest import FAST_CLUSTER, SidecarOnFactory, wait_for

KIB = 1024


async def _steps(count: int = 5) -> None:
    """Let every ready task run (a few loop turns; no time passes)."""
    for _ in range(count):
        await asyncio.sleep(0)


def _run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def test_shares_within_the_budget_are_taken_at_once_and_later_ones_wait_in_order() -> None:
    async def scenario() -> None:
        budget = SendBudget(300 * KIB, small=64 * KIB)
        await budget.acquire(100 * KIB)
        await budget.acquire(150 * KIB)
        order: list[str] = []

        async def wait(name: str, size: int) -> None:
            await budget.acquire(size)
            order.append(name)

        big = asyncio.create_task(wait("big", 200 * KIB))
        late = asyncio.create_task(wait("late", 40 * KIB * 2))  # would fit, but comes second
        await _steps()
        assert order == []  # first come, first served: "late" does not overtake "big"
        assert budget.in_use == 250 * KIB
        budget.release(100 * KIB)
        await _steps()
        assert order == []  # 150 + 200 > 300: still waiting
        budget.release(150 * KIB)
        await _steps()
        assert order == ["big", "late"]
        assert budget.in_use == 280 * KIB
        await asyncio.gather(big, late)

    _run(scenario)


def test_a_message_larger_than_the_budget_goes_alone() -> None:
    async def scenario() -> None:
        budget = SendBudget(100 * KIB, small=1)
        await budget.acquire(500 * KIB)  # nothing else held: it goes
        second = asyncio.create_task(budget.acquire(10 * KIB))
        await _steps()
        assert not second.done()
        budget.release(500 * KIB)
        await _steps()
        assert second.done()
        assert budget.in_use == 10 * KIB

    _run(scenario)


def test_small_messages_never_wait() -> None:
    async def scenario() -> None:
        budget = SendBudget(100 * KIB, small=64 * KIB)
        await budget.acquire(100 * KIB)
        share = await asyncio.wait_for(budget.turn(63 * KIB), timeout=1)
        with share:
            assert budget.in_use == 100 * KIB  # a small message takes nothing
        assert budget.needs(64 * KIB)
        assert not budget.needs(63 * KIB)

    _run(scenario)


def test_a_cancelled_wait_leaves_the_line_and_lets_the_next_one_go() -> None:
    async def scenario() -> None:
        budget = SendBudget(100 * KIB, small=1)
        await budget.acquire(60 * KIB)
        blocked = asyncio.create_task(budget.acquire(80 * KIB))
        behind = asyncio.create_task(budget.acquire(30 * KIB))
        await _steps()
        assert not behind.done()  # in line behind the 80 KiB one
        blocked.cancel()
        await _steps()
        assert blocked.cancelled()
        assert behind.done()
        assert budget.in_use == 90 * KIB

    _run(scenario)


def test_a_wait_cancelled_just_after_its_grant_gives_the_share_back() -> None:
    async def scenario() -> None:
        budget = SendBudget(100 * KIB, small=1)
        await budget.acquire(100 * KIB)
        waiter = asyncio.create_task(budget.acquire(50 * KIB))
        await _steps()
        budget.release(100 * KIB)  # grants the waiter at once...
        waiter.cancel()  # ...which is cancelled before it could run
        await _steps()
        assert waiter.cancelled()
        assert budget.in_use == 0

    _run(scenario)


def test_a_share_held_across_a_yield_comes_back_when_the_stream_is_closed() -> None:
    """The service's pattern: a stream's generator holds a share while gRPC sends the message;
    a client that cancels closes the generator there, and the share must come back."""

    async def scenario() -> None:
        budget = SendBudget(1024 * KIB, small=1)

        async def stream() -> AsyncGenerator[bytes, None]:
            for size in (700 * KIB, 700 * KIB):
                with await budget.turn(size):
                    yield b"x"

        first = stream()
        second = stream()
        assert await first.__anext__() == b"x"
        assert budget.in_use == 700 * KIB
        waiting: asyncio.Task[bytes] = asyncio.ensure_future(second.__anext__())
        await _steps()
        assert not waiting.done()  # 700 + 700 > 1024
        await first.aclose()  # the client went away mid-send
        await _steps()
        assert waiting.done()
        assert budget.in_use == 700 * KIB  # the second stream's share, nothing leaked
        await second.aclose()
        assert budget.in_use == 0

    _run(scenario)


class ManualTimers:
    """`call_later` whose timers fire only when the test says so."""

    def __init__(self) -> None:
        self.pending: list[tuple[float, Callable[[], None], ManualTimer]] = []

    def __call__(self, delay: float, callback: Callable[[], None]) -> ManualTimer:
        timer = ManualTimer()
        self.pending.append((delay, callback, timer))
        return timer

    def fire_all(self) -> None:
        due, self.pending = self.pending, []
        for _, callback, timer in due:
            if not timer.cancelled:
                callback()


class ManualTimer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def test_a_share_held_past_the_hold_limit_goes_back_to_the_others() -> None:
    """A client that stops reading blocks its send, and the share with it: after the hold limit
    the others may go on; when the stuck send ends at last, nothing is given back twice."""

    async def scenario() -> None:
        timers = ManualTimers()
        budget = SendBudget(100 * KIB, small=1, hold_limit=1.0, call_later=timers)
        stuck = await budget.turn(80 * KIB)
        assert [delay for delay, _, _ in timers.pending] == [1.0]
        other = asyncio.create_task(budget.turn(50 * KIB))
        await _steps()
        assert not other.done()  # 80 + 50 > 100
        timers.fire_all()  # the hold limit passes with the send still blocked
        await _steps()
        assert other.done()
        assert budget.in_use == 50 * KIB  # the stuck share went back; the other one holds
        with stuck:
            pass  # the stuck send ends: its share was already given back
        assert budget.in_use == 50 * KIB
        with other.result():
            pass
        assert budget.in_use == 0
        timers.fire_all()  # the finished share's timer was cancelled: nothing happens
        assert budget.in_use == 0

    _run(scenario)


def test_the_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        SendBudget(0)


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=10),
    actions=st.lists(
        st.tuples(
            st.sampled_from(["acquire", "release", "cancel"]),
            st.integers(min_value=1, max_value=15),
            st.integers(min_value=0, max_value=20),
            st.booleans(),
        ),
        max_size=40,
    ),
)
def test_any_order_of_takes_gives_and_cancels_keeps_the_bound_and_the_order(
    limit: int, actions: list[tuple[str, int, int, bool]]
) -> None:
    """Whatever the order: the bytes held are exactly the granted shares not given back; they
    exceed the budget only when one share alone does; grants come in the order asked; and once
    everything is given back, nobody who still waits could have gone. Actions run with or without
    letting the loop settle in between, so a wait can be cancelled just after it was granted."""

    async def scenario() -> None:
        budget = SendBudget(limit, small=1)
        tasks: list[tuple[int, asyncio.Task[None]]] = []
        granted: list[int] = []  # task indices in the order their shares were granted
        held: dict[int, int] = {}

        async def take(index: int, size: int) -> None:
            await budget.acquire(size)
            granted.append(index)
            held[index] = size

        for action, size, pick, settle in actions:
            if action == "acquire":
                tasks.append((size, asyncio.create_task(take(len(tasks), size))))
            elif action == "release" and held:
                index = sorted(held)[pick % len(held)]
                budget.release(held.pop(index))
            elif action == "cancel" and tasks:
                tasks[pick % len(tasks)][1].cancel()
            if not settle:
                continue
            await _steps()
            assert budget.in_use == sum(held.values())
            assert budget.in_use <= limit or len(held) == 1
            # Grants follow the order of asking, skipping only the cancelled.
            assert granted == sorted(granted)
        await _steps()
        assert budget.in_use == sum(held.values())
        for index in list(held):
            budget.release(held.pop(index))
        await _steps()
        waiting = [i for i, (_, task) in enumerate(tasks) if not task.done()]
        assert not waiting or budget.in_use > 0 or held  # an empty budget lets the head go
        for _, task in tasks:
            task.cancel()
        await _steps()

    _run(scenario)


EXECUTORS = 1100
"""Enough for a full snapshot above `SMALL` (about 64 bytes an executor here): it takes a share."""


@pytest.fixture
def budget_sidecar(make_sidecar_on: SidecarOnFactory) -> Iterator[EmbeddedSidecar]:
    """A sidecar with a 1 MiB send budget and `EXECUTORS` running, on a simulator with room for
    them (the default one has 3 nodes of 110 pods)."""
    nodes = -(-EXECUTORS // 110)
    with KubeSim(cluster=dataclasses.replace(FAST_CLUSTER, nodes=nodes)) as simulator:
        sidecar = make_sidecar_on(
            simulator,
            "budget",
            conf={
                "execpods.sidecar.stream.sendBudget": "1",
                "spark.kubernetes.allocation.batch.size": str(EXECUTORS),
            },
        )
        with AllocatorClient(sidecar.address) as client:
            client.request_total(EXECUTORS)
            wait_for(
                lambda: client.request_total(EXECUTORS).running == EXECUTORS,
                timeout=60,
                what=f"{EXECUTORS} running",
            )
        yield sidecar
        sidecar.stop()  # while its simulator still answers the deletes


def test_many_streams_take_turns_for_full_snapshots_and_none_is_lost(
    budget_sidecar: EmbeddedSidecar,
) -> None:
    """Over real gRPC: with a 1 MiB budget, 30 streams opening at once each get their first full
    snapshot (the shares go round), streams cancelled on the way leave nothing held, and streams
    opened afterwards still get theirs."""

    async def first_snapshots(count: int, cancel_every: int) -> list[pb.ExecutorPodsSnapshot]:
        async with grpc.aio.insecure_channel(budget_sidecar.address) as channel:
            stub = pb_grpc.ExecutorAllocatorStub(channel)
            calls = [
                stub.StreamSnapshots(pb.StreamSnapshotsRequest(batch_interval_ms=50))
                for _ in range(count)
            ]
            for call in calls[::cancel_every]:
                call.cancel()  # gone before, during or after its turn
            kept = [c for i, c in enumerate(calls) if i % cancel_every]

            async def first(call: Any) -> pb.ExecutorPodsSnapshot:
                message = await call.read()
                call.cancel()
                assert isinstance(message, pb.StreamSnapshotsResponse)
                return message.snapshots[0]

            return await asyncio.wait_for(asyncio.gather(*(first(c) for c in kept)), 30)

    for round_number in range(2):  # the second round finds nothing left held by the first
        snapshots = asyncio.run(first_snapshots(30, cancel_every=3))
        assert len(snapshots) == 20, round_number
        for snapshot in snapshots:
            assert snapshot.full
            assert len(snapshot.executor_pods) == EXECUTORS
            assert len(snapshot.SerializeToString()) >= SMALL


def test_clients_that_stop_reading_do_not_hold_up_the_other_streams(
    budget_sidecar: EmbeddedSidecar,
) -> None:
    """Twenty streams whose clients never read block in their first send (the full snapshot is
    larger than the flow-control window), holding the whole 1 MiB budget; a new stream still gets
    its first snapshot, once the hold limit has given their shares back."""
    options = [("grpc.http2.bdp_probe", 0)]  # the window stays 64 KiB
    with grpc.insecure_channel(budget_sidecar.address, options=options) as stuck_channel:
        stub = pb_grpc.ExecutorAllocatorStub(stuck_channel)
        stuck = [
            stub.StreamSnapshots(pb.StreamSnapshotsRequest(batch_interval_ms=50)) for _ in range(20)
        ]
        try:

            async def one_first_snapshot() -> pb.ExecutorPodsSnapshot:
                async with grpc.aio.insecure_channel(budget_sidecar.address) as channel:
                    call = pb_grpc.ExecutorAllocatorStub(channel).StreamSnapshots(
                        pb.StreamSnapshotsRequest(batch_interval_ms=50)
                    )
                    message = await asyncio.wait_for(call.read(), 20)
                    call.cancel()
                    assert isinstance(message, pb.StreamSnapshotsResponse)
                    return message.snapshots[0]

            snapshot = asyncio.run(one_first_snapshot())
            assert snapshot.full
            assert len(snapshot.executor_pods) == EXECUTORS
        finally:
            for call in stuck:
                call.cancel()
