"""gRPC server metrics: calls by method and status code, and how long unary calls take.

A server interceptor wraps each method's handler: the call is counted once it ends, under its
short method name (`RequestTotal`, `StreamSnapshots`, `Check`...) and the status code it ended
with (`OK`, `INVALID_ARGUMENT`, `UNAUTHENTICATED`...; an exception the servicer did not turn into
a status is `UNKNOWN`, and a call the client cancelled is `CANCELLED`). Unary calls are timed;
streams are not (they last as long as the driver watches), their count is enough.

Calls refused by the security interceptors (they run first) are counted too: they end with their
refusal's code before any servicer runs, which is what an alert on UNAUTHENTICATED wants to see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["GrpcServerMetrics"]

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _code_name(context: Any, error: BaseException | None) -> str:
    if isinstance(error, asyncio.CancelledError):
        return "CANCELLED"
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):  # grpc.aio keeps the raw cygrpc value for some codes
        return next((c.name for c in grpc.StatusCode if c.value[0] == code), "UNKNOWN")
    return "UNKNOWN" if error is not None else "OK"


class GrpcServerMetrics(grpc.aio.ServerInterceptor):
    """`execpods_grpc_server_calls_total{method, code}` and
    `execpods_grpc_server_call_duration_seconds{method}` (unary calls)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter(
            "execpods_grpc_server_calls",
            "gRPC calls the sidecar served, by method and the status code they ended with.",
            ("method", "code"),
            registry=registry,
        )
        self.latency = Histogram(
            "execpods_grpc_server_call_duration_seconds",
            "How long the sidecar took to answer unary gRPC calls, by method.",
            ("method",),
            buckets=_BUCKETS,
            registry=registry,
        )

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = str(handler_call_details.method).rsplit("/", 1)[-1]
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # client or bidirectional streams: the service has none

    def _unary(self, method: str, behaviour: Any) -> Any:
        async def timed(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            error: BaseException | None = None
            try:
                result = behaviour(request, context)
                return await result if asyncio.iscoroutine(result) else result
            except BaseException as raised:
                error = raised
                raise
            finally:
                self.latency.labels(method).observe(time.perf_counter() - started)
                self.calls.labels(method, _code_name(context, error)).inc()

        return timed

    def _stream(self, method: str, behaviour: Any) -> Any:
        async def counted(request: Any, context: Any) -> AsyncIterator[Any]:
            error: BaseException | None = None
            try:
                result = behaviour(request, context)
                if hasattr(result, "__aiter__"):
                    async for message in result:
                        yield message
                elif asyncio.iscoroutine(result):
                    await result  # a servicer that writes with context.write
                else:
                    for message in result:
                        yield message
            except BaseException as raised:
                error = raised
                raise
            finally:
                self.calls.labels(method, _code_name(context, error)).inc()

        return counted
