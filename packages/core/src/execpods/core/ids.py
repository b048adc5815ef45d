"""Issuing executor ids: never one twice, across restarts too, and none beyond the maximum.

The pods alone cannot say which ids were used: after a scale to zero, or once the pods of the
highest ids are gone, a restarted sidecar would issue them again and the driver would see two
executors 3. So the ids are reserved in blocks through an `ExecutorIdLedger` (the adapter keeps
the mark in the cluster) *before* any of them is used, as a database sequence hands out blocks:

- at start the counter continues above max(the ledger's mark, the highest id adopted from the
  pods), so ids the previous life reserved but never used are skipped, never reused;
- a round that needs ids beyond the mark writes a new mark first, `execpods.allocation.idBlock`
  ids (or the round's need, when larger) above the next id: a scale-up to 10,000 costs five
  writes at the default block of 2,000;
- when that write fails no id above the old mark is issued: the round creates only what the old
  mark still covers, the write is retried after a back-off (one batch delay, doubling up to
  `MAX_RETRY_S`) and the caller logs and reports it (`NoticeKind.ID_RESERVATION_FAILED`).

Without a ledger (a backend built without one) the mark lives only in the process: restarts are
then safe only while the pods of the highest ids exist.

The ledger lives in the cluster, where other hands reach it (issue 32), so its mark is believed
only when it is consistent with what this process sees, and re-asserted when it is not:

- at start, a value that is no executor id (`LedgerMarkInvalid`), or a mark below the ids of
  the application's own pods, is not believed: ids continue above the pods, the finding is
  told (`LedgerFinding`, a notice with its reason) and the mark is written again at once;
- while running, `verify` reads the mark back (the caller decides when: before a round's
  creates, after executors left, every poll period): found gone, lower than this process's own,
  or no executor id, the mark is written again before any further id is issued (and if that
  write fails, no id is issued until it succeeds); found higher, it is told once and left (a
  higher mark never lets an id be issued twice).

An id is issued when its create is about to be sent; a create the API throttled (429, or one the
back-off gate held back unsent) made no pod, so its id is handed back and the next create uses it.
`issued` counts toward `spark.kubernetes.allocation.maximum` as Spark's counter does: every id
below the next one is spent, whichever life issued it, except those handed back.
"""

from __future__ import annotations

import heapq
import logging
import threading
from dataclasses import dataclass

from execpods.core.errors import LedgerMarkInvalid, PodOperationError
from execpods.core.ports import Clock, ExecutorIdLedger

logger = logging.getLogger(__name__)

MAX_RETRY_S = 30.0
"""The longest wait before a failed reservation is written again."""


LEDGER_MARK_INVALID = "LedgerMarkInvalid"
LEDGER_MARK_BELOW_PODS = "LedgerMarkBelowPods"
LEDGER_GONE = "LedgerGone"
LEDGER_MARK_LOWERED = "LedgerMarkLowered"
LEDGER_MARK_RAISED = "LedgerMarkRaised"


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerFinding:
    """The id ledger's mark was not what this process could believe; `reason` is one of the
    `LEDGER_*` names, `message` says what was found, in which object, and what was done."""

    reason: str
    message: str


class IdsUnavailable(PodOperationError):
    """No id may be issued now: the reservation above the mark could not be written, or the
    maximum is reached. Nothing was sent."""


