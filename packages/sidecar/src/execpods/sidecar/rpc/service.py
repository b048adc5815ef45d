"""The `execpods.v1.ExecutorAllocator` servicer (grpc.aio).

The servicer maps and decides nothing: each handler turns the message into the core's values
(`mapping.py`, `profiles.py`), calls the backend (the facade `execpods.core.compose_backend`
builds), the driver view or the open streams (`stream/streams.py`), and maps the answer back, a
`ValueError` to INVALID_ARGUMENT with its message (one wording per rule, the core's or the
mapping's), a pod operation's failure to its status. A bad request changes nothing. Blocking work
(the target, deletions through the API) runs on the backend's request scheduler, and the handlers
await its futures, so the event loop never blocks on Kubernetes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from execpods.core import (
    PodOperationError,
    summarize_ids,
)
from execpods.sidecar.rpc.mapping import (
    InvalidArgument,
    check_driver_ids,
    clip,
    parse_executor_ids,
    resume_position,
    status_of,
    stream_interval,
)
from execpods.sidecar.rpc.profiles import totals_request
from execpods.sidecar.stream.streams import ShuttingDown, Streams
from execpods.sidecar.wiring import Runtime
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc
from google.protobuf.message import Message

logger = logging.getLogger(__name__)

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
        self._streams = Streams(runtime)

    def close_streams(self) -> None:
        self._streams.close()

    async def RequestTotal(  # noqa: N802 (the contract's names)
        self,
        request: pb.RequestTotalRequest,
        context: Context[pb.RequestTotalRequest, pb.RequestTotalResponse],
    ) -> pb.RequestTotalResponse:
        backend = self._runtime.backend
        if request.stopping or backend.allocation_stopped:
            await self._stopping(request, context)
            if request.stopping:
                return self._totals_response()
        try:
            totals = totals_request(
                request,
                app_id=self._runtime.app_id,
                policy=self._runtime.template_policy,
                check=self._runtime.profile_check,
                declared=backend.declared_profile,
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
        except RecursionError:  # a RuntimeError, but the request's fault: never "shutting down"
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "the request nests too deeply to be read (a pod template nested thousands of "
                "levels deep?); nothing was changed",
            )
        except RuntimeError:  # the request scheduler is shut down
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the sidecar is shutting down")
        logger.debug("The driver asked for %d executors in total.", request.total)
        return self._totals_response()

    def _totals_response(self) -> pb.RequestTotalResponse:
        backend = self._runtime.backend
        counts = backend.counts()
        self._runtime.telemetry.target_set(counts.total)
        return pb.RequestTotalResponse(
            total=counts.total,
            running=counts.running,
            pending=counts.pending,
            profile_totals=backend.targets(),
        )

    async def _stopping(
        self,
        request: pb.RequestTotalRequest,
        context: Context[pb.RequestTotalRequest, pb.RequestTotalResponse],
    ) -> None:
        """`stopping` ends the application's allocation for good (Spark's
        `ExecutorPodsAllocator.stop`); after it, only totals of 0 are accepted."""
        backend = self._runtime.backend
        wants = request.total > 0 or any(t > 0 for t in request.profile_totals.values())
        if wants and request.stopping:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "a stopping RequestTotal sets every total to 0; nothing was changed",
            )
        if wants:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "the driver stopped this application's allocation (RequestTotal.stopping): no "
                "executor is created for it again",
            )
        if request.stopping and not backend.allocation_stopped:
            try:
                await asyncio.wrap_future(backend.stop_allocating())
            except RuntimeError:  # the request scheduler is shut down
                await context.abort(grpc.StatusCode.UNAVAILABLE, "the sidecar is shutting down")

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
        # Ids above the highest ever issued never had a pod: nothing is sent or kept for them.
        highest = self._runtime.backend.highest_executor_id()
        named = len(ids)
        ids = [i for i in ids if i <= highest]
        if len(ids) < named:
            logger.info(
                "KillExecutors named %d ids above the highest executor id %d: no executor ever "
                "had them, so nothing is done for them.",
                named - len(ids),
                highest,
            )
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
            if request.HasField("registration_timeout_ms") and request.registration_timeout_ms < 0:
                raise InvalidArgument(
                    f"registration_timeout_ms={request.registration_timeout_ms} is invalid: it "
                    "must not be negative (0 turns the registration timeout off)"
                )
        except InvalidArgument as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        if request.HasField("registration_timeout_ms"):
            self._runtime.backend.set_registration_timeout(request.registration_timeout_ms / 1000)
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
        encoded once for all streams (`stream/streams.py`)."""
        try:
            stream = self._streams.open(
                interval=stream_interval(
                    request,
                    default=self._runtime.backend.settings.event_processing_interval,
                    longest=self._runtime.settings.sidecar.stream_max_batch_interval,
                ),
                resume_from=resume_position(request),
            )
        except ValueError as error:  # a bad interval or resume position
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except ShuttingDown as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        except RuntimeError:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the snapshots store is stopped")
        async for message in stream.messages():
            yield message


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
