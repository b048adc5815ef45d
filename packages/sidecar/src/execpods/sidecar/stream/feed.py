"""One stream's inbox: from the store's and the lifecycle manager's threads to its coroutine.

A `StreamFeed` is what one stream subscribes with. The store calls it on a scheduler thread with a
batch of snapshots; the backend's removal channel calls it on the lifecycle manager's thread with
a numbered removal. Both only append to the feed's pending lists under a lock and wake the stream's
coroutine with `loop.call_soon_threadsafe`, so no thread ever waits on a slow client, and
everything that arrived while the stream was busy goes out in the next message. A removal is held
back until the stream has the snapshot the lifecycle manager decided it on (the removal's
`snapshot_serial`), so a driver never hears that an executor is gone before it can see why. A
stream whose client reads slowly (gRPC flow control holds its writes) never holds up the store or
other streams: its feed keeps only the newest `max_pending` snapshots
(execpods.sidecar.stream.maxPendingSnapshots), and the first one it sends after dropping older ones
goes in full, since it no longer derives from what the stream sent (the contract allows a full
snapshot at any point).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from execpods.core import AllocatorNotice, ExecutorPodsSnapshot, NumberedRemoval

logger = logging.getLogger(__name__)


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
