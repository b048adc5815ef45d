"""One stream's messages: its pending snapshots, removals and notices, and its position.

Removals reach a stream numbered (the backend's removal channel, `execpods.core.removals`), in
order, and every message carries the stream's position after it (`StreamCursor`): the incarnation
of this sidecar process and the sequence number of the last removal sent, which a client resumes
from. The snapshots in a
message are the `EncodingCache`'s shared bytes (`encoding.py`): a stream serializes only its own
removals, notices, failure and position.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from execpods.core import NumberedRemoval, Position
from execpods.sidecar.stream.encoding import (
    EncodedSnapshot,
    SnapshotEncoder,
    encode_notice,
    encode_removal,
)
from execpods.sidecar.stream.feed import Pending
from execpods.v1 import allocator_pb2 as pb

logger = logging.getLogger(__name__)


class StreamCursor:
    """One stream's position: advanced past each removal as it goes into a message."""

    __slots__ = ("_incarnation", "_resync", "_sequence")

    def __init__(self, start: Position, *, resync: bool = False) -> None:
        self._incarnation = start.incarnation
        self._sequence = start.sequence
        self._resync = resync

    @property
    def position(self) -> Position:
        return Position(incarnation=self._incarnation, sequence=self._sequence)

    def stamp(
        self, message: pb.StreamSnapshotsResponse, removals: Sequence[NumberedRemoval]
    ) -> pb.StreamSnapshotsResponse:
        """Set `message`'s position (after `removals`, which it carries) and the re-sync flag."""
        if removals:
            self._sequence = removals[-1].sequence
        message.position.incarnation = self._incarnation
        message.position.sequence = self._sequence
        if self._resync:
            message.resync = True
            self._resync = False
        return message


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One serialized `StreamSnapshotsResponse` still in its parts: the shared snapshot frames,
    then this stream's own fields. `join` makes the stream's own copy, done only when the message
    is sent (after waiting for the send budget: `sendbudget.py`), so a waiting stream holds
    references to shared bytes, not a megabyte of its own."""

    parts: tuple[bytes, ...]

    @property
    def size(self) -> int:
        return sum(len(part) for part in self.parts)

    def join(self) -> bytes:
        return b"".join(self.parts)


def _frame(snapshots: Sequence[EncodedSnapshot], rest: pb.StreamSnapshotsResponse) -> Outgoing:
    """A `StreamSnapshotsResponse`: the shared snapshot frames, then this stream's own fields
    (`rest` has no snapshots)."""
    return Outgoing((*(s.frame for s in snapshots), rest.SerializeToString()))


def build_response(
    encoder: SnapshotEncoder, pending: Pending, *, first: bool, cursor: StreamCursor
) -> list[Outgoing]:
    """The messages for what is pending: one, or two when the first message must stand alone.

    The first message of a stream holds exactly one snapshot, the current one, in full; when later
    snapshots arrived with it, they and the removals go into a second message. Each message
    carries the stream's position after it. The snapshots are the cache's shared bytes: a stream
    serializes only its removals, notices, failure and position.
    """
    snapshots = pending.snapshots
    removed = [encode_removal(r.removal) for r in pending.removals]
    notices = [encode_notice(n) for n in pending.notices]
    if pending.dropped:
        logger.warning(
            "A stream fell %d snapshots behind; sending it the latest in full.", pending.dropped
        )
        encoder.reset()
    failure = pending.application_failure
    if first and len(snapshots) > 1:
        head = cursor.stamp(pb.StreamSnapshotsResponse(), ())
        rest = pb.StreamSnapshotsResponse(
            removed_executors=removed, application_failure=failure, allocator_notices=notices
        )
        return [
            _frame([encoder.encode(snapshots[0])], head),
            _frame(
                [encoder.encode(s) for s in snapshots[1:]], cursor.stamp(rest, pending.removals)
            ),
        ]
    message = pb.StreamSnapshotsResponse(
        removed_executors=removed, application_failure=failure, allocator_notices=notices
    )
    return [_frame([encoder.encode(s) for s in snapshots], cursor.stamp(message, pending.removals))]
