"""Resumable streams: every removal decision numbered once, and a bounded window of them kept.

A driver's stream can break (a network blip, a proxy timeout, the driver's own restart) while the
lifecycle manager goes on deciding removals. Snapshots need no history (the next full snapshot
says everything), but a removal is an event: one the driver missed is lost for good. So the
sidecar numbers every removal decision of its process (the `RemovalLog`, one of the lifecycle
manager's observers) and keeps the newest `execpods.sidecar.stream.removalWindow` of them. Every
stream message carries the position it has reached (the sidecar process's incarnation and the
sequence number of the last removal sent), and a stream opened with `resume_from` gets exactly the
removals after that position, each once.

What a position can be, and what the stream then does:

- **Of this process, within the window** (the removal after it is still kept, or none came since):
  the removals after it; no re-sync.
- **Of this process, older than the window**: some removals are gone; the stream is flagged
  `resync` and still gets every removal kept after the position.
- **Of another process** (a different incarnation: the sidecar was restarted): the old process's
  sequence means nothing here; flagged `resync`, and every removal this process kept is sent (the
  client heard none of them: they are this process's).
- **Of this process, beyond its newest removal**: it was never sent, so the client is confused
  about which sidecar it talks to or corrupted its state: `InvalidPosition` (INVALID_ARGUMENT),
  rather than a silent re-sync that would hide the bug.

A stream's listener gets its backlog and is registered under the same lock as the log appends,
and each removal is handed to the listeners registered when it was numbered, so a removal is
either in the backlog or delivered live, never both and never neither.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from execpods.core import ExecutorPodsSnapshot, ExecutorRemoval

logger = logging.getLogger(__name__)


class InvalidPosition(ValueError):
    """A `resume_from` position this sidecar never sent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """A stream's place in one sidecar process's sequence of removals."""

    incarnation: str
    sequence: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NumberedRemoval:
    """One removal decision with its sequence number in this sidecar process."""

    sequence: int
    removal: ExecutorRemoval


RemovalListener = Callable[[NumberedRemoval], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Opened:
    """What a stream starts from: where it stands, what it missed, and whether to re-sync."""

    start: Position
    backlog: tuple[NumberedRemoval, ...]
    resync: bool
    cancel: Callable[[], None]


class RemovalLog:
    """Numbers the lifecycle manager's removals and keeps the newest `window` of them.

    A `LifecycleObserver` (called on the lifecycle manager's thread); `open` may be called from
    any thread.
    """

    def __init__(self, *, window: int, incarnation: str | None = None) -> None:
        if window < 1:
            raise ValueError(f"window={window} is invalid: it must be positive")
        self.incarnation = incarnation if incarnation is not None else uuid.uuid4().hex
        self._lock = threading.Lock()
        self._entries: deque[NumberedRemoval] = deque(maxlen=window)
        self._sequence = 0
        self._listeners: tuple[RemovalListener, ...] = ()

    @property
    def sequence(self) -> int:
        """The sequence number of the newest removal (0 before the first)."""
        return self._sequence

    # LifecycleObserver.

    def round_started(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """Nothing to note: only removals are numbered."""

    def application_failed(self, message: str) -> None:
        """Nothing to note: streams hear of it from the backend."""

    def executor_removed(self, removal: ExecutorRemoval) -> None:
        with self._lock:
            self._sequence += 1
            entry = NumberedRemoval(sequence=self._sequence, removal=removal)
            self._entries.append(entry)
            listeners = self._listeners
        for listener in listeners:
            try:
                listener(entry)
            except Exception:
                logger.exception("A stream failed on removal %d", entry.sequence)

    # Streams.

    def open(self, resume_from: Position | None, listener: RemovalListener) -> Opened:
        """Hand `listener` the removals after `resume_from` kept in the window (the backlog),
        then every later removal, in sequence order; returns where the stream starts.

        Raises `InvalidPosition` (registering nothing) for a position of this process beyond its
        newest removal.
        """
        with self._lock:
            start, backlog, resync = self._backlog_locked(resume_from)
            # Handed over before the listener is registered, under the lock: no live removal
            # can overtake the backlog.
            for entry in backlog:
                listener(entry)
            self._listeners = (*self._listeners, listener)

        def cancel() -> None:
            with self._lock:
                self._listeners = tuple(x for x in self._listeners if x is not listener)

        return Opened(start=start, backlog=backlog, resync=resync, cancel=cancel)

    def _backlog_locked(
        self, resume_from: Position | None
    ) -> tuple[Position, tuple[NumberedRemoval, ...], bool]:
        newest = self._sequence
        if resume_from is None:  # a new stream: only what happens from now on
            return Position(incarnation=self.incarnation, sequence=newest), (), False
        if resume_from.incarnation != self.incarnation:
            return Position(incarnation=self.incarnation, sequence=0), tuple(self._entries), True
        after = resume_from.sequence
        if after > newest:
            raise InvalidPosition(
                f"resume_from.sequence={after} is beyond this sidecar's newest removal ({newest}): "
                "it was never sent; resume from a position the sidecar sent, or omit resume_from"
            )
        backlog = tuple(e for e in self._entries if e.sequence > after)
        oldest_kept = self._entries[0].sequence if self._entries else newest + 1
        missed = oldest_kept > after + 1 and after < newest
        return resume_from, backlog, missed
