"""StreamSnapshots plumbing: from a store subscriber's thread to one gRPC stream's messages.

A `StreamFeed` is what one stream subscribes with. The store calls it on a scheduler thread with a
batch of snapshots; the backend calls it on the lifecycle manager's thread with a removal.
Both only append to the feed's pending lists under a lock and wake the stream's coroutine with
`loop.call_soon_threadsafe`, so no thread ever waits on a slow client, and everything that
arrived while the stream was busy goes out in the next message. A removal is held back until the
stream has the snapshot the lifecycle manager decided it on (the removal's `snapshot_serial`), so a
driver never hears that an executor is gone before it can see why. A stream whose client reads
slowly (gRPC flow control holds its writes) never holds up the store or other streams: its feed
keeps only the newest `max_pending` snapshots (execpods.sidecar.stream.maxPendingSnapshots), and
the first one it sends after dropping older ones goes in full, since it no longer derives from
what the stream sent (the contract allows a full snapshot at any point).

`SnapshotEncoder` turns a stream's snapshots into messages: the first snapshot of a stream and
every snapshot made from a full list go whole (`full = true`); any other carries only the
executors that changed since the stream's previous snapshot (`ExecutorPodsSnapshot.changes_since`).
The stream therefore costs what changed, not executors x snapshots. Encoded snapshots are cached
as serialized bytes by (snapshot, previous snapshot), in one `EncodingCache` for all streams: every
stream on the same delta chain, and every stream that needs the same snapshot in full (a new
stream, one that fell behind), shares one encoding, and a stream's message is those bytes followed
by its own few serialized fields. Serializing a ~1 MB full snapshot once per stream on the event
loop is what made 100 streams of 10,000 executors slow every other call. Streams that open in a
burst each need a different snapshot in full (the store moves on between them), so a full
encoding also reuses the serialized entry of every executor whose state object is the one the
previous full encoding saw: a full snapshot costs what changed since, plus a join.

Removals reach a feed numbered (`execpods.sidecar.resume.RemovalLog`), in order, and every message
carries the stream's position after it (`StreamCursor`): the incarnation of this sidecar process
and the sequence number of the last removal sent, which a client resumes from.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from execpods.core import (
    INT64_MAX,
    AllocatorNotice,
    ContainerTerminated,
    ContainerWaiting,
    ExecutorPodsSnapshot,
    ExecutorRemoval,
    ExecutorState,
    ObservedPod,
)
from execpods.sidecar.profiles import encode_notice
from execpods.sidecar.resume import NumberedRemoval, Position
from execpods.v1 import allocator_pb2 as pb

logger = logging.getLogger(__name__)

_STATES = {
    ExecutorState.PENDING: pb.ExecutorState.STATE_PENDING,
    ExecutorState.RUNNING: pb.ExecutorState.STATE_RUNNING,
    ExecutorState.TERMINATING: pb.ExecutorState.STATE_TERMINATING,
    ExecutorState.SUCCEEDED: pb.ExecutorState.STATE_SUCCEEDED,
    ExecutorState.FAILED: pb.ExecutorState.STATE_FAILED,
    ExecutorState.DELETED: pb.ExecutorState.STATE_DELETED,
    ExecutorState.UNKNOWN: pb.ExecutorState.STATE_UNKNOWN,
}


class _Visible(NamedTuple):
    """What the contract shows of one executor's state: the fields of `pb.ObservedPod`."""

    state: pb.ExecutorState.ValueType
    pod_name: str
    phase: str
    reason: str
    message: str
    node_name: str
    pod_ip: str
    exit_code: int | None
    container_reason: str


def _visible(observed: ObservedPod) -> _Visible:
    pod = observed.pod
    chosen = observed.executor_container()
    container = None if chosen is None else chosen.state
    container_reason = (
        container.reason
        if isinstance(container, ContainerWaiting | ContainerTerminated) and container.reason
        else ""
    )
    return _Visible(
        state=_STATES[observed.state],
        pod_name=pod.name,
        phase=pod.phase or "",
        reason=pod.reason or "",
        message=pod.message or "",
        node_name=pod.node_name or "",
        pod_ip=pod.pod_ip or "",
        exit_code=observed.exit_code(),
        container_reason=container_reason,
    )


