"""A small in-memory `ExecutorAllocator` servicer, served for real on 127.0.0.1:0.

It tests the client, not the sidecar: it speaks the contract over a real gRPC server (no mock of
grpc), validates arguments as the contract says (so the tests can see that the client passes
INVALID_ARGUMENT through), records what it was asked, and plays a scripted snapshot stream.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc

_DECIMAL = re.compile(r"[0-9]+")
# How long a scripted stream stays open, at most, waiting for the client to cancel it.
_STREAM_HOLD_S = 30.0


class FakeAllocator(pb_grpc.ExecutorAllocatorServicer):
    def __init__(self) -> None:
        self.total = 0
        self.running = 0
        self.pending = 0
        self.pods: set[int] = set()
        self.known: set[int] = set()
        self.deleted: set[int] = set()
        self.kill_requests: list[list[str]] = []
        self.intervals: list[int] = []
        self.script: list[pb.StreamSnapshotsResponse] = []
        # After the script, the stream ends with this status (None: stays open until cancelled).
        self.stream_end: grpc.StatusCode | None = None
        self.stream_cancelled = threading.Event()
        self.script_sent = threading.Event()

    def RequestTotal(
        self, request: pb.RequestTotalRequest, context: grpc.ServicerContext
    ) -> pb.RequestTotalResponse:
        if request.total < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "total must not be negative")
        self.total = request.total
        return pb.RequestTotalResponse(
            total=request.total, running=self.running, pending=self.pending
        )

    def KillExecutors(
        self, request: pb.KillExecutorsRequest, context: grpc.ServicerContext
    ) -> pb.KillExecutorsResponse:
        ids = list(request.executor_ids)
        self.kill_requests.append(ids)
        bad = [text for text in ids if not _DECIMAL.fullmatch(text)]
        if bad:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not executor ids: {bad}")
        wanted = {int(text) for text in ids}
        deleted = wanted & self.pods
        self.pods -= deleted
        return pb.KillExecutorsResponse(deleted_pods=len(deleted))

    def StreamSnapshots(
        self, request: pb.StreamSnapshotsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.StreamSnapshotsResponse]:
        if request.batch_interval_ms < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "batch_interval_ms must be >= 0")
        self.intervals.append(request.batch_interval_ms)
        context.add_callback(self.stream_cancelled.set)
        yield from self.script
        self.script_sent.set()
        if self.stream_end is None:
            self.stream_cancelled.wait(_STREAM_HOLD_S)
        elif self.stream_end is not grpc.StatusCode.OK:
            context.abort(self.stream_end, "scripted end of the stream")

    def UpdateDriverExecutors(
        self, request: pb.UpdateDriverExecutorsRequest, context: grpc.ServicerContext
    ) -> pb.UpdateDriverExecutorsResponse:
        base = set() if request.explicit else self.known
        self.known = (base | set(request.registered)) - set(request.released)
        return pb.UpdateDriverExecutorsResponse(known=sorted(self.known))

    def IsDeleted(
        self, request: pb.IsDeletedRequest, context: grpc.ServicerContext
    ) -> pb.IsDeletedResponse:
        return pb.IsDeletedResponse(deleted=request.executor_id in self.deleted)


class Served:
    """`servicer` on a real gRPC server listening at `target` until `stop()`."""

    def __init__(self, servicer: FakeAllocator, address: str = "127.0.0.1:0") -> None:
        self.servicer = servicer
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_ExecutorAllocatorServicer_to_server(servicer, self._server)
        port = self._server.add_insecure_port(address)
        self.target = address if address.startswith("unix:") else f"127.0.0.1:{port}"
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None).wait(10)
