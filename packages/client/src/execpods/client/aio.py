"""The asyncio client: the same methods as `AllocatorClient`, over `grpc.aio`.

For drivers that are already asyncio programs (and for servers embedding a client). Errors are the
server's own, as in the blocking client: `grpc.aio.AioRpcError`, a `grpc.RpcError`; streams
reconnect as the blocking client's do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Self, TypeAlias

import grpc
import grpc.aio
from execpods.client.calls import CallOpener, DecodedCall
from execpods.client.convert import (
    kill_request,
    request_total_request,
    request_total_result,
    update_request,
)
from execpods.client.credentials import Connection, TlsOptions
from execpods.client.model import (
    ExecutorProfile,
    RequestTotalResult,
    StreamPosition,
    StreamUpdate,
)
from execpods.client.reconnect import (
    DriverViewMemory,
    Reconnect,
    position_to_proto,
    stream_request,
)
from execpods.v1 import allocator_pb2 as pb

logger = logging.getLogger(__name__)

AsyncViewSender = Callable[[pb.UpdateDriverExecutorsRequest], Awaitable[object]]

_SLEEP_SLICE_S = 0.05


AsyncCall: TypeAlias = (
    "grpc.aio.UnaryStreamCall[pb.StreamSnapshotsRequest, pb.StreamSnapshotsResponse]"
)


class AsyncSnapshotStream(DecodedCall[AsyncCall]):
    """An open `StreamSnapshots` call, decoded: `async for` it for `StreamUpdate`s.

    Every snapshot it yields is complete. Iteration ends cleanly after `cancel()` (or leaving an
    `async with` block), or when the server ends the stream. With a `Reconnect` policy a call that
    fails as unreachable is reopened from the last position; any other end of the call raises the
    `grpc.RpcError` that ended it.
    """

    def __init__(
        self,
        call: AsyncCall,
        *,
        reopen: CallOpener[AsyncCall] | None = None,
        reconnect: Reconnect | None = None,
        memory: DriverViewMemory | None = None,
        send_view: AsyncViewSender | None = None,
    ) -> None:
        super().__init__(call, reopen=reopen, reconnect=reconnect, memory=memory)
        self._send_view = send_view

    def __aiter__(self) -> AsyncIterator[StreamUpdate]:
        return self

    async def __anext__(self) -> StreamUpdate:
        while True:
            if self._ended_by_us():
                raise StopAsyncIteration
            try:
                message = await self._call.read()
            except asyncio.CancelledError:
                # grpc.aio reports a call cancelled by `cancel()` this way; anything else (our own
                # task being cancelled) must propagate.
                if self._ended_by_us() and not _current_task_cancelling():
                    raise StopAsyncIteration from None
                raise
            except grpc.RpcError as error:
                if self._is_our_cancel(error):
                    raise StopAsyncIteration from None
                delay = self._retry_delay(error)
                if delay is None:
                    raise
                await self._sleep_unless_cancelled(delay)
                if self._ended_by_us():
                    raise StopAsyncIteration from None
                self._reopen_call()
                continue
            if message is grpc.aio.EOF:
                raise StopAsyncIteration
            if not isinstance(message, pb.StreamSnapshotsResponse):  # grpc types `read` as object
                raise TypeError(f"StreamSnapshots read a {type(message).__name__}, not a response")
            update = self._decode(message)
            await self._resend_view()
            return update

    async def _sleep_unless_cancelled(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not self._ended_by_us() and (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(left, _SLEEP_SLICE_S))

    async def _resend_view(self) -> None:
        request = self._view_to_resend()
        if request is None or self._send_view is None:
            return
        try:
            await self._send_view(request)
        except grpc.RpcError as error:
            logger.warning("Could not re-send the driver's executors (%s); will retry.", error)
            self._view_pending = True

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
        self._view = DriverViewMemory()

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Waits until the channel is connected; raises `TimeoutError` after `timeout` seconds."""
        limit = self._timeout if timeout is None else timeout
        try:
            await asyncio.wait_for(self._channel.channel_ready(), limit)
        except TimeoutError:
            raise TimeoutError(f"the sidecar was not reachable within {limit} s") from None

    async def request_total(
        self,
        total: int,
        *,
        profile_totals: Mapping[int, int] | None = None,
        profiles: Iterable[ExecutorProfile] = (),
    ) -> RequestTotalResult:
        """Sets the desired number of executors; the allocator reconciles towards it in batches.

        `total` is the default resource profile's; `profile_totals` sets other profiles' totals
        (by id), after declaring `profiles` (immutable once declared). All or nothing.
        """
        request = request_total_request(total, profile_totals, profiles)
        response = await self._stub.RequestTotal(
            request, timeout=self._timeout, metadata=self._metadata
        )
        return request_total_result(response)

    async def stop_allocation(self) -> RequestTotalResult:
        """Ends the application's allocation for good, as Spark's `ExecutorPodsAllocator.stop`
        (RequestTotal with `stopping`): every total drops to 0, no executor is created for the
        application again (a later total above 0 is FAILED_PRECONDITION), and the sidecar
        leaves its id ledger to the application's clean-up. The pods are the driver's to
        delete."""
        response = await self._stub.RequestTotal(
            pb.RequestTotalRequest(stopping=True), timeout=self._timeout, metadata=self._metadata
        )
        return request_total_result(response)

    async def is_deleted(self, executor_id: int) -> bool:
        """Whether scale-down deleted this executor and its pod may still show (Spark's
        isDeleted): refuse its late registration."""
        response = await self._stub.IsDeleted(
            pb.IsDeletedRequest(executor_id=executor_id),
            timeout=self._timeout,
            metadata=self._metadata,
        )
        return bool(response.deleted)

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
        registration_timeout_ms: int | None = None,
    ) -> frozenset[int]:
        """Tells the sidecar which executors the driver knows; returns the ones it now knows.

        `registered_at_ms` says when the driver registered executors (ms since the epoch): an
        executor is reported missing only when a list taken more than
        `spark.kubernetes.executor.missingPodDetectDelta` later lacks its pod.
        `registration_timeout_ms` (explicit mode) has a Running executor the driver has not
        registered within it deleted and replaced (0 turns it off; kept across reconnects).
        """
        registered, released = list(registered), list(released)
        request = update_request(
            registered,
            released,
            explicit=explicit,
            registered_at_ms=registered_at_ms,
            registration_timeout_ms=registration_timeout_ms,
        )
        response = await self._stub.UpdateDriverExecutors(
            request, timeout=self._timeout, metadata=self._metadata
        )
        self._view.note_update(
            registered,
            released,
            explicit=explicit,
            registered_at_ms=registered_at_ms,
            registration_timeout_ms=registration_timeout_ms,
        )
        return frozenset(response.known)

    def stream_snapshots(
        self,
        *,
        batch_interval_ms: int = 0,
        resume_from: StreamPosition | None = None,
        reconnect: Reconnect | None = Reconnect(),  # noqa: B008 (frozen, so shared safely)
    ) -> AsyncSnapshotStream:
        """Subscribes to the executor snapshots and removals (0: the server's batch interval);
        `resume_from` and `reconnect` as in `AllocatorClient.stream_snapshots`."""

        def reopen(position: pb.StreamPosition | None) -> AsyncCall:
            call: AsyncCall = self._stub.StreamSnapshots(
                stream_request(batch_interval_ms, position), metadata=self._metadata
            )
            return call

        async def send_view(request: pb.UpdateDriverExecutorsRequest) -> object:
            return await self._stub.UpdateDriverExecutors(
                request, timeout=self._timeout, metadata=self._metadata
            )

        first = None if resume_from is None else position_to_proto(resume_from)
        return AsyncSnapshotStream(
            reopen(first),
            reopen=reopen,
            reconnect=reconnect,
            memory=self._view,
            send_view=send_view,
        )

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