def _fill(message: pb.ObservedPod, visible: _Visible) -> None:
    message.state = visible.state
    message.pod_name = visible.pod_name
    message.phase = visible.phase
    message.reason = visible.reason
    message.message = visible.message
    message.node_name = visible.node_name
    message.pod_ip = visible.pod_ip
    if visible.exit_code is not None:
        message.exit_code = visible.exit_code
    message.container_reason = visible.container_reason


def encode_state(observed: ObservedPod) -> pb.ObservedPod:
    """One executor's observed pod as the contract spells it."""
    message = pb.ObservedPod()
    _fill(message, _visible(observed))
    return message


def encode_removal(removal: ExecutorRemoval) -> pb.ExecutorRemoved:
    reason = removal.reason
    return pb.ExecutorRemoved(
        executor_id=removal.executor_id,
        exit_code=reason.exit_code,
        exit_caused_by_app=reason.exit_caused_by_app,
        message=reason.message,
        killed_by_driver=reason.killed_by_driver,
    )


_SNAPSHOTS_TAG = b"\x0a"
"""`StreamSnapshotsResponse.snapshots` (field 1, length-delimited) as it opens each entry."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedSnapshot:
    """One snapshot serialized once, framed as an entry of `StreamSnapshotsResponse.snapshots`.

    A response is its snapshots' frames followed by the serialized rest of the message (fields
    2 and up), which is byte for byte what protobuf writes for the whole message, since it writes
    fields in number order: so every stream sends the shared bytes and serializes only its own
    small part (removals, notices, position).
    """

    full: bool
    frame: bytes

    @classmethod
    def of(cls, message: pb.ExecutorPodsSnapshot) -> EncodedSnapshot:
        return cls.of_payload(full=message.full, payload=message.SerializeToString())

    @classmethod
    def of_payload(cls, *, full: bool, payload: bytes) -> EncodedSnapshot:
        """From a serialized `pb.ExecutorPodsSnapshot`."""
        return cls(full=full, frame=_SNAPSHOTS_TAG + _varint(len(payload)) + payload)

    def decode(self) -> pb.ExecutorPodsSnapshot:
        """The message again (for tests and tools: streams send `frame`)."""
        return pb.StreamSnapshotsResponse.FromString(self.frame).snapshots[0]


class EncodingCache:
    """Encoded snapshots by (serial, previous serial or None for full): shared by all streams.

    Each snapshot is built and serialized once per (serial, parent) however many streams send it;
    `misses` counts those encodings. The newest entries are kept up to `max_bytes` in all (full
    snapshots of 10,000 executors are about a megabyte each) and `capacity` in number. Streams
    share an encoding within moments of each other (they are on the same delta chain, or a full
    list reaches all of them at once), so 8 MiB is plenty; a larger budget only held old full
    snapshots (32 MiB of them at 10,000 executors, which the load's resident memory showed). Used
    only from the event loop's thread, so it needs no lock.

    It also keeps, for the latest full encoding, each executor's serialized map entry with the
    state object it was made from (`entries`; `entry_misses` counts the entries serialized): the
    core's snapshots share unchanged executors' state objects, so the next full encoding
    serializes only the executors that changed and joins the rest.
    """

    def __init__(self, capacity: int = 4096, *, max_bytes: int = 8 << 20) -> None:
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[tuple[int, int | None], EncodedSnapshot] = OrderedDict()
        self._entries_by_id: dict[int, tuple[ObservedPod, bytes]] = {}
        self.hits = 0
        self.misses = 0
        self.entry_misses = 0

    @property
    def bytes_held(self) -> int:
        """The encoded bytes the cache keeps (at most `max_bytes`, or its one newest entry)."""
        return self._bytes

    def get(
        self, snapshot: ExecutorPodsSnapshot, previous: ExecutorPodsSnapshot | None
    ) -> EncodedSnapshot:
        """`snapshot` as a delta against `previous` when it derives from it, else in full."""
        changed = snapshot.changes_since(previous)
        parent = None if changed is None else previous  # changes_since is None without one
        key = (snapshot.serial, None if parent is None else parent.serial)
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return found
        self.misses += 1
        encoded = (
            self._encode_full(snapshot)
            if parent is None or changed is None
            else EncodedSnapshot.of(_encode_delta(snapshot, parent, changed))
        )
        self._entries[key] = encoded
        self._bytes += len(encoded.frame)
        while len(self._entries) > 1 and (
            len(self._entries) > self._capacity or self._bytes > self._max_bytes
        ):
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= len(evicted.frame)
        return encoded

    @property
    def entries(self) -> int:
        """How many executors' serialized entries are kept (those of the latest full encoding)."""
        return len(self._entries_by_id)

    def _encode_full(self, snapshot: ExecutorPodsSnapshot) -> EncodedSnapshot:
        # The map's entries (field 1), then the other fields, as protobuf writes them.
        parts: list[bytes] = []
        known = self._entries_by_id
        kept: dict[int, tuple[ObservedPod, bytes]] = {}
        for executor_id, state in snapshot.executor_pods.items():
            entry = known.get(executor_id)
            if entry is None or entry[0] is not state:
                if not _encodable(executor_id):
                    continue
                self.entry_misses += 1
                entry = (state, _encode_entry(executor_id, state))
            kept[executor_id] = entry
            parts.append(entry[1])
        self._entries_by_id = kept  # executors gone since are forgotten
        parts.append(_new_message(snapshot, full=True).SerializeToString())
        return EncodedSnapshot.of_payload(full=True, payload=b"".join(parts))


def _new_message(snapshot: ExecutorPodsSnapshot, *, full: bool) -> pb.ExecutorPodsSnapshot:
    return pb.ExecutorPodsSnapshot(
        full_snapshot_ts_ms=round(snapshot.full_snapshot_ts * 1000), full=full
    )


def _encodable(executor_id: int) -> bool:
    """Whether the contract's int64 map key can carry this id.

    The adapter and the core already skip pods whose id label is beyond 64 bits; this guard keeps
    one such pod from failing every stream (protobuf raises "Value out of range") should one ever
    get through another way.
    """
    if 0 <= executor_id <= INT64_MAX:
        return True
    logger.warning("Leaving executor id %d out of a stream message: beyond int64.", executor_id)
    return False


def _encode_entry(executor_id: int, state: ObservedPod) -> bytes:
    """One executor as a serialized `ExecutorPodsSnapshot` holding only it: its map entry,
    tag included, which is what a full snapshot's payload is made of."""
    message = pb.ExecutorPodsSnapshot()
    _fill(message.executor_pods[executor_id], _visible(state))
    return message.SerializeToString()


def _encode_delta(
    snapshot: ExecutorPodsSnapshot, parent: ExecutorPodsSnapshot, changed: frozenset[int]
) -> pb.ExecutorPodsSnapshot:
    """The executors of `changed` whose state *as the contract shows it* differs from `parent`.

    A pod event that touched nothing the client can see (a label, a condition, the resource
    version) is in `changed` but not on the wire. The comparison is on plain tuples: no message
    is built for an executor that is then left out.
    """
    message = _new_message(snapshot, full=False)
    target = message.executor_pods
    now_pods, before_pods = snapshot.executor_pods, parent.executor_pods
    for executor_id in changed:
        now = now_pods.get(executor_id)
        if now is None:  # a delta never removes executors
            continue
        old = before_pods.get(executor_id)
        if old is now:
            continue
        visible = _visible(now)
        if old is not None and _visible(old) == visible:
            continue
        if _encodable(executor_id):
            _fill(target[executor_id], visible)
    return message


class SnapshotEncoder:
    """One stream's delta state: the previous snapshot it sent."""

    def __init__(self, cache: EncodingCache) -> None:
        self._cache = cache
        self._previous: ExecutorPodsSnapshot | None = None

    def reset(self) -> None:
        """Send the next snapshot in full (after snapshots were dropped)."""
        self._previous = None

    def encode(self, snapshot: ExecutorPodsSnapshot) -> EncodedSnapshot:
        encoded = self._cache.get(snapshot, self._previous)
        self._previous = snapshot
        return encoded


@dataclass(slots=True)
class Pending:
    """What a stream has to send next."""

    snapshots: list[ExecutorPodsSnapshot] = field(default_factory=list)
    removals: list[NumberedRemoval] = field(default_factory=list)
    notices: list[AllocatorNotice] = field(default_factory=list)
    dropped: int = 0
    application_failure: str = ""

    def __bool__(self) -> bool:
        return bool(self.snapshots or self.removals or self.notices or self.application_failure)


class StreamFeed:
    """One stream's inbox: filled from any thread, drained by the stream's coroutine."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, max_pending: int) -> None:
        self._loop = loop
        self._max_pending = max_pending
        self._lock = threading.Lock()
        self._pending = Pending()
        self._held: list[NumberedRemoval] = []
        self._held_notices: list[AllocatorNotice] = []
        self._newest_serial = 0
        self._wakeup = asyncio.Event()
        self._closed = False

    def on_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """The store subscriber's callback (a scheduler thread)."""
        if not snapshots:
            return
        with self._lock:
            pending = self._pending
            pending.snapshots.extend(snapshots)
            self._newest_serial = max(self._newest_serial, *(s.serial for s in snapshots))
            if self._held_notices:
                pending.notices.extend(self._held_notices)
                self._held_notices = []
            if self._held:
                # Release in sequence order: a stream's position says every removal up to it
                # was sent, so a later removal may never overtake a held one.
                ready = 0
                for entry in self._held:
                    if entry.removal.snapshot_serial > self._newest_serial:
                        break
                    ready += 1
                pending.removals.extend(self._held[:ready])
                del self._held[:ready]
            excess = len(pending.snapshots) - self._max_pending
            if excess > 0:
                pending.dropped += excess
                del pending.snapshots[:excess]
        self._wake()

    def on_removal(self, entry: NumberedRemoval) -> None:
        """The removal log's callback (the lifecycle manager's thread; or the stream's own, for
        the backlog of a resumed stream).

        Held back until the stream has the snapshot it was decided on, and in any case until the
        stream's first snapshot, which must open the stream; never ahead of an earlier one.
        """
        with self._lock:
            if (
                self._held
                or not self._newest_serial
                or entry.removal.snapshot_serial > self._newest_serial
            ):
                self._held.append(entry)
                return
            self._pending.removals.append(entry)
        self._wake()

    def on_application_failed(self, message: str) -> None:
        """The backend's failure callback (the lifecycle manager's thread): sent once."""
        with self._lock:
            self._pending.application_failure = message
        self._wake()

    def on_notice(self, notice: AllocatorNotice) -> None:
        """The allocator's notice listener (its round's thread); held until the first snapshot."""
        with self._lock:
            if not self._newest_serial:
                self._held_notices.append(notice)
                return
            self._pending.notices.append(notice)
        self._wake()

    def close(self) -> None:
        """End the stream after it has sent what is pending (from any thread)."""
        self._closed = True
        self._wake()

    @property
    def closed(self) -> bool:
        return self._closed

    def take(self) -> Pending:
        """Everything pending, oldest first (from the stream's coroutine)."""
        self._wakeup.clear()
        with self._lock:
            taken, self._pending = self._pending, Pending()
        return taken

    async def wait(self) -> None:
        """Until something is pending or the feed is closed."""
        await self._wakeup.wait()

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._wakeup.set)
        except RuntimeError:
            # The loop is closed: the server is gone, and so is the stream.
            logger.debug("A stream's event loop is closed; dropping its wake-up.")


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
