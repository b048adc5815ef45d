"""The `execpods.v1.ExecutorAllocator` servicer (grpc.aio).

Every request is validated whole before anything is applied: a bad field is INVALID_ARGUMENT with
a message naming the field and the value, and nothing changes. The servicer talks only to the
backend (the facade `execpods.core.compose_backend` builds) and to the driver view: blocking work
(the target, deletions through the API) runs on the backend's request scheduler, and the handlers
await its futures, so the event loop never blocks on Kubernetes.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
from execpods.core import (
    INT64_MAX,
    ApiThrottled,
    ApiUnavailable,
    PodAdmissionRejected,
    PodForbidden,
    PodInvalid,
    PodNotFound,
    PodOperationError,
    clip,
    summarize_ids,
)
from execpods.k8s import ApiHeldBack
from execpods.sidecar.encoding import EncodingCache, SnapshotEncoder
from execpods.sidecar.feed import StreamFeed
from execpods.sidecar.messages import StreamCursor, build_response
from execpods.sidecar.profiles import totals_request
from execpods.sidecar.resume import InvalidPosition, Opened, Position
from execpods.sidecar.sendbudget import SendBudget
from execpods.sidecar.wiring import Runtime
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc
from google.protobuf.message import Message

logger = logging.getLogger(__name__)

_DECIMAL = re.compile(r"[0-9]+")


class InvalidArgument(ValueError):
    """A request field is invalid; the message names the field and the value."""


def parse_executor_ids(values: Iterable[str]) -> list[int]:
    """Executor ids as decimal integers ("7"); raises `InvalidArgument` on the first bad one."""
    ids: list[int] = []
    for index, text in enumerate(values):
        # The length first: int() refuses (ValueError) strings of over 4,300 digits.
        if (
            _DECIMAL.fullmatch(text) is None
            or len(text.lstrip("0")) > len(str(INT64_MAX))
            or int(text.lstrip("0") or "0") > INT64_MAX
        ):
            raise InvalidArgument(
                f"executor_ids[{index}]={clip(repr(text), 100)} is not an executor id (a "
                'decimal integer such as "7" up to 2^63-1); nothing was deleted'
            )
        ids.append(int(text))
    return ids


def check_driver_ids(field: str, values: Iterable[int]) -> list[int]:
    ids = list(values)
    for index, value in enumerate(ids):
        if value < 1:
            raise InvalidArgument(
                f"{field}[{index}]={value} is not an executor id (ids start at 1); "
                "nothing was changed"
            )
    return ids


def status_of(error: PodOperationError) -> grpc.StatusCode:
    """The gRPC status code that best tells a client what a failed pod operation means.

    A call the back-off gate held after 5xx answers or refused connections is an outage
    (UNAVAILABLE, which drivers retry), not a quota (RESOURCE_EXHAUSTED, for 429s)."""
    if isinstance(error, ApiHeldBack) and error.outage:
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(error, ApiThrottled):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(error, ApiUnavailable):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(error, PodForbidden):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(error, PodNotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, PodInvalid | PodAdmissionRejected):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL


Context = grpc.aio.ServicerContext
"""The grpc.aio servicer context, typed by request and response: `abort` never returns."""


def failure_limit(request: pb.RequestTotalRequest) -> tuple[int, float | None] | None:
    """The driver's failure limit and window, when the request carries one (`ValueError` when
    it is out of range)."""
    if not request.HasField("failure_limit"):
        return None
    limit = request.failure_limit
    if limit.max_failures < 0 or limit.validity_interval_ms < 0:
        raise ValueError(
            f"failure_limit (max_failures={limit.max_failures}, validity_interval_ms="
            f"{limit.validity_interval_ms}) is invalid: neither may be negative"
        )
    window = limit.validity_interval_ms / 1000 if limit.validity_interval_ms else None
    return limit.max_failures, window


class AllocatorService(pb_grpc.ExecutorAllocatorServicer):
    """The servicer; `close_streams()` ends every open stream cleanly (at shutdown)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._cache = EncodingCache()
        self._budget = SendBudget(runtime.settings.sidecar.stream_send_budget_mib << 20)
        self._feeds: set[StreamFeed] = set()
        self._closing = False

    def close_streams(self) -> None:
        self._closing = True
        for feed in list(self._feeds):
            feed.close()

    async def RequestTotal(  # noqa: N802 (the contract's names)
        self,
        request: pb.RequestTotalRequest,
        context: Context[pb.RequestTotalRequest, pb.RequestTotalResponse],
    ) -> pb.RequestTotalResponse:
        backend = self._runtime.backend
        try:
            totals = totals_request(
                request, app_id=self._runtime.app_id, policy=self._runtime.template_policy
            )
            limit = failure_limit(request)  # checked before anything applies
            applied = backend.request(totals)
            if limit is not None and limit != backend.failure_limit():
                backend.set_failure_limit(max_failures=limit[0], validity_interval=limit[1])
                logger.info(
                    "The driver's executor failure limit applies: more than %d failures %s "
                    "fail the application.",
                    limit[0],
                    "in total" if limit[1] is None else f"within {limit[1]:g}s",
                )
            await asyncio.wrap_future(applied)
        except ValueError as error:  # the message's or the backend's judgement: one wording
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except RuntimeError:  # the request scheduler is shut down
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the sidecar is shutting down")
        counts = backend.counts()
        self._runtime.telemetry.target_set(counts.total)
        logger.debug("The driver asked for %d executors in total.", request.total)
        return pb.RequestTotalResponse(
            total=counts.total,
            running=counts.running,
            pending=counts.pending,
            profile_totals=backend.targets(),
        )

    async def IsDeleted(  # noqa: N802 (the contract's names)
        self,
        request: pb.IsDeletedRequest,
        context: Context[pb.IsDeletedRequest, pb.IsDeletedResponse],
    ) -> pb.IsDeletedResponse:
        if request.executor_id < 1:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"executor_id={request.executor_id} is not an executor id (ids start at 1)",
            )
        return pb.IsDeletedResponse(deleted=self._runtime.backend.is_deleted(request.executor_id))

    async def KillExecutors(  # noqa: N802 (the contract's names)
        self,
        request: pb.KillExecutorsRequest,
        context: Context[pb.KillExecutorsRequest, pb.KillExecutorsResponse],
    ) -> pb.KillExecutorsResponse:
        try:
            ids = parse_executor_ids(request.executor_ids)
        except InvalidArgument as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        try:
            deleted = await asyncio.wrap_future(self._runtime.backend.kill_executors(ids))
        except PodOperationError as error:
            text = clip(str(error))
            logger.warning("Could not kill executors %s: %s", summarize_ids(sorted(ids)), text)
            await context.abort(status_of(error), f"could not delete the pods: {text}")
        except RuntimeError:  # the request scheduler is shut down
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the sidecar is shutting down")
        logger.info("Killed executors %s: %d pods deleted.", summarize_ids(sorted(ids)), deleted)
        return pb.KillExecutorsResponse(deleted_pods=deleted)

    async def UpdateDriverExecutors(  # noqa: N802 (the contract's names)
        self,
        request: pb.UpdateDriverExecutorsRequest,
        context: Context[pb.UpdateDriverExecutorsRequest, pb.UpdateDriverExecutorsResponse],
    ) -> pb.UpdateDriverExecutorsResponse:
        try:
            registered = check_driver_ids("registered", request.registered)
            released = check_driver_ids("released", request.released)
            registered_at_ms = dict(request.registered_at_ms)
            check_driver_ids("registered_at_ms", registered_at_ms)
        except InvalidArgument as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        known = self._runtime.driver_view.update(
            registered=registered,
            released=released,
            explicit=request.explicit,
            registered_at={i: at_ms / 1000 for i, at_ms in registered_at_ms.items()},
        )
        return pb.UpdateDriverExecutorsResponse(known=known)

    async def StreamSnapshots(  # type: ignore[override]  # noqa: N802 (the contract's names)
        self,
        request: pb.StreamSnapshotsRequest,
        context: Context[pb.StreamSnapshotsRequest, pb.StreamSnapshotsResponse],
    ) -> AsyncIterator[bytes]:
        """Serialized `StreamSnapshotsResponse`s (see `add_to_server`): the snapshots in them are
        encoded once for all streams."""
        longest_ms = round(self._runtime.settings.sidecar.stream_max_batch_interval * 1000)
        if not 0 <= request.batch_interval_ms <= longest_ms:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"batch_interval_ms={request.batch_interval_ms} is invalid: it must be between 0 "
                f"(the server's default) and {longest_ms} "
                "(execpods.sidecar.stream.maxBatchInterval)",
            )
        if self._closing:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the sidecar is shutting down")
        interval = (
            request.batch_interval_ms / 1000
            if request.batch_interval_ms
            else self._runtime.backend.settings.event_processing_interval
        )
        feed = StreamFeed(
            asyncio.get_running_loop(),
            max_pending=self._runtime.settings.sidecar.stream_max_pending,
        )
        resume_from = (
            Position(
                incarnation=request.resume_from.incarnation,
                sequence=request.resume_from.sequence,
            )
            if request.HasField("resume_from")
            else None
        )
        try:
            opened = self._runtime.removal_log.open(resume_from, feed.on_removal)
        except InvalidPosition as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        self._feeds.add(feed)
        observed = self._runtime.telemetry.stream()
        try:
            subscription = self._runtime.backend.subscribe(
                interval,
                observed.arrived(feed.on_snapshots),
                on_application_failure=feed.on_application_failed,
            )
            unlisten = self._runtime.backend.add_notice_listener(feed.on_notice)
        except RuntimeError:
            observed.close()
            opened.cancel()
            self._feeds.discard(feed)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the snapshots store is stopped")
        logger.debug(
            "A stream subscribed every %.3f s (%d open)%s.",
            interval,
            len(self._feeds),
            _resumed(opened, resume_from),
        )
        try:
            async for response in self._messages(feed, opened):
                yield response
                observed.sent()
        finally:
            observed.close()
            unlisten()
            subscription.cancel()
            opened.cancel()
            self._feeds.discard(feed)
            logger.debug("A stream ended (%d open).", len(self._feeds))

    async def _messages(self, feed: StreamFeed, opened: Opened) -> AsyncIterator[bytes]:
        # The feed holds removals back until its first snapshot, so the first message that
        # carries anything carries the current snapshot.
        encoder = SnapshotEncoder(self._cache)
        cursor = StreamCursor(opened.start, resync=opened.resync)
        first = True
        while True:
            await feed.wait()
            pending = feed.take()
            if pending:
                for message in build_response(encoder, pending, first=first, cursor=cursor):
                    with await self._budget.turn(message.size):
                        yield message.join()  # the share is held until gRPC has taken it
                first = False
            if feed.closed:
                return


