"""The asyncio client over a real gRPC channel to the in-test servicer (one event loop per test)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from execpods.client import AsyncAllocatorClient, RequestTotalResult, StreamUpdate

from tests.client.script import SCRIPT, check_script_updates
from tests.client.servicer import Served

WAIT_S = 10.0


def test_unary_calls(served: Served) -> None:
    served.servicer.pods = {4, 5}
    served.servicer.running = 1

    async def scenario() -> None:
        async with AsyncAllocatorClient(served.target) as client:
            await client.wait_for_ready()
            assert await client.request_total(3) == RequestTotalResult(
                total=3, running=1, pending=0
            )
            assert await client.kill_executors([4, "6"]) == 1
            assert await client.update_driver_executors(registered=[1, 2], released=[1]) == {2}

    asyncio.run(scenario())
    assert served.servicer.total == 3
    assert served.servicer.kill_requests == [["4", "6"]]


def test_invalid_arguments_reach_the_caller(served: Served) -> None:
    async def scenario() -> list[grpc.StatusCode]:
        codes = []
        async with AsyncAllocatorClient(served.target) as client:
            for call in (
                client.request_total(-2),
                client.kill_executors(["-1"]),
                anext(client.stream_snapshots(batch_interval_ms=-5)),
            ):
                with pytest.raises(grpc.RpcError) as failure:
                    await call
                codes.append(failure.value.code())
        return codes

    assert asyncio.run(scenario()) == [grpc.StatusCode.INVALID_ARGUMENT] * 3


def test_the_stream_rebuilds_snapshots_and_cancel_ends_a_waiting_reader(served: Served) -> None:
    served.servicer.script = SCRIPT

    async def scenario() -> tuple[list[StreamUpdate], list[StreamUpdate]]:
        async with AsyncAllocatorClient(served.target) as client:
            stream = client.stream_snapshots(batch_interval_ms=20)
            updates = [await anext(stream) for _ in SCRIPT]
            assert stream.current == updates[1].snapshots[-1]
            rest: list[StreamUpdate] = []

            async def read_rest() -> None:
                rest.extend([update async for update in stream])

            reader = asyncio.create_task(read_rest())
            async with stream:  # leaving the block cancels
                await asyncio.sleep(0)  # let the reader start waiting (not a wait for a condition)
            await asyncio.wait_for(reader, WAIT_S)
            return updates, rest

    updates, rest = asyncio.run(scenario())
    check_script_updates(updates)
    assert rest == []
    assert served.servicer.intervals == [20]
    assert served.servicer.stream_cancelled.wait(WAIT_S)


def test_the_whole_script_when_the_server_ends_the_stream(served: Served) -> None:
    served.servicer.script = SCRIPT
    served.servicer.stream_end = grpc.StatusCode.OK

    async def scenario() -> list[StreamUpdate]:
        async with AsyncAllocatorClient(served.target) as client:
            return [update async for update in client.stream_snapshots()]

    check_script_updates(asyncio.run(scenario()))


def test_a_stream_the_server_fails_raises_its_error(served: Served) -> None:
    served.servicer.script = SCRIPT[:1]
    served.servicer.stream_end = grpc.StatusCode.RESOURCE_EXHAUSTED

    async def scenario() -> None:
        async with AsyncAllocatorClient(served.target) as client:
            stream = client.stream_snapshots()
            await anext(stream)
            await anext(stream)

    with pytest.raises(grpc.RpcError) as failure:
        asyncio.run(scenario())
    assert failure.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_task_cancelled_while_reading_is_cancelled_not_ended(served: Served) -> None:
    """Only the stream's own `cancel()` ends iteration quietly; a cancelled task stays so."""
    served.servicer.script = SCRIPT[:1]

    async def scenario() -> None:
        async with AsyncAllocatorClient(served.target) as client:
            stream = client.stream_snapshots()
            await anext(stream)
            reader = asyncio.create_task(anext(stream))
            sent = asyncio.to_thread(served.servicer.script_sent.wait, WAIT_S)
            assert await asyncio.wait_for(sent, WAIT_S)
            reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader

    asyncio.run(scenario())
