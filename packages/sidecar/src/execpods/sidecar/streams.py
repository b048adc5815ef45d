"""StreamSnapshots plumbing: from a store subscriber's thread to one gRPC stream's messages.

A `StreamFeed` is what one stream subscribes with. The store calls it on a scheduler thread with a
batch of snapshots; the driver view calls it on the lifecycle manager's thread with a removal.
Both only append to the feed's pending lists under a lock and wake the stream's coroutine with
`loop.call_soon_threadsafe`, so no thread ever waits on a slow client, and everything that
arrived while the stream was busy goes out in the next message. A removal is held back until the
stream has the snapshot the lifecycle manager decided it on (the removal's `seen_serial`), so a
driver never hears that an executor is gone before it can see why. A stream whose client reads
slowly (gRPC flow control holds its writes) never holds up the store or other streams: its feed
keeps only the newest `max_pending` snapshots (execpods.sidecar.stream.maxPendingSnapshots), and
the first one it sends after dropping older ones goes in full, since it no longer derives from
what the stream sent (the contract allows a full snapshot at any point).

`SnapshotEncoder` turns a stream's snapshots into messages: the first snapshot of a stream and
every snapshot made from a full list go whole (`full = true`); any other carries only the
executors that changed since the stream's previous snapshot (`ExecutorPodsSnapshot.changes_since`).
The stream therefore costs what changed, not executors x snapshots. Encoded snapshots are cached
by (snapshot, previous snapshot): every stream on the same delta chain shares one encoding.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from execpods.core import (
    ContainerTerminated,
    ContainerWaiting,
    ExecutorPodsSnapshot,
    PodState,
)
from execpods.core import ExecutorPodState as CorePodState
from execpods.core.lifecycle import EXECUTOR_CONTAINER_NAME
from execpods.sidecar.driver_view import Removal
from execpods.v1 import allocator_pb2 as pb

logger = logging.getLogger(__name__)

_STATES = {
    PodState.PENDING: pb.ExecutorPodState.STATE_PENDING,
    PodState.RUNNING: pb.ExecutorPodState.STATE_RUNNING,
    PodState.SUCCEEDED: pb.ExecutorPodState.STATE_SUCCEEDED,
    PodState.FAILED: pb.ExecutorPodState.STATE_FAILED,
    PodState.DELETED: pb.ExecutorPodState.STATE_DELETED,
    PodState.UNKNOWN: pb.ExecutorPodState.STATE_UNKNOWN,
}


def encode_state(state: CorePodState) -> pb.ExecutorPodState:
    """One executor's state as the contract spells it."""
    message = pb.ExecutorPodState()
    fill_state(message, state)
    return message


def fill_state(message: pb.ExecutorPodState, state: CorePodState) -> None:
    pod = state.pod
    message.state = _STATES[state.state]
    message.pod_name = pod.name
    message.phase = pod.phase or ""
    message.reason = pod.reason or ""
    message.message = pod.message or ""
    message.node_name = pod.node_name or ""
    message.pod_ip = pod.pod_ip or ""
    code = pod.terminated_exit_code(EXECUTOR_CONTAINER_NAME)
    if code is None:
        code = pod.terminated_exit_code()
    if code is not None:
        message.exit_code = code
    statuses = pod.container_statuses
    chosen = next((s for s in statuses if s.name == EXECUTOR_CONTAINER_NAME), None)
    if chosen is None and statuses:
        chosen = statuses[0]
    container = None if chosen is None else chosen.state
    if isinstance(container, ContainerWaiting | ContainerTerminated) and container.reason:
        message.container_reason = container.reason


def encode_removal(removal: Removal) -> pb.ExecutorRemoved:
    reason = removal.reason
    return pb.ExecutorRemoved(
        executor_id=removal.executor_id,
        exit_code=reason.exit_code,
        exit_caused_by_app=reason.exit_caused_by_app,
        message=reason.message,
    )


