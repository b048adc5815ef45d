"""Turns the stream's full and delta messages back into the sequence of complete snapshots.

The sidecar sends each snapshot either in full or as a delta against the previous snapshot of the
same stream (only the executors whose state changed; a delta never removes executors). That saves
bandwidth on a large application, but a delta means nothing on its own, so the rebuilder keeps the
previous snapshot and overlays each delta on it. Callers then only ever see complete snapshots.
"""

from __future__ import annotations

from execpods.client.convert import executor_from_proto, notice_from_proto, removal_from_proto
from execpods.client.model import Snapshot, StreamPosition, StreamUpdate
from execpods.v1 import allocator_pb2 as pb


class StreamProtocolError(ValueError):
    """The stream broke the contract: a delta arrived before any full snapshot to apply it to."""


class SnapshotRebuilder:
    """Rebuilds complete snapshots from one stream's messages, in order. One per stream.

    Not thread-safe: a stream is consumed by one reader, in order, and so is its rebuilder.
    """

    __slots__ = ("_current",)

    def __init__(self) -> None:
        self._current: Snapshot | None = None

    @property
    def current(self) -> Snapshot | None:
        """The newest complete snapshot rebuilt so far; None before the first one."""
        return self._current

    def apply_snapshot(self, message: pb.ExecutorPodsSnapshot) -> Snapshot:
        """The complete snapshot `message` stands for; it becomes the base of the next delta."""
        changed = {i: executor_from_proto(s) for i, s in message.executor_pods.items()}
        if message.full:
            executors = changed
        elif self._current is None:
            raise StreamProtocolError(
                "received a delta snapshot before any full one; the first snapshot of a stream "
                "must be full"
            )
        else:
            executors = {**self._current.executors, **changed}
        snapshot = Snapshot(
            executors=executors,
            full_snapshot_ts_ms=message.full_snapshot_ts_ms,
            was_full=message.full,
        )
        self._current = snapshot
        return snapshot

    def apply(self, message: pb.StreamSnapshotsResponse) -> StreamUpdate:
        """Decodes one stream message: its snapshots rebuilt in order, and its removals."""
        position = (
            StreamPosition(
                incarnation=message.position.incarnation, sequence=message.position.sequence
            )
            if message.HasField("position")
            else None
        )
        return StreamUpdate(
            snapshots=tuple(self.apply_snapshot(s) for s in message.snapshots),
            removed=tuple(removal_from_proto(r) for r in message.removed_executors),
            notices=tuple(notice_from_proto(n) for n in message.allocator_notices),
            position=position,
            resync=message.resync,
            application_failure=message.application_failure,
        )
