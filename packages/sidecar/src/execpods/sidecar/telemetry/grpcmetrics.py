"""gRPC server metrics under the names grpc-ecosystem's interceptors give them.

go-grpc-prometheus (and py-grpc-prometheus after it) name the server's series, and the dashboards
and alerts of the gRPC world query them: a call is counted when it starts and when it ends, with
its type, service and method, and its code at the end; messages are counted each way; the
handling time is a histogram:

- `grpc_server_started_total{grpc_type, grpc_service, grpc_method}`
- `grpc_server_handled_total{grpc_type, grpc_service, grpc_method, grpc_code}`
- `grpc_server_msg_received_total{...}`, `grpc_server_msg_sent_total{...}`
- `grpc_server_handling_seconds{grpc_type, grpc_service, grpc_method}` (every call; a stream's
  when it ends, as go-grpc-prometheus times it)

`grpc_type` is `unary` or `server_stream` (the two kinds this server has), `grpc_service` the
full service name (`execpods.v1.ExecutorAllocator`, `grpc.health.v1.Health`), `grpc_method` the
method (`RequestTotal`, `StreamSnapshots`, `Check`). `grpc_code` is spelt as Go's `codes.Code`
prints it, the spelling go-grpc-prometheus writes and its users' queries match: `OK`, `Canceled`,
`InvalidArgument`, `Unauthenticated`, `PermissionDenied`, `Unavailable`, `Unknown` (an exception
the servicer did not turn into a status). py-grpc-prometheus writes Python's enum names instead
(`INVALID_ARGUMENT`); execpods follows the Go original.

`initialize` gives every method of the services served its series at zero before any call, as
go-grpc-prometheus' `InitializeMetrics` does (etcd, for one, calls it): every code of
`grpc_server_handled_total` included, so a rate or an alert sees the first refused call instead
of a series that appears already at 1.

The interceptor is installed before the security interceptors, so a call they refuse is counted
too, ending with its refusal's code before any servicer runs: what an alert on
`grpc_code="Unauthenticated"` wants to see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["GrpcServerMetrics", "call_status", "go_code"]

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Prometheus' default buckets (go-grpc-prometheus' default), with three below 5 ms: most of
this server's unary calls take less."""

_LABELS = ("grpc_type", "grpc_service", "grpc_method")
Labels = tuple[str, str, str]
"""A call's values of `_LABELS`."""

_GO_SPELLING = {grpc.StatusCode.CANCELLED: "Canceled"}
"""Go's one spelling that is not the enum name in CamelCase."""


def go_code(code: grpc.StatusCode) -> str:
    """A status code as Go's `codes.Code.String()` prints it: `InvalidArgument`, `Canceled`."""
    spelt = _GO_SPELLING.get(code)
    if spelt is not None:
        return spelt
    if code is grpc.StatusCode.OK:
        return "OK"
    return "".join(part.capitalize() for part in code.name.split("_"))


def call_status(context: Any, error: BaseException | None) -> grpc.StatusCode:
    # A client's cancel reaches a streaming handler as CancelledError where it awaits, or as
    # GeneratorExit where it yields (grpc.aio closes the generator): which one is a race, and
    # both are the client's cancel (go-grpc-prometheus counts Canceled).
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return grpc.StatusCode.CANCELLED
    cancelled = getattr(context, "cancelled", None)
    if error is not None and callable(cancelled) and cancelled():
        return grpc.StatusCode.CANCELLED
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):  # grpc.aio keeps the raw cygrpc value for some codes
        return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
    return grpc.StatusCode.UNKNOWN if error is not None else grpc.StatusCode.OK


def _split(full_method: str) -> tuple[str, str]:
    """("execpods.v1.ExecutorAllocator", "RequestTotal") of "/execpods.v1.ExecutorAllocator/
    RequestTotal"; ("unknown", "unknown") as go-grpc-prometheus for a name without a service."""
    service, sep, method = full_method.lstrip("/").partition("/")
    return (service, method) if sep else ("unknown", "unknown")


class GrpcServerMetrics(grpc.aio.ServerInterceptor):
    """The interceptor that counts and times every call (see the module)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.started = Counter(
            "grpc_server_started",
            "Total number of RPCs started on the server.",
            _LABELS,
            registry=registry,
        )
        self.handled = Counter(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure.",
            (*_LABELS, "grpc_code"),
            registry=registry,
        )
        self.received = Counter(
            "grpc_server_msg_received",
            "Total number of RPC stream messages received on the server.",
            _LABELS,
            registry=registry,
        )
        self.sent = Counter(
            "grpc_server_msg_sent",
            "Total number of gRPC stream messages sent by the server.",
            _LABELS,
            registry=registry,
        )
        self.handling = Histogram(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level "
            "handled by the server.",
            _LABELS,
            buckets=_BUCKETS,
            registry=registry,
        )

    def initialize(self, services: Iterable[Any]) -> None:
        """Every method of these service descriptors at zero, every code included."""
        for service in services:
            for method in service.methods:
                if method.client_streaming:
                    continue  # this interceptor counts unary and server-streaming calls only
                kind = "server_stream" if method.server_streaming else "unary"
                labels = (kind, service.full_name, method.name)
                for counter in (self.started, self.received, self.sent):
                    counter.labels(*labels)
                self.handling.labels(*labels)
                for code in grpc.StatusCode:
                    self.handled.labels(*labels, go_code(code))

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        service, method = _split(str(handler_call_details.method))
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(("unary", service, method), handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(("server_stream", service, method), handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # client or bidirectional streams: the services here have none

    def _ended(
        self, labels: Labels, started: float, context: Any, error: BaseException | None
    ) -> None:
        self.handling.labels(*labels).observe(time.perf_counter() - started)
        self.handled.labels(*labels, go_code(call_status(context, error))).inc()

    def _unary(self, labels: Labels, behaviour: Any) -> Any:
        async def timed(request: Any, context: Any) -> Any:
            self.started.labels(*labels).inc()
            self.received.labels(*labels).inc()
            started = time.perf_counter()
            error: BaseException | None = None
            try:
                result = behaviour(request, context)
                response = await result if asyncio.iscoroutine(result) else result
            except BaseException as raised:
                error = raised
                raise
            finally:
                self._ended(labels, started, context, error)
            if call_status(context, None) is grpc.StatusCode.OK:
                self.sent.labels(*labels).inc()  # the response went out
            return response

        return timed

    def _stream(self, labels: Labels, behaviour: Any) -> Any:
        async def counted(request: Any, context: Any) -> AsyncIterator[Any]:
            self.started.labels(*labels).inc()
            self.received.labels(*labels).inc()
            started = time.perf_counter()
            sent = self.sent.labels(*labels)
            error: BaseException | None = None
            try:
                result = behaviour(request, context)
                if hasattr(result, "__aiter__"):
                    async for message in result:
                        yield message
                        sent.inc()
                elif asyncio.iscoroutine(result):
                    await result  # a servicer that writes with context.write
                else:
                    for message in result:
                        yield message
                        sent.inc()
            except BaseException as raised:
                error = raised
                raise
            finally:
                self._ended(labels, started, context, error)

        return counted
