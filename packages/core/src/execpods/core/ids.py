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

`spark.kubernetes.allocation.maximum` counts the pods this process created, as Spark's does
(`ExecutorPodsAllocator.requestNewExecutors`: `EXECUTOR_ID_COUNTER.incrementAndGet()` must stay
below it, and the counter starts at 0 with each driver): at most maximum - 1 ids are issued per
life, those handed back not counted. The ids a previous life reserved, or used, never count: they
are skipped so that none is issued twice, which is why an id may exceed the maximum after a
restart (Spark's restarted driver issues 1, 2, ... again instead).
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from execpods.core.allocation import ProfileState
from execpods.core.errors import LedgerMarkInvalid, PodOperationError
from execpods.core.features import Feature, FeatureParts, RoundFacts, RoundOutcome
from execpods.core.notices import AllocatorNotice, NoticeHub, NoticeKind
from execpods.core.ports import DEFAULT_RESOURCE_PROFILE_ID, Clock, ExecutorIdLedger
from execpods.core.progress import ID_LEDGER_UNREADABLE, ID_LEDGER_UNWRITABLE, ProgressMonitor
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorState

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
        self._spent = 0
        """Ids issued by this process, less those handed back: what the maximum counts."""
        self._returned: list[int] = []
        self._reserved = 0 if ledger is not None else maximum - 1
        self._failures = 0
        self._retry_at = 0.0
        self._raised_seen = 0
        self._closed = False
        self.last_error: PodOperationError | None = None

    @property
    def maximum(self) -> int:
        """`spark.kubernetes.allocation.maximum`: no id at or above it is issued."""
        return self._maximum

    @property
    def issued(self) -> int:
        """Ids this process issued, less those handed back (the pods it created)."""
        with self._lock:
            return self._spent

    def _left_locked(self) -> int:
        return max(0, self._maximum - 1 - self._spent)

    @property
    def highest(self) -> int:
        """The highest id this counter stands above: issued in this life, or by an earlier one
        (the ledger's mark, the pods adopted); 0 before any."""
        with self._lock:
            return self._next - 1

    @property
    def left(self) -> int:
        """Ids that may still be issued before `allocation.maximum` (as Spark: maximum - 1 per
        life)."""
        with self._lock:
            return self._left_locked()

    @property
    def closed(self) -> bool:
        """Whether the application's allocation ended for good (`close`)."""
        with self._lock:
            return self._closed

    def close(self) -> None:
        """The application's allocation ended for good (its driver said so: Spark's
        `ExecutorPodsAllocator.stop`): no id is issued again, and the ledger is no longer read
        back or written. The application's own clean-up deletes it (Spark deletes its executor
        ConfigMaps right after its allocator's stop), and no later life of the application will
        issue ids: writing the mark again would only leave the ledger behind."""
        with self._lock:
            self._closed = True

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
            if self._closed:
                return None
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
            if own <= 0 or self._closed:
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
            else:  # the in-process mark covers this life's ids, wherever they start
                self._reserved = max(self._reserved, self._next - 1 + self._left_locked())
            return self._next

    def reserve(self, count: int) -> int:
        """Make sure `count` more ids are reserved; returns how many may be issued now.

        Writes the ledger when the mark does not cover them (a block at a time). When the write
        fails, or a failed one is still backing off, returns what the old mark covers and keeps
        the error in `last_error`; raises nothing.
        """
        with self._lock:
            if self._closed:
                return 0
            count = min(count, self._left_locked())
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
        # Never more than this life may still issue (the ids handed back are below the mark).
        through = min(through, self._next - 1 + max(0, self._left_locked() - len(self._returned)))
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
            if self._closed:
                raise IdsUnavailable("the application's allocation was stopped by its driver")
            if self._spent >= self._maximum - 1:
                raise IdsUnavailable(
                    f"{self._spent} executor pods were created: the maximum is {self._maximum}"
                )
            if self._returned:
                self._spent += 1
                return heapq.heappop(self._returned)
            if self._next > self._reserved:
                if self._clock.monotonic() < self._retry_at:
                    raise IdsUnavailable(f"executor ids above {self._reserved} are not reserved")
                try:
                    self._write_locked(self._next - 1 + self._block)
                except PodOperationError as error:
                    raise IdsUnavailable(str(error)) from error
            issued = self._next
            self._next += 1
            self._spent += 1
            return issued

    def give_back(self, executor_id: int) -> None:
        """A create with this id made no pod for sure (throttled or held back unsent)."""
        with self._lock:
            if executor_id < self._next and executor_id not in self._returned:
                heapq.heappush(self._returned, executor_id)
                self._spent -= 1


def plug(parts: FeatureParts, ledger: ExecutorIdLedger | None) -> IdBudget:
    """The id ledger's part in every round (always there: every create needs an id)."""
    settings = parts.settings
    ids = ExecutorIds(
        maximum=settings.allocation_maximum,
        clock=parts.clock,
        ledger=ledger,
        block=settings.id_block,
        retry_base=settings.batch_delay,
    )
    return IdBudget(
        ids=ids,
        notices=parts.notices,
        progress=parts.progress,
        clock=parts.clock,
        round_delay=settings.batch_delay,
        check_every=settings.api_polling_interval,
    )


class IdBudget(Feature):
    """Creates capped by the ids that may be issued now; what stops them told once.

    The first feature asked: a profile gets only the ids reserved in the ledger (`reserve`); a
    ledger that cannot be written or read stalls allocation (`progress.py`) and is told as
    `ID_RESERVATION_FAILED` once per failure spell; `spark.kubernetes.allocation.maximum` reached
    is told once, after the round issued the ids it still could (the numbers are then final).
    """

    def __init__(
        self,
        *,
        ids: ExecutorIds,
        notices: NoticeHub,
        progress: ProgressMonitor,
        clock: Clock | None = None,
        round_delay: float = 1.0,
        check_every: float = 30.0,
    ) -> None:
        self.ids = ids
        self._notices = notices
        self._progress = progress
        self._clock = clock
        self._round_delay = round_delay
        self._check_every = check_every
        """How often the mark is read back when nothing else calls for it (a poll period)."""
        self._checked_at = 0.0
        self._last: ExecutorPodsSnapshot | None = None
        self._findings: list[LedgerFinding] = []
        self._reservation_reported = False
        self._maximum_reported = False
        self._held = False
        self._short: dict[int, int] = {}

    def read_mark(self) -> int | None:
        """The ledger's mark (None without a ledger, or when it holds no executor id: then
        said once the pods are listed, in `started`); when it cannot be read, allocation stalls
        and `PodOperationError` is raised: nothing is created before it is read."""
        try:
            mark = self.ids.read_mark()
        except LedgerMarkInvalid as error:
            self._progress.resume(ID_LEDGER_UNREADABLE)
            self._findings.append(
                LedgerFinding(
                    reason=LEDGER_MARK_INVALID,
                    message=f"{error}; new ids continue above the application's pods",
                )
            )
            return None
        except PodOperationError as error:
            # Said at WARNING once; while the stall is on (its ERROR line names it), each
            # round's retry is DEBUG, not a line a second.
            again = self._progress.is_stalled(ID_LEDGER_UNREADABLE)
            (logger.debug if again else logger.warning)(
                "Could not read the executor id ledger (%s); retrying.", error
            )
            self._progress.stall(
                ID_LEDGER_UNREADABLE,
                f"the executor id ledger cannot be read ({error}); no executor is created "
                "before it is, since an id could otherwise be issued twice (retried every "
                "allocation round)",
            )
            raise
        self._progress.resume(ID_LEDGER_UNREADABLE)
        return mark

    def started(self, mark: int | None, *, highest_pod: int, above_mark: int = 0) -> int:
        """Start the counter after recovery; returns the first new id. A mark below the
        application's own pods (`above_mark`: the highest pod id above it) is not believed;
        whatever was not believed is told, and the mark is written at once whenever it does
        not cover every id the cluster shows."""
        if mark and above_mark:
            self._findings.append(
                LedgerFinding(
                    reason=LEDGER_MARK_BELOW_PODS,
                    message=(
                        f"The executor id ledger ({self.ids.location}) holds {mark}, below "
                        f"executor {above_mark} of this application's own pods (restored from "
                        "an older backup, or lowered by hand?): it is not believed; new ids "
                        "continue above the pods, and the mark is written again."
                    ),
                )
            )
            mark = None
        first = self.ids.start(mark, highest_pod)
        if self._findings or (mark or 0) < first - 1:
            self.ids.reassert()  # the ledger covers every id the cluster shows, from now on
        self._checked_at = self._now()
        findings, self._findings = self._findings, []
        for finding in findings:
            self._tell_ledger(finding)
        return first

    def observe(self, facts: RoundFacts) -> None:
        """Read the mark back when executors left (their ids then live only in the ledger) or
        a poll period passed."""
        previous, self._last = self._last, facts.snapshot
        left = previous is not None and executors_left(previous, facts.batch)
        if left or self._now() - self._checked_at >= self._check_every:
            self._check()

    def _check(self) -> None:
        self._checked_at = self._now()
        finding = self.ids.verify()
        if finding is not None:
            self._tell_ledger(finding)

    def _now(self) -> float:
        return self._clock.monotonic() if self._clock is not None else 0.0

    def _tell_ledger(self, finding: LedgerFinding) -> None:
        logger.warning(finding.message, extra={"reason": finding.reason})
        self._notices.notify(
            AllocatorNotice(
                kind=NoticeKind.ID_LEDGER_DISTRUSTED,
                message=finding.message,
                resource_profile_id=DEFAULT_RESOURCE_PROFILE_ID,
                count=1,
                reason=finding.reason,
            )
        )

    def cap(self, state: ProfileState, wanted: int) -> int:
        profile_id = state.profile_id
        if self.ids.closed:
            return 0  # the driver stopped the allocation: nothing is created, nothing told
        if wanted > 0 and self._now() - self._checked_at >= self._round_delay:
            self._check()  # before this round's creates
        allowed = self.ids.reserve(wanted)
        if allowed < wanted:
            if self.ids.left < wanted:
                self._short[profile_id] = wanted - self.ids.left
            else:
                self._held = True
                self._report_reservation_failure(profile_id, wanted - allowed)
        elif self.ids.last_error is None:
            self._reservation_reported = False
        return allowed

    def finished(self, outcome: RoundOutcome) -> None:
        if not self._held:
            self._progress.resume(ID_LEDGER_UNWRITABLE)
        self._held = False
        short, self._short = self._short, {}
        if short and self.ids.left == 0:
            profile_id = min(short)
            self._report_maximum(profile_id, short[profile_id])

    def _report_reservation_failure(self, profile_id: int, held_back: int) -> None:
        error = self.ids.last_error
        if not self._reservation_reported:
            self._reservation_reported = True
            message = (
                f"Could not reserve executor ids in the id ledger ({error}): {held_back} "
                f"executors of resource profile {profile_id} wait until it can be written "
                "(retried with back-off); no id above the last reserved one is used, so none can "
                "ever be issued twice."
            )
            self._tell(NoticeKind.ID_RESERVATION_FAILED, message, profile_id, held_back)
        self._progress.stall(
            ID_LEDGER_UNWRITABLE,
            f"the executor id ledger cannot be written ({error}); executors wait for ids above "
            "its mark (retried with back-off)",
        )

    def _report_maximum(self, profile_id: int, short: int) -> None:
        if self._maximum_reported:
            return
        self._maximum_reported = True
        maximum = self.ids.maximum
        message = (
            f"Exceeded the pod creation limit spark.kubernetes.allocation.maximum={maximum}: "
            f"{self.ids.issued} executor ids were issued since this allocator started (Spark's "
            f"counter) and no more will be; {short} more executors of resource profile "
            f"{profile_id} were wanted. Allocation has stopped; raise the limit and restart to "
            "allocate again."
        )
        self._tell(NoticeKind.ALLOCATION_MAXIMUM_REACHED, message, profile_id, short)

    def _tell(self, kind: NoticeKind, message: str, profile_id: int, count: int) -> None:
        logger.error(message)
        self._notices.notify(
            AllocatorNotice(kind=kind, message=message, resource_profile_id=profile_id, count=count)
        )


def executors_left(previous: ExecutorPodsSnapshot, batch: Sequence[ExecutorPodsSnapshot]) -> bool:
    """Whether any executor pod left the cluster in `batch` (deleted, or gone from a full list)
    since `previous`: then only the id ledger remembers that its id was used."""
    before = previous
    for snapshot in batch:
        pods = snapshot.executor_pods
        ids = before.executor_pods.keys() if snapshot.changed_ids is None else snapshot.changed_ids
        for executor_id in ids:
            observed = pods.get(executor_id)
            if observed is None or observed.state is ExecutorState.DELETED:
                return True
        before = snapshot
    return False
