"""The removal channel: every removal the lifecycle manager reports, numbered once, to each stream.

A driver's stream can break (a network blip, a proxy timeout, the driver's own restart) while the
lifecycle manager goes on deciding removals. Snapshots need no history (the next full snapshot
says everything), but a removal is an event: one the driver missed is lost for good. So the
channel, the lifecycle manager's one `LifecycleObserver`, numbers every removal of this process
and keeps the newest `window` of them beside the backend. Each stream (`ExecutorPodsBackend.
open_stream`) starts at a `Position` (this process's incarnation and the sequence number of the
last removal it has), and gets exactly the removals after it, each once, in order.

What a resume position can be, and what the stream then gets:

- **Of this process, within the window** (the removal after it is still kept, or none came since):
  the removals after it; no re-sync.
- **Of this process, older than the window**: some removals are gone; the stream is flagged
  `resync` and still gets every removal kept after the position.
- **Of another process** (a different incarnation: the process was restarted): the old process's
  sequence means nothing here; flagged `resync`, and every removal this process kept is sent.
- **Of this process, beyond its newest removal**: it was never sent, so the client is confused
  about which process it talks to or corrupted its state: `InvalidPosition`, rather than a silent
  re-sync that would hide the bug.

A stream's listener gets its backlog and is registered under the same lock as the numbering, and
each removal goes to the listeners registered when it was numbered, so a removal is either in the
backlog or delivered live, never both and never neither. The application's failure goes to every
stream too, once, at once to a stream opened after it. The channel also hands each round and each
removal to the caller's observers (tests' recorders); the driver view hears of a removal only as
the lifecycle manager's `DriverView`, once.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from execpods.core.ports import ExecutorRemoval, LifecycleObserver, RoundObserver
from execpods.core.snapshot import ExecutorPodsSnapshot

logger = logging.getLogger(__name__)


class InvalidPosition(ValueError):
    """A resume position this process never gave out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """A stream's place in one process's sequence of removals."""

    incarnation: str
    sequence: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NumberedRemoval:
    """One removal with its sequence number in this process."""

    sequence: int
    removal: ExecutorRemoval


RemovalListener = Callable[[NumberedRemoval], None]
FailureListener = Callable[[str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Opened:
    """What a stream starts from: where it stands, what it missed, and whether to re-sync."""

    start: Position
    backlog: tuple[NumberedRemoval, ...]
    resync: bool
    cancel: Callable[[], None]


class RemovalChannel:
    """The lifecycle manager's observer: numbers its removals, keeps the newest `window`, and
    hands each to every open stream; `open` may be called from any thread."""

    def __init__(
        self,
        *,
        window: int,
        incarnation: str | None = None,
        observers: Sequence[LifecycleObserver] = (),
        round_observers: Sequence[RoundObserver] = (),
    ) -> None:
        if window < 1:
            raise ValueError(f"window={window} is invalid: it must be positive")
        self.incarnation = incarnation if incarnation is not None else uuid.uuid4().hex
        self._observers = tuple(observers)
        self._round_observers = (*round_observers, *observers)
        self._lock = threading.Lock()
        self._entries: deque[NumberedRemoval] = deque(maxlen=window)
        self._sequence = 0
        self._listeners: tuple[tuple[RemovalListener, FailureListener | None], ...] = ()
        self._failure: str | None = None

    @property
    def sequence(self) -> int:
        """The sequence number of the newest removal (0 before the first)."""
        return self._sequence

    # LifecycleObserver (the lifecycle manager's thread).

    def round_started(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        for observer in self._round_observers:
            try:
                observer.round_started(snapshots)
            except Exception:
                logger.exception("Observer %r failed on a round", observer)

    def executor_removed(self, removal: ExecutorRemoval) -> None:
        for observer in self._observers:
            try:
                observer.executor_removed(removal)
            except Exception:
                logger.exception("Observer %r failed on a removal", observer)
        with self._lock:
            self._sequence += 1
            entry = NumberedRemoval(sequence=self._sequence, removal=removal)
            self._entries.append(entry)
            listeners = self._listeners
        for listener, _ in listeners:
            try:
                listener(entry)
            except Exception:
                logger.exception("A stream failed on removal %d", entry.sequence)

    def application_failed(self, message: str) -> None:
        for observer in self._observers:
            try:
                observer.application_failed(message)
            except Exception:
                logger.exception("Observer %r failed on the application's failure", observer)
        with self._lock:
            self._failure = message
            listeners = self._listeners
        for _, on_failure in listeners:
            if on_failure is None:
                continue
            try:
                on_failure(message)
            except Exception:
                logger.exception("A stream failed on the application's failure")

    # Streams.

    def open(
        self,
        resume_from: Position | None,
        listener: RemovalListener,
        on_failure: FailureListener | None = None,
    ) -> Opened:
        """Hand `listener` the removals after `resume_from` kept in the window (the backlog),
        then every later removal, in sequence order; `on_failure` hears the application's failure
        (at once if it already failed). Returns where the stream starts.

        Raises `InvalidPosition` (registering nothing) for a position of this process beyond its
        newest removal.
        """
        registered = (listener, on_failure)
        with self._lock:
            start, backlog, resync = self._backlog_locked(resume_from)
            # Handed over before the listener is registered, under the lock: no live removal
            # can overtake the backlog.
            for entry in backlog:
                listener(entry)
            self._listeners = (*self._listeners, registered)
            failure = self._failure
        if failure is not None and on_failure is not None:
            on_failure(failure)  # a stream opened after the failure

        def cancel() -> None:
            with self._lock:
                self._listeners = tuple(x for x in self._listeners if x is not registered)

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