class ExecutorIds:
    """The executor id counter: from 1, never back, reserved through the ledger before use."""

    def __init__(
        self,
        *,
        maximum: int,
        clock: Clock,
        ledger: ExecutorIdLedger | None = None,
        block: int = 2000,
        retry_base: float = 1.0,
    ) -> None:
        if block < 1:
            raise ValueError(f"the id block must be positive, not {block}")
        self._lock = threading.Lock()
        self._ledger = ledger
        self._block = block
        self._maximum = maximum
        self._clock = clock
        self._retry_base = retry_base
        self._next = 1
        self._returned: list[int] = []
        self._reserved = 0 if ledger is not None else maximum - 1
        self._failures = 0
        self._retry_at = 0.0
        self._raised_seen = 0
        self.last_error: PodOperationError | None = None

    @property
    def issued(self) -> int:
        """Ids spent: every id below the next one, less those handed back."""
        with self._lock:
            return self._next - 1 - len(self._returned)

    @property
    def highest(self) -> int:
        """The highest id this counter stands above: issued in this life, or by an earlier one
        (the ledger's mark, the pods adopted); 0 before any."""
        with self._lock:
            return self._next - 1

    @property
    def left(self) -> int:
        """Ids that may still be issued before `allocation.maximum` (as Spark: none at or
        above it)."""
        with self._lock:
            return max(0, self._maximum - self._next) + len(self._returned)

    @property
    def location(self) -> str:
        """The ledger's object, for messages."""
        return self._ledger.location if self._ledger is not None else "this process"

    def verify(self) -> LedgerFinding | None:
        """Read the mark back; when it is gone, lower than this process's own, or no executor
        id, write this process's again now, before any further id is issued. Returns what was
        found wrong (None: the mark holds, or it could not be read: the next call tries)."""
        ledger = self._ledger
        if ledger is None:
            return None
        with self._lock:
            own = max(self._reserved, self._next - 1)
        if own <= 0:
            return None
        try:
            stored = ledger.highest_reserved()
        except LedgerMarkInvalid as error:
            finding = LedgerFinding(
                reason=LEDGER_MARK_INVALID,
                message=f"{error}; this process's mark {own} is written again",
            )
        except PodOperationError as error:
            logger.debug("Could not read the id ledger back (%s); the next check tries.", error)
            return None
        else:
            if stored > own:
                return self._raised(stored, own)
            if stored == own:
                return None
            reason = LEDGER_GONE if stored == 0 else LEDGER_MARK_LOWERED
            what = "is gone" if stored == 0 else f"holds {stored}, below this process's {own}"
            finding = LedgerFinding(
                reason=reason,
                message=(
                    f"The executor id ledger ({ledger.location}) {what} (deleted, or restored "
                    "from an older backup?): the mark is written again before any further id "
                    "is issued, so that no id can be issued twice after a restart."
                ),
            )
        self.reassert()
        return finding

    def reassert(self) -> bool:
        """Write this process's mark (every id issued or reserved) now; when that fails, no id
        above those already issued is issued until a write succeeds. True when written."""
        if self._ledger is None:
            return True
        with self._lock:
            own = max(self._reserved, self._next - 1)
            if own <= 0:
                return True
            try:
                self._write_locked(own)
            except PodOperationError:
                self._reserved = self._next - 1  # nothing more is covered until it is written
                return False
            return True

    def _raised(self, stored: int, own: int) -> LedgerFinding | None:
        with self._lock:
            if stored == self._raised_seen:
                return None
            self._raised_seen = stored
        return LedgerFinding(
            reason=LEDGER_MARK_RAISED,
            message=(
                f"The executor id ledger ({self.location}) holds {stored}, above this "
                f"process's {own}: another writer (a second sidecar for the application, or a "
                "hand) changed it. It is left as it is (a higher mark never lets an id be "
                "issued twice), and ids go on from this process's own."
            ),
        )

    def read_mark(self) -> int | None:
        """The ledger's mark (None without a ledger); raises `PodOperationError` when it cannot
        be read: nothing may be issued before it is."""
        return self._ledger.highest_reserved() if self._ledger is not None else None

    def start(self, mark: int | None, highest_adopted: int) -> int:
        """Continue above max(the ledger's `mark`, `highest_adopted`); returns the first new id."""
        mark = mark or 0
        with self._lock:
            self._next = max(self._next, mark + 1, highest_adopted + 1)
            if self._ledger is not None:
                self._reserved = max(self._reserved, mark)
            return self._next

    def reserve(self, count: int) -> int:
        """Make sure `count` more ids are reserved; returns how many may be issued now.

        Writes the ledger when the mark does not cover them (a block at a time). When the write
        fails, or a failed one is still backing off, returns what the old mark covers and keeps
        the error in `last_error`; raises nothing.
        """
        with self._lock:
            count = min(count, max(0, self._maximum - self._next) + len(self._returned))
            covered = len(self._returned) + max(0, self._reserved - self._next + 1)
            if count <= covered or self._ledger is None:
                return count
            if self._clock.monotonic() < self._retry_at:
                return covered
            try:
                self._write_locked(self._next - 1 + max(self._block, count - len(self._returned)))
            except PodOperationError:
                return covered
            return count

    def _write_locked(self, through: int) -> None:
        assert self._ledger is not None
        through = min(through, self._maximum - 1)
        try:
            self._ledger.reserve_through(through)
        except PodOperationError as error:
            self._failures += 1
            delay = min(MAX_RETRY_S, self._retry_base * 2.0 ** min(self._failures - 1, 30))
            self._retry_at = self._clock.monotonic() + delay
            self.last_error = error
            logger.warning(
                "Could not reserve executor ids through %d (%s): no id above %d is issued until "
                "it is written; retrying in %.1f s.",
                through,
                error,
                self._reserved,
                delay,
            )
            raise
        if self._failures:
            logger.info(
                "Reserved executor ids through %d after %d failures.", through, self._failures
            )
        self._failures = 0
        self._retry_at = 0.0
        self.last_error = None
        self._reserved = max(self._reserved, through)

    def next(self) -> int:
        """The next id to use for a create about to be sent (a handed-back one first).

        Raises `IdsUnavailable` when none may be issued (the maximum, or an unwritable mark).
        """
        with self._lock:
            if self._returned:
                return heapq.heappop(self._returned)
            if self._next >= self._maximum:
                raise IdsUnavailable(f"no executor id below {self._maximum} is left")
            if self._next > self._reserved:
                if self._clock.monotonic() < self._retry_at:
                    raise IdsUnavailable(f"executor ids above {self._reserved} are not reserved")
                try:
                    self._write_locked(self._next - 1 + self._block)
                except PodOperationError as error:
                    raise IdsUnavailable(str(error)) from error
            issued = self._next
            self._next += 1
            return issued

    def give_back(self, executor_id: int) -> None:
        """A create with this id made no pod for sure (throttled or held back unsent)."""
        with self._lock:
            if executor_id < self._next and executor_id not in self._returned:
                heapq.heappush(self._returned, executor_id)
