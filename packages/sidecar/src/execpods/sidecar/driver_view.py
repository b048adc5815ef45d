"""The driver as the lifecycle manager sees it, for a driver that lives on the other end of gRPC.

Spark's lifecycle manager asks its scheduler backend which executors exist and which are active,
and tells it when one is gone. Here the driver is remote, so the sidecar keeps that view itself:

- **Known executors.** By default an executor is known once the lifecycle manager has seen it
  *running* in a snapshot, until it is reported removed (an executor that never ran was never
  registered with a driver, so its vanishing pod is not news to the driver). The driver may add
  executors it registered with `UpdateDriverExecutors.registered`; with `explicit = true` the
  sidecar stops inferring, and the known executors are exactly those registered and not removed.
  Explicit mode is sticky: a later update without it does not switch inference back on.
- **Active executors.** Known executors the driver has not released
  (`UpdateDriverExecutors.released`): a released executor's exit is expected.
- **Registration times.** When the driver registered each known executor, as it says
  (`UpdateDriverExecutors.registered_at_ms`), else when the sidecar first learnt of it (saw it
  running, or was told it registered). The lifecycle manager reports an executor missing only when
  a full list taken more than `spark.kubernetes.executor.missingPodDetectDelta` later lacks it.
- **Ids never issued.** A driver can only know executors that ran, so ids above the highest
  the application ever issued (`ExecutorPodsBackend.highest_executor_id`: the id counter, the
  ledger's mark, the snapshot) are not believed: registrations of them wait, at most
  `MAX_UNCONFIRMED` of them, until the ids exist (a driver may re-send its view to a restarted
  sidecar before it has listed its pods), and the rest are dropped with a warning; releases and
  registration times of them are ignored. Nothing a driver sends is kept beyond the executors
  that exist, and `known` never echoes what was not believed.
- **Removals.** Every removal the lifecycle manager decides is remembered forever (ids are never
  reused, so this is small), so a late snapshot cannot make a removed executor known again and have
  it reported twice. The view hears of each removal once, as the lifecycle manager's
  `DriverView` (`remove_executor`); the streams hear of removals from the backend
  (`ExecutorPodsBackend.open_stream`).

The view is also a `RoundObserver` of the lifecycle manager: it is fed the very batches the
manager works on, just before it works on them (`round_started`), so "seen running" never runs
ahead of the snapshot the manager compares the known executors with: an executor cannot be
reported missing because the view saw it in a snapshot the manager had not.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from execpods.core import (
    Clock,
    ExecutorExited,
    ExecutorPodsSnapshot,
    ExecutorState,
    SystemClock,
)

logger = logging.getLogger(__name__)

MAX_UNCONFIRMED = 10_000
"""Registrations of ids not issued yet kept until they are (the rest are dropped, and said)."""


class InferredDriverView:
    """A thread-safe `DriverView` that infers the driver's executors unless told them, fed each
    lifecycle round as a `RoundObserver`."""

    def __init__(
        self, *, clock: Clock | None = None, highest_id: Callable[[], int] | None = None
    ) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self.highest_id = highest_id
        """The highest executor id that may exist (None: believe every id, as before)."""
        self._unconfirmed: dict[int, float | None] = {}
        """Registered ids above `highest_id`, in arrival order, with the driver's time."""
        self.dropped = 0
        """Registrations of ids never issued that were dropped (the buffer was full)."""
        self._registered_at: dict[int, float] = {}
        self._lock = threading.Lock()
        self._seen_running: set[int] = set()
        self._registered: set[int] = set()
        self._released: set[int] = set()
        self._removed: set[int] = set()
        self._explicit = False
        self._last: ExecutorPodsSnapshot | None = None

    # The lifecycle manager's side (DriverView).

    def executor_ids(self) -> Collection[int]:
        with self._lock:
            return self._known_locked()

    def is_executor_active(self, executor_id: int) -> bool:
        with self._lock:
            if executor_id in self._removed or executor_id in self._released:
                return False
            inferred = not self._explicit and executor_id in self._seen_running
            return inferred or executor_id in self._registered

    def registration_times(self) -> Mapping[int, float]:
        with self._lock:
            return {i: self._registered_at.get(i, 0.0) for i in self._known_locked()}

    def remove_executor(self, executor_id: int, reason: ExecutorExited) -> None:
        with self._lock:
            self._removed.add(executor_id)
            self._registered_at.pop(executor_id, None)
            self._seen_running.discard(executor_id)
            self._registered.discard(executor_id)
            self._released.discard(executor_id)

    # The driver's side (UpdateDriverExecutors).

    def update(
        self,
        *,
        registered: Iterable[int],
        released: Iterable[int],
        explicit: bool,
        registered_at: Mapping[int, float] | None = None,
    ) -> list[int]:
        """Apply one update from the driver; returns the executors now known, sorted.

        `registered_at` gives registration times (wall-clock seconds) the driver knows; an executor
        registered without one counts as registered now.
        """
        now = self._clock.time()
        times = registered_at or {}
        bound = self.highest_id() if self.highest_id is not None else None
        dropped = 0
        with self._lock:
            if explicit:
                self._explicit = True
            self._confirm_locked(bound)
            fresh: list[int] = []
            for executor_id in registered:
                if executor_id in self._removed:
                    continue
                if bound is None or executor_id <= bound:
                    fresh.append(executor_id)
                elif executor_id in self._unconfirmed or len(self._unconfirmed) < MAX_UNCONFIRMED:
                    self._unconfirmed[executor_id] = times.get(executor_id)
                else:
                    dropped += 1
            self._registered.update(fresh)
            for executor_id in fresh:
                self._registered_at.setdefault(executor_id, now)
            for executor_id, at in times.items():
                if executor_id in self._unconfirmed:
                    self._unconfirmed[executor_id] = at
                elif executor_id not in self._removed and (bound is None or executor_id <= bound):
                    self._registered_at[executor_id] = at
            self._released.update(
                i for i in released if i not in self._removed and (bound is None or i <= bound)
            )
            self.dropped += dropped
            known = sorted(self._known_locked())
        if dropped:
            logger.warning(
                "The driver registered %d executor ids above the highest this application ever "
                "issued (%s) while %d such registrations already wait: they were dropped (no "
                "executor can have them).",
                dropped,
                bound,
                MAX_UNCONFIRMED,
            )
        return known

    def _confirm_locked(self, bound: int | None) -> None:
        """Registrations that waited for their ids to exist, now that they do."""
        if not self._unconfirmed or bound is None:
            return
        now = self._clock.time()
        for executor_id in [i for i in self._unconfirmed if i <= bound]:
            at = self._unconfirmed.pop(executor_id)
            if executor_id in self._removed:
                continue
            self._registered.add(executor_id)
            self._registered_at[executor_id] = at if at is not None else now

    # The lifecycle manager's rounds (RoundObserver).

    def round_started(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """Note the executors seen running, walking only what changed between snapshots."""
        newly_running: set[int] = set()
        for snapshot in snapshots:
            pods = snapshot.executor_pods
            changed = snapshot.changes_since(self._last)
            newly_running.update(
                i
                for i in (pods.keys() if changed is None else changed)
                if (observed := pods.get(i)) is not None and observed.state is ExecutorState.RUNNING
            )
            self._last = snapshot
        if self._unconfirmed and self.highest_id is not None:
            bound = self.highest_id()
            with self._lock:
                self._confirm_locked(bound)
        if newly_running:
            now = self._clock.time()
            with self._lock:
                fresh = newly_running - self._removed
                self._seen_running.update(fresh)
                for executor_id in fresh:
                    self._registered_at.setdefault(executor_id, now)

    def _known_locked(self) -> set[int]:
        known = set(self._registered)
        if not self._explicit:
            known |= self._seen_running
        return known - self._removed