def _serialize(response: bytes | Message) -> bytes:
    """A response serializer that passes bytes through (StreamSnapshots' pre-serialized
    messages) and serializes messages."""
    return response if isinstance(response, bytes) else response.SerializeToString()


def add_to_server(service: AllocatorService, server: grpc.aio.Server) -> None:
    """Serve `service` on `server`: the generated registration's handlers, built from the
    contract's descriptor, with a response serializer that sends StreamSnapshots' bytes as they
    are (the generated one would need a message, i.e. a per-stream copy and serialization)."""
    descriptor = pb.DESCRIPTOR.services_by_name["ExecutorAllocator"]
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in descriptor.methods:
        if method.client_streaming:
            raise TypeError(f"{method.full_name}: the contract has no client-streaming calls")
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            getattr(service, method.name),
            request_deserializer=getattr(pb, method.input_type.name).FromString,
            response_serializer=_serialize,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(descriptor.full_name, handlers),)
    )
    server.add_registered_method_handlers(descriptor.full_name, handlers)


def _resumed(opened: Opened, resume_from: Position | None) -> str:
    if resume_from is None:
        return ""
    flag = ", re-syncing" if opened.resync else ""
    return f", resumed after removal {resume_from.sequence} with {len(opened.backlog)} missed{flag}"
