"""A stream whose client stops reading stalls nobody, and catches up with a full snapshot.

gRPC's flow control blocks the slow stream's writes once the client's window (64 KiB; the client
switches off BDP probing so that it stays so) is full. Its feed then keeps only the newest
`execpods.sidecar.stream.maxPendingSnapshots` snapshots; meanwhile the store keeps publishing to
its other subscribers and another stream receives every snapshot. When the client reads again,
the first snapshot after the gap comes in full, and the rebuilt state is the store's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import grpc
import pytest
from execpods.client import SnapshotRebuilder, StreamUpdate
from execpods.client.convert import executor_from_proto
from execpods.core import ExecutorPodsSnapshot
from execpods.kubesim import KubeSim
from execpods.sidecar.stream.encoding import encode_state
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc

from tests.sidecar.conftest import SidecarFactory, running_ids, wait_for

EXECUTORS = 60
MAX_PENDING = 5


def _updates(call: Iterator[pb.StreamSnapshotsResponse]) -> Iterator[StreamUpdate]:
    rebuilder = SnapshotRebuilder()
    for message in call:
        yield rebuilder.apply(message)


def test_a_slow_stream_stalls_nobody_and_catches_up_in_full(
    sim: KubeSim, make_sidecar: SidecarFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="execpods.sidecar.stream.messages")
    sidecar = make_sidecar(
        "slow",
        conf={
            "spark.kubernetes.allocation.batch.size": str(EXECUTORS),
            # Every poll publishes a full snapshot: a few KiB each, 20 a second.
            "spark.kubernetes.executor.apiPollingInterval": "50ms",
            "execpods.sidecar.stream.maxPendingSnapshots": str(MAX_PENDING),
        },
    )
    options = [("grpc.http2.bdp_probe", 0)]
    with grpc.insecure_channel(sidecar.address, options=options) as channel:
        stub = pb_grpc.ExecutorAllocatorStub(channel)
        stub.RequestTotal(pb.RequestTotalRequest(total=EXECUTORS), timeout=10)
        wait_for(lambda: len(running_ids(sim, "slow")) == EXECUTORS, what="all running")

        published: list[ExecutorPodsSnapshot] = []
        sidecar.runtime.backend.subscribe(0.02, published.extend)
        wait_for(lambda: published, what="the reference subscriber's first batch")

        fast_seen: list[int] = []
        fast_call = stub.StreamSnapshots(pb.StreamSnapshotsRequest(batch_interval_ms=20))

        def read_fast() -> None:
            try:
                for update in _updates(fast_call):
                    fast_seen.append(len(update.snapshots))
            except grpc.RpcError as error:
                if error.code() is not grpc.StatusCode.CANCELLED:
                    raise

        fast_reader = threading.Thread(target=read_fast, daemon=True)
        fast_reader.start()
        slow_call = stub.StreamSnapshots(pb.StreamSnapshotsRequest(batch_interval_ms=20))
        slow = _updates(slow_call)
        first = next(slow)
        assert first.snapshots[0].was_full
        # The slow client reads nothing more while far more than its window is published.
        start = len(published)
        wait_for(lambda: len(published) >= start + 60, what="sixty more snapshots published")
        # The other stream kept up while the slow one stays stalled (waited for, not asserted at
        # this instant: its reader is a thread of its own, a moment behind on a loaded machine).
        wait_for(lambda: sum(fast_seen) >= 60, what="the other stream to receive sixty snapshots")

        # Catch up, to the newest full list the store holds now.
        target_ms = round(sidecar.runtime.backend.current_snapshot.full_snapshot_ts * 1000)
        slow_snapshots = list(first.snapshots)
        for update in slow:
            slow_snapshots.extend(update.snapshots)
            if slow_snapshots[-1].full_snapshot_ts_ms >= target_ms:
                break
        expected = {i: executor_from_proto(encode_state(s)) for i, s in published[-1].items()}
        assert slow_snapshots[-1].executors == expected
        fast_call.cancel()
        slow_call.cancel()
        fast_reader.join(10)
        assert not fast_reader.is_alive(), "the fast stream did not end when cancelled"
    lists = {round(s.full_snapshot_ts * 1000) for s in published}
    first_ms = slow_snapshots[0].full_snapshot_ts_ms
    sent = {s.full_snapshot_ts_ms for s in slow_snapshots}
    missed = {ms for ms in lists if first_ms <= ms <= target_ms} - sent
    assert missed, "the slow stream was sent every snapshot: it never fell behind"
    assert any("fell" in r.getMessage() and "behind" in r.getMessage() for r in caplog.records)
