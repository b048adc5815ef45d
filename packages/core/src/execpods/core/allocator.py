"""The allocator: reconciles each resource profile's target against the latest snapshot.

Newest Spark's rules (`ExecutorPodsAllocator`, 4.2), as one pipeline per batch of snapshots:

1. before the first create, adopt the pods already in the cluster and read the id ledger's mark
   (`recovery.py`, `ids.py`);
2. bring the book of outstanding requests up to date (`book.py`): seen ones leave it, lost
   creates are read back, a request older than the creation timeout is dropped and its pod
   deleted by label;
3. follow up the scale-down deletes (`scaledown.py`), note failed starts (`creator.py`), and tell
   the features the round's facts (`features.py`);
4. classify every profile from the latest snapshot and the book (`allocation.classify`), delete
   each profile's excess (`ScaleDown.trim`), then ask for what it misses (`allocation.
   request_counts`: batch size, pending caps), each profile capped by the features in turn (the
   id ledger first), and create the pods (`PodCreator`);
5. tell the features what the round decided.

Beyond Spark: concurrent creates (`creation.py`) whose failures become `AllocatorNotice`s, and
adaptive batches (`adaptive.py`); the 2018 rule is `execpods.allocation.waitForPendingPods`.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping, Sequence

from execpods.core.adaptive import API_RATE_CEILING
from execpods.core.allocation import ExecutorCounts, classify
from execpods.core.book import RequestBook
from execpods.core.creation import CreateRunner
from execpods.core.creator import PodCreator
from execpods.core.errors import PodOperationError
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.features import FeatureSet, RoundFacts, RoundOutcome
from execpods.core.ids import IdBudget
from execpods.core.notices import NoticeHub
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    Clock,
    DriverView,
    ExecutorPodBuilder,
    PodOperations,
    SnapshotsReader,
)
from execpods.core.profiles import ResourceProfiles
from execpods.core.recovery import recover
from execpods.core.scaledown import ScaleDown
from execpods.core.scaleup import ScaleUp
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot

__all__ = ["ExecutorCounts", "ExecutorPodsAllocator"]

logger = logging.getLogger(__name__)


class ExecutorPodsAllocator:
    """Creates and trims executor pods until each profile's target runs."""

    def __init__(
        self,
        *,
        settings: CoreSettings,
        pod_builder: ExecutorPodBuilder,
        pod_operations: PodOperations,
        store: SnapshotsReader,
        clock: Clock,
        notices: NoticeHub,
        ids: IdBudget,
        features: FeatureSet,
        profiles: ResourceProfiles | None = None,
        runner: CreateRunner | None = None,
        rng: random.Random | None = None,
        failure_tracker: ExecutorFailureTracker | None = None,
        api_rate_ceiling: float = API_RATE_CEILING,
    ) -> None:
        self._settings = settings
        self._ids = ids
        """The id ledger's feature: its ids go to the creates; it is the first of `features`."""
        self._features = features
        """Told of every round first, asked to cap each profile's creates and to shape each
        pod, told what the round decided (`features.py`)."""
        self._pods = pod_operations
        self._store = store
        self._clock = clock
        self.profiles = profiles if profiles is not None else ResourceProfiles()
        self._book = RequestBook(
            timeout=settings.pod_creation_timeout, labels=settings.labels, pods=pod_operations
        )
        self._scale_down = ScaleDown(
            pods=pod_operations,
            labels=settings.labels,
            batch_delay=settings.batch_delay,
            idle_timeout=settings.executor_idle_timeout,
            clock=clock,
        )
        self._creator = PodCreator(
            settings=settings,
            pod_builder=pod_builder,
            pod_operations=pod_operations,
            clock=clock,
            notices=notices,
            features=features,
            runner=runner,
            rng=rng,
            failure_tracker=failure_tracker,
            api_rate_ceiling=api_rate_ceiling,
        )
        self._scale_up = ScaleUp(
            settings=settings,
            creator=self._creator,
            features=features,
            ids=ids.ids,
            book=self._book,
            failures=failure_tracker,
        )
        self._lock = threading.Lock()
        self._targets: dict[int, int] = {DEFAULT_RESOURCE_PROFILE_ID: 0}
        self._outstanding = 0
        self._last_snapshot = ExecutorPodsSnapshot(labels=settings.labels)
        self._recovered = False
        self._app_id: str | None = None
        self._driver: DriverView | None = None

    # Configuration and queries (any thread).

    def start(self, app_id: str, driver: DriverView | None = None) -> None:
        """Subscribe to the store; rounds run every `spark.kubernetes.allocation.batch.delay`.

        `driver` tells which executors the driver already knows (Spark asks its scheduler
        backend): those are never deleted by scale-down and never block a profile.
        """
        self._app_id = app_id
        self._driver = driver
        self._store.add_subscriber(self._settings.batch_delay, self.on_new_snapshots)

    def set_total_expected_executors(
        self, total: int, *, resource_profile_id: int = DEFAULT_RESOURCE_PROFILE_ID
    ) -> None:
        """Set one profile's target (see `set_totals`)."""
        self.set_totals({resource_profile_id: total})

    def set_totals(self, totals: Mapping[int, int]) -> None:
        """Set targets per profile; re-evaluate at once when nothing is outstanding (fast scale-up).

        The totals were judged by the backend (`TotalsRequest.check`): non-negative, of declared
        profiles. Profiles not named keep their targets (Spark never forgets a profile).
        """
        with self._lock:
            changed = any(self._targets.get(p) != total for p, total in totals.items())
            self._targets.update(totals)
            notify = changed and self._outstanding == 0
        if not changed:
            # A driver may repeat its target many times a second: a round for an unchanged
            # target would decide what the next periodic round decides anyway.
            return
        logger.info("Targets set to %s (by resource profile).", dict(totals))
        if notify:
            self._store.notify_subscribers()

    def targets(self) -> dict[int, int]:
        """The target of every profile that has one."""
        with self._lock:
            return dict(self._targets)

    def is_deleted(self, executor_id: int) -> bool:
        """Whether scale-down deleted this executor whose pod may still show (Spark: isDeleted):
        true only while the delete was accepted or is being retried (`scaledown.py`)."""
        return executor_id in self._scale_down.deleted

    @property
    def outstanding_pods(self) -> int:
        """Pending pods the driver does not know plus requested-but-unseen ones (Spark's count)."""
        with self._lock:
            return self._outstanding

    # One round (the store calls it serially).

    def on_new_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        app_id = self._app_or_fail()
        if not self._recovered:
            if snapshots:
                # Kept while recovery waits (an unreadable ledger): the round that recovers
                # must not decide on the empty snapshot it started with.
                self._last_snapshot = snapshots[-1]
            if not self._recover(app_id):
                return  # nothing is created before the pods already in the cluster are known
        known = frozenset(self._driver.executor_ids()) if self._driver is not None else frozenset()
        now = self._clock.monotonic()
        update = self._book.update(snapshots, known, app_id=app_id, now=now)
        self._creator.starts.forget([*update.lost, *update.expired])
        if update.expired and self._settings.delete_on_termination:
            self._scale_down.delete_expired(update.expired, app_id=app_id, now=now)
        if snapshots:
            self._last_snapshot = snapshots[-1]
        self._scale_down.follow_up(self._last_snapshot, app_id=app_id, now=now)
        self._creator.observe_starts(snapshots)
        wall = self._clock.time()
        facts = RoundFacts(
            app_id=app_id, snapshot=self._last_snapshot, batch=snapshots, known=known, now=wall
        )
        self._features.observe(facts)
        profiles = classify(
            self._last_snapshot,
            targets=self.targets(),
            labels=self._settings.labels,
            known=known,
            deleted=self._scale_down.deleted.ids,
            book=self._book,
        )
        states = self._scale_down.trim(
            profiles, snapshot=self._last_snapshot, book=self._book, app_id=app_id, wall=wall
        )
        created = self._scale_up.run(app_id, states)
        self._features.finished(RoundOutcome(states=tuple(states), created=created))
        with self._lock:
            self._outstanding = sum(len(s.pending_unknown) for s in states) + len(self._book)

    def _recover(self, app_id: str) -> bool:
        """Before the first create, read the id ledger's mark and adopt the pods in the cluster
        (`recovery.py`); both are retried next round when they fail."""
        try:
            mark = self._ids.read_mark()
        except PodOperationError:
            return False
        adoption = recover(
            self._pods,
            self._settings.labels,
            app_id,
            maximum=self._settings.allocation_maximum,
            reserved_through=mark,
        )
        if adoption is None:
            return False
        first = self._ids.started(
            mark, highest_pod=adoption.highest_id, above_mark=adoption.above_mark
        )
        if first > 1:
            logger.info("New executor ids start at %d.", first)
        self._book.adopt(adoption.live, self._clock.monotonic())
        self._recovered = True
        return True

    def _app_or_fail(self) -> str:
        if self._app_id is None:
            raise RuntimeError("the allocator was not started")
        return self._app_id
