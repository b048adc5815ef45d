"""What the blocking and the asyncio stream wrappers share: the call, its rebuilder, the cancel.

Only the waiting differs between the two (a blocking `next` or an awaited `read`), so everything
else lives here once, including the one judgement both make: a CANCELLED end of the call is a clean
end only when this side asked for it.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

import grpc
from execpods.client.model import Snapshot, StreamUpdate
from execpods.client.rebuild import SnapshotRebuilder
from execpods.v1 import allocator_pb2 as pb


class CancellableCall(Protocol):
    def cancel(self) -> bool:
        """Cancel the RPC; False when it had already ended."""


CallT = TypeVar("CallT", bound=CancellableCall)


class DecodedCall(Generic[CallT]):
    """A `StreamSnapshots` call whose messages are decoded into complete snapshots."""

    def __init__(self, call: CallT) -> None:
        self._call = call
        self._rebuilder = SnapshotRebuilder()
        self._cancelled = False

    @property
    def current(self) -> Snapshot | None:
        """The newest complete snapshot received so far; None before the first message."""
        return self._rebuilder.current

    def cancel(self) -> None:
        """Ends the call; a reader waiting for the next update stops iterating."""
        self._cancelled = True
        self._call.cancel()

    def _ended_by_us(self) -> bool:
        # A method, not the bare flag: `cancel()` may run while a read is awaited, and a type
        # checker would otherwise narrow the flag across that await and call the check dead.
        return self._cancelled

    def _is_our_cancel(self, error: grpc.RpcError) -> bool:
        return self._ended_by_us() and error.code() == grpc.StatusCode.CANCELLED

    def _decode(self, message: pb.StreamSnapshotsResponse) -> StreamUpdate:
        return self._rebuilder.apply(message)
