"""Typed Python client for the execpods sidecar (`execpods.v1.ExecutorAllocator`).

    from execpods.client import AllocatorClient, ExecutorState

    with AllocatorClient("127.0.0.1:50551") as client:
        client.wait_for_ready(10)
        client.request_total(3)
        with client.stream_snapshots() as stream:
            for update in stream:
                if update.latest and update.latest.count(ExecutorState.RUNNING) == 3:
                    break

Failed calls raise `grpc.RpcError` unchanged (see `.code()`); the client never second-guesses the
server, and retries only to reconnect a stream the sidecar dropped (resuming where it was). Stream
messages arrive decoded and rebuilt: every `Snapshot` is complete.
See docs/client.md.
"""

from execpods.client.aio import AsyncAllocatorClient, AsyncSnapshotStream
from execpods.client.credentials import TlsOptions, read_token_file
from execpods.client.model import (
    AllocatorNotice,
    ExecutorProfile,
    ExecutorRemoval,
    ExecutorState,
    ExecutorView,
    RequestTotalResult,
    Snapshot,
    StreamPosition,
    StreamUpdate,
)
from execpods.client.rebuild import SnapshotRebuilder, StreamProtocolError
from execpods.client.reconnect import Reconnect
from execpods.client.sync import AllocatorClient, SnapshotStream

__all__ = [
    "AllocatorNotice",
    "ExecutorProfile",
    "AllocatorClient",
    "AsyncAllocatorClient",
    "AsyncSnapshotStream",
    "ExecutorRemoval",
    "ExecutorState",
    "ExecutorView",
    "Reconnect",
    "RequestTotalResult",
    "Snapshot",
    "SnapshotRebuilder",
    "SnapshotStream",
    "StreamPosition",
    "StreamProtocolError",
    "StreamUpdate",
    "TlsOptions",
    "read_token_file",
]
