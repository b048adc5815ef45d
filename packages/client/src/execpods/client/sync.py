"""The blocking client: one `grpc.insecure_channel`, one method per RPC.

Errors are the server's own: a failed call raises `grpc.RpcError` unchanged (its `.code()` and
`.details()` say why, e.g. `INVALID_ARGUMENT` for a negative total or a misspelt executor id). The
client adds no validation of its own, so what the driver sees is exactly what the contract says
the sidecar decided. Unary calls are not retried; a snapshot stream reconnects by itself when the
sidecar is unreachable, and resumes where it was (see `execpods.client.reconnect`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Protocol, Self

import grpc
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

ViewSender = Callable[[pb.UpdateDriverExecutorsRequest], object]


class BlockingCall(Protocol):
    """A blocking `StreamSnapshots` call, as grpc returns it: an iterator that can be cancelled."""

    def __next__(self) -> pb.StreamSnapshotsResponse: ...

    def cancel(self) -> bool: ...


class SnapshotStream(DecodedCall[BlockingCall]):
    """An open `StreamSnapshots` call, decoded: iterate it for `StreamUpdate`s, oldest first.

    Every snapshot it yields is complete (deltas are rebuilt). Iteration ends cleanly after
    `cancel()` (from any thread, or by leaving a `with` block), or when the server ends the
    stream. With a `Reconnect` policy a call that fails as unreachable is reopened from the last
    position (each missed removal once); any other end of the call raises its `grpc.RpcError`.
    """

    def __init__(
        self,
        call: BlockingCall,
        *,
        reopen: CallOpener[BlockingCall] | None = None,
        reconnect: Reconnect | None = None,
        memory: DriverViewMemory | None = None,
        send_view: ViewSender | None = None,
    ) -> None:
        super().__init__(call, reopen=reopen, reconnect=reconnect, memory=memory)
        self._send_view = send_view
        self._wake = threading.Event()

    def cancel(self) -> None:
        super().cancel()
        self._wake.set()

    def __iter__(self) -> Iterator[StreamUpdate]:
        return self

    def __next__(self) -> StreamUpdate:
        while True:
            try:
                message: pb.StreamSnapshotsResponse = next(self._call)
            except grpc.RpcError as error:
                if self._is_our_cancel(error):
                    raise StopIteration from None
                delay = self._retry_delay(error)
                if delay is None:
                    raise
                if self._wake.wait(delay) or self._ended_by_us():
                    raise StopIteration from None
                self._reopen_call()
                continue
            update = self._decode(message)
            self._resend_view()
            return update

    def _resend_view(self) -> None:
        request = self._view_to_resend()
        if request is None or self._send_view is None:
            return
        try:
            self._send_view(request)
        except grpc.RpcError as error:
            logger.warning("Could not re-send the driver's executors (%s); will retry.", error)
            self._view_pending = True

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

    `target` is a gRPC target such as `127.0.0.1:50551` or `unix:/run/execpods.sock`. `timeout`
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
        self._view = DriverViewMemory()

    def wait_for_ready(self, timeout: float | None = None) -> None:
        """Blocks until the channel is connected; raises `TimeoutError` after `timeout` seconds.

        Useful right after starting a sidecar: calls made before it listens would fail at once.
        """
        limit = self._timeout if timeout is None else timeout
        try:
            grpc.channel_ready_future(self._channel).result(timeout=limit)
        except grpc.FutureTimeoutError:
            raise TimeoutError(f"the sidecar was not reachable within {limit} s") from None

    def request_total(
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
        response = self._stub.RequestTotal(request, timeout=self._timeout, metadata=self._metadata)
        return request_total_result(response)

    def stop_allocation(self) -> RequestTotalResult:
        """Ends the application's allocation for good, as Spark's `ExecutorPodsAllocator.stop`
        (RequestTotal with `stopping`): every total drops to 0, no executor is created for the
        application again (a later total above 0 is FAILED_PRECONDITION), and the sidecar
        leaves its id ledger to the application's clean-up. The pods are the driver's to
        delete."""
        response = self._stub.RequestTotal(
            pb.RequestTotalRequest(stopping=True), timeout=self._timeout, metadata=self._metadata
        )
        return request_total_result(response)

    def is_deleted(self, executor_id: int) -> bool:
        """Whether scale-down deleted this executor and its pod may still show (Spark's
        isDeleted): refuse its late registration."""
        response = self._stub.IsDeleted(
            pb.IsDeletedRequest(executor_id=executor_id),
            timeout=self._timeout,
            metadata=self._metadata,
        )
        return bool(response.deleted)

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
        response = self._stub.UpdateDriverExecutors(
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
    ) -> SnapshotStream:
        """Subscribes to the executor snapshots and removals (0: the server's batch interval).

        The call starts at once; an invalid interval surfaces as a `grpc.RpcError` on iteration.
        `resume_from` continues an earlier stream after the position of its last update.
        `reconnect` (None: never) reopens the stream from its last position when the sidecar is
        unreachable, and then re-sends what `update_driver_executors` told it.
        """

        def reopen(position: pb.StreamPosition | None) -> BlockingCall:
            call: BlockingCall = self._stub.StreamSnapshots(
                stream_request(batch_interval_ms, position), metadata=self._metadata
            )
            return call

        def send_view(request: pb.UpdateDriverExecutorsRequest) -> object:
            return self._stub.UpdateDriverExecutors(
                request, timeout=self._timeout, metadata=self._metadata
            )

        first = None if resume_from is None else position_to_proto(resume_from)
        return SnapshotStream(
            reopen(first),
            reopen=reopen,
            reconnect=reconnect,
            memory=self._view,
            send_view=send_view,
        )

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
