"""What the blocking and the asyncio stream wrappers share: the call, its rebuilder, the cancel,
and the bookkeeping of reconnecting (the last position, the back-off, the driver's view).

Only the waiting differs between the two (a blocking `next` or an awaited `read`, a blocking or an
awaited sleep), so everything else lives here once, including the judgements both make: a
CANCELLED end of the call is a clean end only when this side asked for it, and only the codes of
the `Reconnect` policy are retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import grpc
from execpods.client.model import Snapshot, StreamUpdate
from execpods.client.rebuild import SnapshotRebuilder
from execpods.client.reconnect import Backoff, DriverViewMemory, Reconnect
from execpods.v1 import allocator_pb2 as pb

logger = logging.getLogger(__name__)


class CancellableCall(Protocol):
    def cancel(self) -> bool:
        """Cancel the RPC; False when it had already ended."""


CallT = TypeVar("CallT", bound=CancellableCall)

CallOpener = Callable[[pb.StreamPosition | None], CallT]
"""Opens a `StreamSnapshots` call resuming after a position (None: a new stream)."""


class DecodedCall(Generic[CallT]):
    """A `StreamSnapshots` call whose messages are decoded into complete snapshots, reopened
    from the last position after a retriable failure when a `Reconnect` policy is given."""

    def __init__(
        self,
        call: CallT,
        *,
        reopen: CallOpener[CallT] | None = None,
        reconnect: Reconnect | None = None,
        memory: DriverViewMemory | None = None,
    ) -> None:
        self._call = call
        self._reopen = reopen
        self._rebuilder = SnapshotRebuilder()
        self._cancelled = False
        self._backoff = Backoff(reconnect) if reconnect is not None and reopen else None
        self._memory = memory
        self._position: pb.StreamPosition | None = None
        self._view_pending = False
        self.reconnects = 0
        """How many times the stream was reopened."""

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

    def _retry_delay(self, error: grpc.RpcError) -> float | None:
        """Seconds to wait before reopening after `error`; None when it must be raised."""
        if self._backoff is None or self._ended_by_us():
            return None
        delay = self._backoff.next_delay(error)
        if delay is not None:
            logger.info(
                "The snapshot stream broke (%s); reconnecting in %.2f s.", error.code(), delay
            )
        return delay

    def _reopen_call(self) -> None:
        assert self._reopen is not None
        self._call = self._reopen(self._position)
        self.reconnects += 1
        self._view_pending = self._memory is not None and self._memory.request() is not None

    def _view_to_resend(self) -> pb.UpdateDriverExecutorsRequest | None:
        """The driver's view to re-send once the reopened stream delivers (then not again)."""
        if not self._view_pending or self._memory is None:
            return None
        self._view_pending = False
        return self._memory.request()

    def _decode(self, message: pb.StreamSnapshotsResponse) -> StreamUpdate:
        update = self._rebuilder.apply(message)
        if message.HasField("position"):
            self._position = pb.StreamPosition()
            self._position.CopyFrom(message.position)
        if self._memory is not None and update.removed:
            self._memory.note_removed(r.executor_id for r in update.removed)
        if self._backoff is not None:
            self._backoff.reset()
        return update
