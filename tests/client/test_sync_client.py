"""The blocking client over a real gRPC channel to the in-test servicer."""

from __future__ import annotations

import socket
import tempfile
import threading
from pathlib import Path

import grpc
import pytest
from execpods.client import AllocatorClient, RequestTotalResult, SnapshotStream, StreamUpdate

from tests.client.script import SCRIPT, check_script_updates
from tests.client.servicer import FakeAllocator, Served

WAIT_S = 10.0


def test_request_total(served: Served) -> None:
    served.servicer.running, served.servicer.pending = 2, 1
    with AllocatorClient(served.target) as client:
        assert client.request_total(5) == RequestTotalResult(total=5, running=2, pending=1)
    assert served.servicer.total == 5


def test_invalid_arguments_reach_the_caller(served: Served) -> None:
    served.servicer.pods = {1, 2}
    with AllocatorClient(served.target) as client:
        with pytest.raises(grpc.RpcError) as negative:
            client.request_total(-1)
        assert negative.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as misspelt:
            client.kill_executors([1, "two"])
        assert misspelt.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "two" in (misspelt.value.details() or "")
    assert served.servicer.pods == {1, 2}
    assert served.servicer.total == 0


def test_kill_executors_sends_ids_as_decimals_and_returns_deleted_pods(served: Served) -> None:
    served.servicer.pods = {1, 2, 3}
    with AllocatorClient(served.target) as client:
        assert client.kill_executors([1, "3", 4]) == 2
        assert client.kill_executors([]) == 0
    assert served.servicer.kill_requests == [["1", "3", "4"], []]
    assert served.servicer.pods == {2}


def test_update_driver_executors(served: Served) -> None:
    with AllocatorClient(served.target) as client:
        assert client.update_driver_executors(registered=[1, 2, 3]) == {1, 2, 3}
        assert client.update_driver_executors(released=[2]) == {1, 3}
        assert client.update_driver_executors(registered=[7], explicit=True) == {7}
        assert client.update_driver_executors() == {7}


def test_the_stream_rebuilds_snapshots_and_ends_when_cancelled(served: Served) -> None:
    served.servicer.script = SCRIPT
    with AllocatorClient(served.target) as client:
        stream = client.stream_snapshots(batch_interval_ms=50)
        updates = [next(stream) for _ in SCRIPT]
        check_script_updates(updates)
        assert stream.current == updates[1].snapshots[-1]
        stream.cancel()
        assert list(stream) == []
    assert served.servicer.intervals == [50]
    assert served.servicer.stream_cancelled.wait(WAIT_S)


def test_cancel_wakes_a_reader_blocked_on_the_next_update(served: Served) -> None:
    served.servicer.script = SCRIPT[:1]
    received: list[StreamUpdate] = []
    first = threading.Event()

    def read(stream: SnapshotStream) -> None:
        for update in stream:
            received.append(update)
            first.set()

    with AllocatorClient(served.target) as client:
        stream = client.stream_snapshots()
        reader = threading.Thread(target=read, args=(stream,), daemon=True)
        reader.start()
        assert first.wait(WAIT_S)
        with stream:  # leaving the block cancels
            pass
        reader.join(WAIT_S)
        assert not reader.is_alive()
    assert len(received) == 1


def test_a_stream_the_server_ends_ends_the_iteration(served: Served) -> None:
    served.servicer.script = SCRIPT
    served.servicer.stream_end = grpc.StatusCode.OK
    with AllocatorClient(served.target) as client:
        check_script_updates(list(client.stream_snapshots()))


def test_a_stream_the_server_fails_raises_its_error(served: Served) -> None:
    served.servicer.script = SCRIPT[:1]
    served.servicer.stream_end = grpc.StatusCode.UNAVAILABLE
    with AllocatorClient(served.target) as client:
        stream = client.stream_snapshots(reconnect=None)  # reconnecting is tested elsewhere
        next(stream)
        with pytest.raises(grpc.RpcError) as failure:
            next(stream)
        assert failure.value.code() is grpc.StatusCode.UNAVAILABLE


def test_a_negative_batch_interval_is_the_servers_invalid_argument(served: Served) -> None:
    with AllocatorClient(served.target) as client:
        with pytest.raises(grpc.RpcError) as failure:
            next(client.stream_snapshots(batch_interval_ms=-1))
        assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_wait_for_ready_times_out_when_nothing_listens() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound but not listening: connections are refused
        with AllocatorClient(f"127.0.0.1:{port}") as client, pytest.raises(TimeoutError):
            client.wait_for_ready(0.3)


def test_a_unix_socket_target() -> None:
    with tempfile.TemporaryDirectory(prefix="execpods-") as folder:
        server = Served(FakeAllocator(), f"unix:{Path(folder) / 'sidecar.sock'}")
        try:
            with AllocatorClient(server.target, timeout=WAIT_S) as client:
                client.wait_for_ready()
                assert client.request_total(1).total == 1
        finally:
            server.stop()
