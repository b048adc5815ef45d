"""Resumable streams on a real sidecar over kubesim, through a proxy that cuts the network.

While the driver is cut off, executors are killed; when the network is back the client reconnects
by itself, resumes from its last position and receives each missed removal exactly once. A gap
older than the window, or a restarted sidecar, is flagged `resync`; a position from the future is
INVALID_ARGUMENT; and the driver's view is re-sent to a restarted sidecar.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import grpc
import pytest
from execpods.client import (
    AllocatorClient,
    AsyncAllocatorClient,
    ExecutorState,
    SnapshotStream,
    StreamPosition,
    StreamUpdate,
)
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.sidecar.conftest import SidecarFactory, wait_for, wait_for_async
from tests.sidecar.proxy import CuttableProxy


class Reader:
    """Iterates a blocking stream on a thread, collecting its updates."""

    def __init__(self, stream: SnapshotStream) -> None:
        self.stream = stream
        self.updates: list[StreamUpdate] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for update in self.stream:
                self.updates.append(update)
        except BaseException as error:  # surfaced by the test
            self.error = error

    def removed(self) -> list[int]:
        return [r.executor_id for u in list(self.updates) for r in u.removed]

    def running(self) -> int:
        current = self.stream.current
        return 0 if current is None else current.count(ExecutorState.RUNNING)

    def stop(self) -> None:
        self.stream.cancel()
        self._thread.join(10)
        assert not self._thread.is_alive()
        assert self.error is None, self.error


def _decided(sidecar: EmbeddedSidecar, count: int) -> None:
    backend = sidecar.runtime.backend
    wait_for(lambda: backend.removal_position.sequence >= count, what=f"{count} removals decided")


@pytest.fixture
def six(make_sidecar: SidecarFactory) -> Iterator[tuple[EmbeddedSidecar, CuttableProxy]]:
    sidecar = make_sidecar("resume", conf={"spark.executor.instances": "6"})
    with CuttableProxy(sidecar.address) as proxy:
        yield sidecar, proxy


def test_removals_missed_while_cut_off_arrive_once_after_reconnecting(
    six: tuple[EmbeddedSidecar, CuttableProxy],
) -> None:
    sidecar, proxy = six
    with AllocatorClient(proxy.target) as driver, AllocatorClient(sidecar.address) as admin:
        reader = Reader(driver.stream_snapshots(batch_interval_ms=50))
        wait_for(lambda: reader.running() == 6, what="six running")
        proxy.cut()
        admin.kill_executors([1, 2, 3])
        _decided(sidecar, 3)
        proxy.restore()
        wait_for(lambda: {1, 2, 3} <= set(reader.removed()), what="the missed removals")
        admin.kill_executors([4])
        wait_for(lambda: 4 in reader.removed(), what="a removal after the reconnect")
        reader.stop()
    removed = reader.removed()
    assert sorted(removed) == sorted(set(removed))  # each exactly once
    assert set(removed) == {1, 2, 3, 4}
    assert reader.stream.reconnects >= 1
    assert not any(u.resync for u in reader.updates)
    positions = [u.position.sequence for u in reader.updates if u.position is not None]
    assert positions == sorted(positions)
    assert positions[-1] == 4


def test_a_gap_older_than_the_window_is_flagged_resync(make_sidecar: SidecarFactory) -> None:
    sidecar = make_sidecar(
        "window",
        conf={"spark.executor.instances": "4", "execpods.sidecar.stream.removalWindow": "1"},
    )
    with (
        CuttableProxy(sidecar.address) as proxy,
        AllocatorClient(proxy.target) as driver,
        AllocatorClient(sidecar.address) as admin,
    ):
        reader = Reader(driver.stream_snapshots(batch_interval_ms=50))
        wait_for(lambda: reader.running() == 4, what="four running")
        proxy.cut()
        admin.kill_executors([1, 2, 3])
        _decided(sidecar, 3)
        proxy.restore()
        wait_for(lambda: any(u.resync for u in reader.updates), what="a re-sync")
        reader.stop()
    resynced = next(u for u in reader.updates if u.resync)
    assert resynced.latest is not None
    assert resynced.latest.was_full
    removed = reader.removed()
    assert sorted(removed) == sorted(set(removed))
    assert 3 in removed  # the one the window kept is still sent


def test_positions_from_the_future_are_invalid_and_from_another_process_resync(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = make_sidecar("positions")
    now = sidecar.runtime.backend.removal_position
    with AllocatorClient(sidecar.address) as client:
        future = StreamPosition(incarnation=now.incarnation, sequence=now.sequence + 1)
        with pytest.raises(grpc.RpcError) as refused:
            next(iter(client.stream_snapshots(resume_from=future)))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "never sent" in (refused.value.details() or "")
        other = StreamPosition(incarnation="an-earlier-sidecar", sequence=12)
        with client.stream_snapshots(resume_from=other) as stream:
            first = next(iter(stream))
        assert first.resync
        assert first.position == StreamPosition(incarnation=now.incarnation, sequence=0)
        newest = sidecar.runtime.backend.removal_position
        current = StreamPosition(incarnation=newest.incarnation, sequence=newest.sequence)
        with client.stream_snapshots(resume_from=current) as stream:
            assert not next(iter(stream)).resync


def test_a_restarted_sidecar_gets_the_drivers_view_again(make_sidecar: SidecarFactory) -> None:
    keep = {"spark.kubernetes.executor.deleteOnTermination": "false"}
    first = make_sidecar("restart", conf={"spark.executor.instances": "2", **keep})
    with CuttableProxy(first.address) as proxy, AllocatorClient(proxy.target) as driver:
        reader = Reader(driver.stream_snapshots(batch_interval_ms=50))
        wait_for(lambda: reader.running() == 2, what="two running")
        assert driver.update_driver_executors(registered=[1, 2], explicit=True) == {1, 2}
        proxy.cut()
        first.stop()
        second = make_sidecar("restart", conf={"spark.executor.instances": "0", **keep})
        assert set(second.runtime.driver_view.executor_ids()) == set()
        proxy.restore(second.address)
        wait_for(lambda: any(u.resync for u in reader.updates), what="a re-sync")
        wait_for(
            lambda: set(second.runtime.driver_view.executor_ids()) == {1, 2},
            what="the view re-sent",
        )
        reader.stop()
    incarnations = {u.position.incarnation for u in reader.updates if u.position is not None}
    assert len(incarnations) == 2


def test_the_asyncio_client_resumes_too(six: tuple[EmbeddedSidecar, CuttableProxy]) -> None:
    sidecar, proxy = six

    async def scenario() -> list[StreamUpdate]:
        updates: list[StreamUpdate] = []
        async with AsyncAllocatorClient(proxy.target) as driver:
            stream = driver.stream_snapshots(batch_interval_ms=50)

            async def read() -> None:
                async for update in stream:
                    updates.append(update)

            reader = asyncio.create_task(read())

            def removed() -> set[int]:
                return {r.executor_id for u in updates for r in u.removed}

            def running() -> bool:
                current = stream.current
                return current is not None and current.count(ExecutorState.RUNNING) == 6

            await wait_for_async(running, what="six running")
            proxy.cut()
            with AllocatorClient(sidecar.address) as admin:
                await asyncio.to_thread(admin.kill_executors, [5, 6])
            await asyncio.to_thread(_decided, sidecar, 2)
            proxy.restore()
            await wait_for_async(lambda: {5, 6} <= removed(), what="the missed removals")
            stream.cancel()
            await asyncio.wait_for(reader, 10)
            assert stream.reconnects >= 1
        return updates

    updates = asyncio.run(scenario())
    removed = [r.executor_id for u in updates for r in u.removed]
    assert sorted(removed) == [5, 6]
