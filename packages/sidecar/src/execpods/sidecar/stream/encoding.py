"""Snapshots as the contract spells them, encoded once for all streams.

`SnapshotEncoder` turns a stream's snapshots into messages: the first snapshot of a stream and
every snapshot made from a full list go whole (`full = true`); any other carries only the
executors that changed since the stream's previous snapshot (`ExecutorPodsSnapshot.changes_since`).
The stream therefore costs what changed, not executors x snapshots. Encoded snapshots are cached
as serialized bytes by (snapshot, previous snapshot), in one `EncodingCache` for all streams: every
stream on the same delta chain, and every stream that needs the same snapshot in full (a new
stream, one that fell behind), shares one encoding, and a stream's message is those bytes followed
by its own few serialized fields (`messages.py`). Serializing a ~1 MB full snapshot once per stream
on the event loop is what made 100 streams of 10,000 executors slow every other call. Streams that
open in a burst each need a different snapshot in full (the store moves on between them), so a
full encoding also reuses the serialized entry of every executor whose state object is the one the
previous full encoding saw: a full snapshot costs what changed since, plus a join.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

from execpods.core import (
    INT64_MAX,
    AllocatorNotice,
    ContainerTerminated,
    ContainerWaiting,
    ExecutorPodsSnapshot,
    ExecutorRemoval,
    ExecutorState,
    NoticeKind,
    ObservedPod,
    PendingReason,
    waiting_for,
)
from execpods.v1 import allocator_pb2 as pb

logger = logging.getLogger(__name__)

_NOTICE_KINDS = {
    NoticeKind.CREATE_REFUSED: pb.AllocatorNotice.KIND_CREATE_REFUSED,
    NoticeKind.CREATE_THROTTLED: pb.AllocatorNotice.KIND_CREATE_THROTTLED,
    NoticeKind.CREATE_FAILED: pb.AllocatorNotice.KIND_CREATE_FAILED,
    NoticeKind.ALLOCATION_MAXIMUM_REACHED: pb.AllocatorNotice.KIND_ALLOCATION_MAXIMUM_REACHED,
    NoticeKind.ID_RESERVATION_FAILED: pb.AllocatorNotice.KIND_ID_RESERVATION_FAILED,
    NoticeKind.RECOVERY_MODE: pb.AllocatorNotice.KIND_RECOVERY_MODE,
    NoticeKind.NODE_BLOCKED: pb.AllocatorNotice.KIND_NODE_BLOCKED,
    NoticeKind.NODE_UNBLOCKED: pb.AllocatorNotice.KIND_NODE_UNBLOCKED,
    NoticeKind.QUOTA_EXCEEDED: pb.AllocatorNotice.KIND_QUOTA_EXCEEDED,
    NoticeKind.QUOTA_CAP_LIFTED: pb.AllocatorNotice.KIND_QUOTA_CAP_LIFTED,
    NoticeKind.ADMISSION_POLICY_REFUSED: pb.AllocatorNotice.KIND_ADMISSION_POLICY_REFUSED,
    NoticeKind.PENDING_TIMEOUT: pb.AllocatorNotice.KIND_PENDING_TIMEOUT,
    NoticeKind.CRASH_LOOP_PAUSED: pb.AllocatorNotice.KIND_CRASH_LOOP_PAUSED,
    NoticeKind.CRASH_LOOP_RESUMED: pb.AllocatorNotice.KIND_CRASH_LOOP_RESUMED,
    NoticeKind.FAILURE_RULE: pb.AllocatorNotice.KIND_FAILURE_RULE,
    NoticeKind.ALLOCATION_STALLED: pb.AllocatorNotice.KIND_ALLOCATION_STALLED,
    NoticeKind.ALLOCATION_RESUMED: pb.AllocatorNotice.KIND_ALLOCATION_RESUMED,
    NoticeKind.ID_LEDGER_DISTRUSTED: pb.AllocatorNotice.KIND_ID_LEDGER_DISTRUSTED,
}

_PENDING_REASONS = {
    PendingReason.UNSCHEDULABLE: pb.PendingReason.PENDING_REASON_UNSCHEDULABLE,
    PendingReason.SCHEDULING_GATED: pb.PendingReason.PENDING_REASON_SCHEDULING_GATED,
    PendingReason.IMAGE_PULL: pb.PendingReason.PENDING_REASON_IMAGE_PULL,
    PendingReason.CONTAINER_CONFIG: pb.PendingReason.PENDING_REASON_CONTAINER_CONFIG,
    PendingReason.CRASH_LOOP: pb.PendingReason.PENDING_REASON_CRASH_LOOP,
    PendingReason.FAILED_MOUNT: pb.PendingReason.PENDING_REASON_FAILED_MOUNT,
}

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
    pending_reason: pb.PendingReason.ValueType
    pending_message: str


def _visible(observed: ObservedPod) -> _Visible:
    pod = observed.pod
    chosen = observed.executor_container()
    container = None if chosen is None else chosen.state
    container_reason = (
        container.reason
        if isinstance(container, ContainerWaiting | ContainerTerminated) and container.reason
        else ""
    )
    why = waiting_for(observed)
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
        pending_reason=(
            pb.PendingReason.PENDING_REASON_UNSPECIFIED
            if why is None
            else _PENDING_REASONS.get(why.reason, pb.PendingReason.PENDING_REASON_UNSPECIFIED)
        ),
        pending_message="" if why is None else why.describe(),
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
    message.pending_reason = visible.pending_reason
    message.pending_message = visible.pending_message


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


def encode_notice(notice: AllocatorNotice) -> pb.AllocatorNotice:
    return pb.AllocatorNotice(
        kind=_NOTICE_KINDS[notice.kind],
        message=notice.message,
        resource_profile_id=notice.resource_profile_id,
        count=notice.count,
        retry_in_ms=round(notice.retry_in * 1000),
        reason=notice.reason,
    )
