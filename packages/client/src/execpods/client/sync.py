"""The blocking client: one `grpc.insecure_channel`, one method per RPC.

Errors are the server's own: a failed call raises `grpc.RpcError` unchanged (its `.code()` and
`.details()` say why, e.g. `INVALID_ARGUMENT` for a negative total or a misspelt executor id). The
client adds no retries and no validation of its own, so what the driver sees is exactly what the
contract says the sidecar decided.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Protocol, Self

import grpc
from execpods.client.calls import DecodedCall
from execpods.client.convert import kill_request, request_total_result, update_request
from execpods.client.credentials import Connection, TlsOptions
from execpods.client.model import RequestTotalResult, StreamUpdate
from execpods.v1 import allocator_pb2 as pb


class BlockingCall(Protocol):
    """A blocking `StreamSnapshots` call, as grpc returns it: an iterator that can be cancelled."""

    def __next__(self) -> pb.StreamSnapshotsResponse: ...

    def cancel(self) -> bool: ...


class SnapshotStream(DecodedCall[BlockingCall]):
    """An open `StreamSnapshots` call, decoded: iterate it for `StreamUpdate`s, oldest first.

    Every snapshot it yields is complete (deltas are rebuilt). Iteration ends cleanly after
    `cancel()` (from any thread, or by leaving a `with` block); any other end of the call raises
    the `grpc.RpcError` that ended it.
    """

    def __iter__(self) -> Iterator[StreamUpdate]:
        return self

    def __next__(self) -> StreamUpdate:
        try:
            message: pb.StreamSnapshotsResponse = next(self._call)
        except grpc.RpcError as error:
            if self._is_our_cancel(error):
                raise StopIteration from None
            raise
        return self._decode(message)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cancel()


class AllocatorClient(Connection):
    """A driver's handle on the sidecar's `execpods.v1.ExecutorAllocator` service.

    `target` is a gRPC target such as `127.0.0.1:50051` or `unix:/run/execpods.sock`. `timeout`
    (seconds) bounds each unary call and `wait_for_ready`; streams have no deadline, since they are
    meant to last as long as the driver. Use it as a context manager, or call `close()`.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 10.0,
        tls: TlsOptions | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(target, timeout=timeout, tls=tls, token=token, channels=grpc)

    def wait_for_ready(self, timeout: float | None = None) -> None:
        """Blocks until the channel is connected; raises `TimeoutError` after `timeout` seconds.

        Useful right after starting a sidecar: calls made before it listens would fail at once.
        """
        limit = self._timeout if timeout is None else timeout
        try:
            grpc.channel_ready_future(self._channel).result(timeout=limit)
        except grpc.FutureTimeoutError:
            raise TimeoutError(f"the sidecar was not reachable within {limit} s") from None

    def request_total(self, total: int) -> RequestTotalResult:
        """Sets the desired number of executors; the allocator reconciles towards it in batches."""
        response = self._stub.RequestTotal(
            pb.RequestTotalRequest(total=total), timeout=self._timeout, metadata=self._metadata
        )
        return request_total_result(response)

    def kill_executors(self, executor_ids: Iterable[int | str]) -> int:
        """Deletes these executors' pods; returns how many pods the API server deleted.

        The removals are then reported on the snapshot stream, like any other executor exit.
        """
        response = self._stub.KillExecutors(
            kill_request(executor_ids), timeout=self._timeout, metadata=self._metadata
        )
        return int(response.deleted_pods)

    def update_driver_executors(
        self,
        *,
        registered: Iterable[int] = (),
        released: Iterable[int] = (),
        explicit: bool = False,
        registered_at_ms: Mapping[int, int] | None = None,
    ) -> frozenset[int]:
        """Tells the sidecar which executors the driver knows; returns the ones it now knows.

        `registered_at_ms` says when the driver registered executors (ms since the epoch): an
        executor is reported missing only when a list taken more than
        `spark.kubernetes.executor.missingPodDetectDelta` later lacks its pod.
        """
        request = update_request(
            registered, released, explicit=explicit, registered_at_ms=registered_at_ms
        )
        response = self._stub.UpdateDriverExecutors(
            request, timeout=self._timeout, metadata=self._metadata
        )
        return frozenset(response.known)

    def stream_snapshots(self, *, batch_interval_ms: int = 0) -> SnapshotStream:
        """Subscribes to the executor snapshots and removals (0: the server's batch interval).

        The call starts at once; an invalid interval surfaces as a `grpc.RpcError` on iteration.
        """
        request = pb.StreamSnapshotsRequest(batch_interval_ms=batch_interval_ms)
        return SnapshotStream(self._stub.StreamSnapshots(request, metadata=self._metadata))

    def close(self) -> None:
        """Closes the channel, which also ends any open stream."""
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