class EncodingCache:
    """Encoded snapshots by (serial, previous serial or None for full): shared by all streams.

    Used only from the event loop's thread, so it needs no lock.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[int, int | None], pb.ExecutorPodsSnapshot] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(
        self, snapshot: ExecutorPodsSnapshot, previous: ExecutorPodsSnapshot | None
    ) -> pb.ExecutorPodsSnapshot:
        changed = snapshot.changes_since(previous)
        key = (snapshot.serial, None if changed is None or previous is None else previous.serial)
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return found
        self.misses += 1
        encoded = _encode_snapshot(snapshot, None if changed is None else previous, changed)
        self._entries[key] = encoded
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return encoded


def _encode_snapshot(
    snapshot: ExecutorPodsSnapshot,
    previous: ExecutorPodsSnapshot | None,
    changed: frozenset[int] | None,
) -> pb.ExecutorPodsSnapshot:
    """`snapshot` in full (`changed` None), or as a delta against its parent `previous`.

    A delta holds only the executors whose state *as the contract spells it* changed: a pod event
    that touched nothing the client can see (a label, a condition, the resource version) is in
    `changed` but not on the wire.
    """
    full = changed is None or previous is None
    message = pb.ExecutorPodsSnapshot(
        full_snapshot_ts_ms=round(snapshot.full_snapshot_ts * 1000), full=full
    )
    pods = snapshot.executor_pods
    target = message.executor_pods
    if changed is None or previous is None:
        for executor_id, state in pods.items():
            fill_state(target[executor_id], state)
        return message
    before = previous.executor_pods
    for executor_id in changed:
        now = pods.get(executor_id)
        if now is None:  # a delta never removes executors
            continue
        old = before.get(executor_id)
        if old is now:
            continue
        encoded = encode_state(now)
        if old is not None and encode_state(old) == encoded:
            continue
        target[executor_id].CopyFrom(encoded)
    return message


class SnapshotEncoder:
    """One stream's delta state: the previous snapshot it sent."""

    def __init__(self, cache: EncodingCache) -> None:
        self._cache = cache
        self._previous: ExecutorPodsSnapshot | None = None

    def reset(self) -> None:
        """Send the next snapshot in full (after snapshots were dropped)."""
        self._previous = None

    def encode(self, snapshot: ExecutorPodsSnapshot) -> pb.ExecutorPodsSnapshot:
        encoded = self._cache.get(snapshot, self._previous)
        self._previous = snapshot
        return encoded


@dataclass(slots=True)
class Pending:
    """What a stream has to send next."""

    snapshots: list[ExecutorPodsSnapshot] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    dropped: int = 0


class StreamFeed:
    """One stream's inbox: filled from any thread, drained by the stream's coroutine."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, max_pending: int) -> None:
        self._loop = loop
        self._max_pending = max_pending
        self._lock = threading.Lock()
        self._pending = Pending()
        self._held: list[Removal] = []
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
            if self._held:
                ready = [r for r in self._held if r.seen_serial <= self._newest_serial]
                self._held = [r for r in self._held if r.seen_serial > self._newest_serial]
                pending.removals.extend(ready)
            excess = len(pending.snapshots) - self._max_pending
            if excess > 0:
                pending.dropped += excess
                del pending.snapshots[:excess]
        self._wake()

    def on_removal(self, removal: Removal) -> None:
        """The driver view's listener (the lifecycle manager's thread)."""
        with self._lock:
            if removal.seen_serial > self._newest_serial:
                self._held.append(removal)
                return
            self._pending.removals.append(removal)
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


def build_response(
    encoder: SnapshotEncoder, pending: Pending, *, first: bool
) -> list[pb.StreamSnapshotsResponse]:
    """The messages for what is pending: one, or two when the first message must stand alone.

    The first message of a stream holds exactly the current snapshot, in full; anything that
    arrived with it goes into a second message.
    """
    snapshots = pending.snapshots
    removed = [encode_removal(r) for r in pending.removals]
    if pending.dropped:
        logger.warning(
            "A stream fell %d snapshots behind; sending it the latest in full.", pending.dropped
        )
        encoder.reset()
    if first and len(snapshots) > 1:
        head = pb.StreamSnapshotsResponse(snapshots=[encoder.encode(snapshots[0])])
        rest = pb.StreamSnapshotsResponse(
            snapshots=[encoder.encode(s) for s in snapshots[1:]], removed_executors=removed
        )
        return [head, rest]
    return [
        pb.StreamSnapshotsResponse(
            snapshots=[encoder.encode(s) for s in snapshots], removed_executors=removed
        )
    ]
