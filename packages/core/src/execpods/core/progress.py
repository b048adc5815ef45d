"""Whether allocation can make progress: the one place any part says that it cannot.

A sidecar that answers its driver but cannot create a pod is worse than one that is down: the
driver waits on it, and a probe sees nothing wrong. So every part that finds allocation blocked
for a reason it cannot fix by itself (the id ledger unreadable, a worker thread dead, the API's
credentials refused) says so here, under a reason, and says again when it is over:

- `stall(reason, message)`: allocation cannot progress for `reason` (a CamelCase word, as
  Kubernetes' reasons); `message` names the object and what an operator can do;
- `resume(reason)`: that reason is over.

What a stall does is decided once, by whoever listens (`add_listener`): the backend turns each
change into an `AllocatorNotice` on every stream (`ALLOCATION_STALLED`, `ALLOCATION_RESUMED`;
a stream opened while stalled hears the current stalls first), and the sidecar reports gRPC
health NOT_SERVING while any stall is on, logs it and counts it in a metric. A part that stalls
keeps retrying by itself: the monitor only tells.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from execpods.core.ports import Clock

logger = logging.getLogger(__name__)

ID_LEDGER_UNREADABLE = "IdLedgerUnreadable"
"""The executor id ledger cannot be read: no id may be issued before it is (`ids.py`)."""
ID_LEDGER_UNWRITABLE = "IdLedgerUnwritable"
"""The ledger cannot be written and the ids it covers are spent: creates wait for the write."""
THREAD_DIED = "ThreadDied"
"""A worker thread of the sidecar ended by an error: the work it ran no longer happens."""
CREDENTIALS_REFUSED = "CredentialsRefused"
"""The API server refuses the sidecar's credentials (401): no call can succeed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Stall:
    """One reason allocation cannot progress, since `since` (wall-clock seconds)."""

    reason: str
    message: str
    since: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressChange:
    """A stall began (`stalled` true) or ended (false)."""

    stall: Stall
    stalled: bool


ProgressListener = Callable[[ProgressChange], None]


class ProgressMonitor:
    """The reasons allocation cannot progress now; thread-safe, told to listeners in order."""

    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._stalls: dict[str, Stall] = {}
        self._listeners: tuple[ProgressListener, ...] = ()

    def stall(self, reason: str, message: str) -> None:
        """Allocation cannot progress for `reason`. A repeat of a reason already on only
        updates its message (listeners hear each reason once until it resumes)."""
        if not reason:
            raise ValueError("a stall needs a reason")
        with self._lock:
            current = self._stalls.get(reason)
            if current is not None:
                if current.message != message:
                    self._stalls[reason] = Stall(
                        reason=reason, message=message, since=current.since
                    )
                return
            stall = Stall(reason=reason, message=message, since=self._clock.time())
            self._stalls[reason] = stall
            logger.error(
                "Allocation cannot make progress (%s): %s",
                reason,
                message,
                extra={"reason": reason},
            )
            self._tell(ProgressChange(stall=stall, stalled=True))

    def resume(self, reason: str) -> None:
        """`reason` no longer holds allocation back (nothing happens if it did not)."""
        with self._lock:
            stall = self._stalls.pop(reason, None)
            if stall is None:
                return
            logger.warning(
                "Allocation can make progress again: %s is over (after %.1f s).",
                reason,
                max(0.0, self._clock.time() - stall.since),
                extra={"reason": reason},
            )
            self._tell(ProgressChange(stall=stall, stalled=False))

    @property
    def stalls(self) -> tuple[Stall, ...]:
        """The stalls on now, oldest first."""
        with self._lock:
            return tuple(sorted(self._stalls.values(), key=lambda s: (s.since, s.reason)))

    @property
    def progressing(self) -> bool:
        """True while no stall is on."""
        with self._lock:
            return not self._stalls

    @contextlib.contextmanager
    def held(self) -> Iterator[tuple[Stall, ...]]:
        """The stalls on now, with no change until the block ends: a new listener can hear the
        current stalls and then every change, none twice and none missed."""
        with self._lock:
            yield self.stalls

    def is_stalled(self, reason: str) -> bool:
        with self._lock:
            return reason in self._stalls

    def add_listener(self, listener: ProgressListener) -> Callable[[], None]:
        """Hear every later change; returns a function that unregisters `listener`."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def remove() -> None:
            with self._lock:
                self._listeners = tuple(x for x in self._listeners if x is not listener)

        return remove

    def _tell(self, change: ProgressChange) -> None:
        for listener in self._listeners:
            try:
                listener(change)
            except Exception:
                logger.exception("A progress listener failed; the others are still told.")


THREAD_PREFIX = "execpods"
"""The names of the threads execpods starts (its schedulers' workers, the watch) begin so."""


def watch_threads(monitor: ProgressMonitor, *, prefix: str = THREAD_PREFIX) -> Callable[[], None]:
    """Stall `monitor` (`THREAD_DIED`) when a thread named `prefix...` ends by an exception.

    Such a thread ran a loop (a scheduler's worker, the watch) whose work silently stops with it:
    no round, no event, no error on any call. Python hands every uncaught thread exception to
    `threading.excepthook`; this chains onto the hook in place (which still runs: it logs the
    traceback) and returns a function that puts it back. A dead thread is not restarted: the
    state it held may be half-changed, so the process should be restarted (the probe sees
    NOT_SERVING, and a Kubernetes liveness probe on health restarts the container).
    """
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        thread = args.thread
        name = thread.name if thread is not None else ""
        if name.startswith(prefix) and args.exc_type is not SystemExit:
            monitor.stall(
                THREAD_DIED,
                f"thread {name} ended by {args.exc_type.__name__}: {args.exc_value}; the work it "
                "ran no longer happens: restart the sidecar",
            )
        previous(args)

    threading.excepthook = hook

    def unwatch() -> None:
        if threading.excepthook is hook:
            threading.excepthook = previous

    return unwatch


__all__ = [
    "CREDENTIALS_REFUSED",
    "ID_LEDGER_UNREADABLE",
    "ID_LEDGER_UNWRITABLE",
    "THREAD_DIED",
    "THREAD_PREFIX",
    "ProgressChange",
    "ProgressListener",
    "ProgressMonitor",
    "Stall",
    "watch_threads",
]
