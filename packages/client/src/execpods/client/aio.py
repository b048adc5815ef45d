"""The asyncio client: the same methods as `AllocatorClient`, over `grpc.aio`.

For drivers that are already asyncio programs (and for servers embedding a client). Errors are the
server's own, as in the blocking client: `grpc.aio.AioRpcError`, a `grpc.RpcError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Self

import grpc
import grpc.aio
from execpods.client.calls import DecodedCall
from execpods.client.convert import kill_request, request_total_result, update_request
from execpods.client.credentials import Connection, TlsOptions
from execpods.client.model import RequestTotalResult, StreamUpdate
from execpods.v1 import allocator_pb2 as pb


class AsyncSnapshotStream(
    DecodedCall["grpc.aio.UnaryStreamCall[pb.StreamSnapshotsRequest, pb.StreamSnapshotsResponse]"]
):
    """An open `StreamSnapshots` call, decoded: `async for` it for `StreamUpdate`s.

    Every snapshot it yields is complete. Iteration ends cleanly after `cancel()` (or leaving an
    `async with` block); any other end of the call raises the `grpc.RpcError` that ended it.
    """

    def __aiter__(self) -> AsyncIterator[StreamUpdate]:
        return self

    async def __anext__(self) -> StreamUpdate:
        if self._ended_by_us():
            raise StopAsyncIteration
        try:
            message = await self._call.read()
        except asyncio.CancelledError:
            # grpc.aio reports a call cancelled by `cancel()` this way; anything else (our own task
            # being cancelled) must propagate.
            if self._ended_by_us() and not _current_task_cancelling():
                raise StopAsyncIteration from None
            raise
        except grpc.RpcError as error:
            if self._is_our_cancel(error):
                raise StopAsyncIteration from None
            raise
        if message is grpc.aio.EOF:
            raise StopAsyncIteration
        if not isinstance(message, pb.StreamSnapshotsResponse):  # grpc types `read` as object
            raise TypeError(f"StreamSnapshots read a {type(message).__name__}, not a response")
        return self._decode(message)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cancel()


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class AsyncAllocatorClient(Connection):
    """The asyncio twin of `AllocatorClient`; create and use it inside a running event loop."""

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 10.0,
        tls: TlsOptions | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(target, timeout=timeout, tls=tls, token=token, channels=grpc.aio)

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Waits until the channel is connected; raises `TimeoutError` after `timeout` seconds."""
        limit = self._timeout if timeout is None else timeout
        try:
            await asyncio.wait_for(self._channel.channel_ready(), limit)
        except TimeoutError:
            raise TimeoutError(f"the sidecar was not reachable within {limit} s") from None

    async def request_total(self, total: int) -> RequestTotalResult:
        """Sets the desired number of executors; the allocator reconciles towards it in batches."""
        response = await self._stub.RequestTotal(
            pb.RequestTotalRequest(total=total), timeout=self._timeout, metadata=self._metadata
        )
        return request_total_result(response)

    async def kill_executors(self, executor_ids: Iterable[int | str]) -> int:
        """Deletes these executors' pods; returns how many pods the API server deleted."""
        response = await self._stub.KillExecutors(
            kill_request(executor_ids), timeout=self._timeout, metadata=self._metadata
        )
        return int(response.deleted_pods)

    async def update_driver_executors(
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
        response = await self._stub.UpdateDriverExecutors(
            request, timeout=self._timeout, metadata=self._metadata
        )
        return frozenset(response.known)

    def stream_snapshots(self, *, batch_interval_ms: int = 0) -> AsyncSnapshotStream:
        """Subscribes to the executor snapshots and removals (0: the server's batch interval)."""
        request = pb.StreamSnapshotsRequest(batch_interval_ms=batch_interval_ms)
        return AsyncSnapshotStream(self._stub.StreamSnapshots(request, metadata=self._metadata))

    async def close(self) -> None:
        """Closes the channel, which also ends any open stream."""
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
