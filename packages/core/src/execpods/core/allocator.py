"""The allocator: reconciles each resource profile's target against the latest snapshot.

Newest Spark's rules (`ExecutorPodsAllocator`, 4.2), in one round per batch of snapshots:
1. executors seen in any snapshot of the batch stop being "requested but unseen"; unseen ones the
   driver already knows are set aside (they are as good as running and never block a profile);
2. an unseen request older than the creation timeout (max(5 x batch.delay,
   allocation.executor.timeout)) is assumed lost: its pod is deleted by label and it is forgotten;
3. every profile, in ascending id, deletes its excess (scale-down, see `allocation.py`) and then
   asks for what it misses, within the batch size, the pending caps and the creation cap;
4. executors deleted by scale-down are remembered until they leave the snapshots, so `is_deleted`
   can refuse a late registration.

Beyond Spark: creates run concurrently within a round (`creation.py`), their failures are
classified, backed off and reported as `AllocatorNotice`s instead of raised, and with adaptive
batches on (the default) a round grows by slow start while creates and starts go cleanly
(`adaptive.py`). The 2018 rule (no new batch while anything is pending) stays as an explicit policy
(`execpods.allocation.waitForPendingPods`).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from execpods.core.adaptive import API_RATE_CEILING
from execpods.core.allocation import (
    ExecutorCounts,
    Limits,
    ProfileState,
    excess_to_delete,
    request_counts,
)
from execpods.core.creation import CreateRunner
from execpods.core.creator import PodCreator
from execpods.core.errors import PodOperationError
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.features import FeatureSet, RoundFacts
from execpods.core.ids import ExecutorIds
from execpods.core.labels import ExecutorLabels
from execpods.core.notices import AllocatorNotice, NoticeHub, NoticeKind
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    Clock,
    DriverView,
    ExecutorIdLedger,
    ExecutorPodBuilder,
    PodOperations,
    PodSelector,
    SnapshotsReader,
)
from execpods.core.profiles import ResourceProfiles, profile_id_of
from execpods.core.progress import ID_LEDGER_UNREADABLE, ID_LEDGER_UNWRITABLE, ProgressMonitor
from execpods.core.recovery import LostCreates, recover
from execpods.core.scaledown import ScaleDownDeletions
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorState


def _still_running(phase: str | None) -> bool:
    return (phase or "").lower() == "running"


__all__ = ["AllocatorStats", "ExecutorCounts", "ExecutorPodsAllocator"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Request:
    created_at: float
    resource_profile_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocatorStats:
    """Counters since start, for logs, metrics and the benchmark."""

    created: int
    refused: int
    throttled: int
    failed: int
    start_failures: int
    ids_issued: int


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
        features: FeatureSet | None = None,
        profiles: ResourceProfiles | None = None,
        runner: CreateRunner | None = None,
        rng: random.Random | None = None,
        failure_tracker: ExecutorFailureTracker | None = None,
        id_ledger: ExecutorIdLedger | None = None,
        progress: ProgressMonitor | None = None,
        api_rate_ceiling: float = API_RATE_CEILING,
    ) -> None:
        self._settings = settings
        self._notices = notices
        self._features = features if features is not None else FeatureSet(())
        """Told of every round first, asked to cap each profile's creates and to shape each
        pod (`features.py`)."""
        self._progress = progress if progress is not None else ProgressMonitor(clock=clock)
        """Told when the id ledger keeps allocation from progressing (`progress.py`)."""
        self._failures = failure_tracker
        """Shared with the lifecycle manager: refused and failed creates count as executor
        failures, and once too many executors failed no more are created."""
        self._labels: ExecutorLabels = settings.labels
        self._pods = pod_operations
        self._store = store
        self._clock = clock
        self.profiles = profiles if profiles is not None else ResourceProfiles()
        self._ids = ExecutorIds(
            maximum=settings.allocation_maximum,
            clock=clock,
            ledger=id_ledger,
            block=settings.id_block,
            retry_base=settings.batch_delay,
        )
        self._reservation_reported = False
        self._recovered = False
        self._lost = LostCreates()
        self._lock = threading.Lock()
        self._targets: dict[int, int] = {DEFAULT_RESOURCE_PROFILE_ID: 0}
        self._unseen: dict[int, _Request] = {}
        self._unseen_known: dict[int, int] = {}
        self._deleted = ScaleDownDeletions(batch_delay=settings.batch_delay)
        self._outstanding = 0
        self._last_snapshot = ExecutorPodsSnapshot(labels=settings.labels)
        self._app_id: str | None = None
        self._driver: DriverView | None = None
        self._maximum_reported = False
        self._creator = PodCreator(
            settings=settings,
            pod_builder=pod_builder,
            pod_operations=pod_operations,
            clock=clock,
            notices=notices,
            features=self._features,
            runner=runner,
            rng=rng,
            failure_tracker=failure_tracker,
            api_rate_ceiling=api_rate_ceiling,
        )

    # Configuration and queries (any thread).

    @property
    def pod_creation_timeout(self) -> float:
        return self._settings.pod_creation_timeout

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

    @property
    def total_expected_executors(self) -> int:
        with self._lock:
            return sum(self._targets.values())

    def targets(self) -> dict[int, int]:
        """The target of every profile that has one."""
        with self._lock:
            return dict(self._targets)

    def is_deleted(self, executor_id: int) -> bool:
        """Whether scale-down deleted this executor whose pod may still show (Spark: isDeleted):
        true only while the delete was accepted or is being retried (`scaledown.py`)."""
        return executor_id in self._deleted

    @property
    def highest_executor_id(self) -> int:
        """The highest executor id that may exist: issued by this life, or by an earlier one as
        the ledger's mark and the adopted pods say (0 before recovery)."""
        return self._ids.highest

    @property
    def outstanding_pods(self) -> int:
        """Pending pods the driver does not know plus requested-but-unseen ones (Spark's count)."""
        with self._lock:
            return self._outstanding

    @property
    def stats(self) -> AllocatorStats:
        counts = dict(self._creator.counts)
        return AllocatorStats(
            created=counts["created"],
            refused=counts["refused"],
            throttled=counts["throttled"],
            failed=counts["failed"],
            start_failures=counts["starts"],
            ids_issued=self._ids.issued,
        )

    # One round (the store calls it serially).

    def on_new_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        if self._app_id is None:
            raise RuntimeError("the allocator was not started")
        if not self._recovered and not self._recover():
            return  # nothing is created before the pods already in the cluster are known
        self._forget_seen(snapshots)
        lost = self._lost.read_back(self._pods, self._labels, self._app_or_fail(), self._unseen)
        for executor_id in lost:  # their creates failed without an answer and made no pod
            del self._unseen[executor_id]
        self._creator.starts.forget(lost)
        known = frozenset(self._driver.executor_ids()) if self._driver is not None else frozenset()
        for executor_id in [i for i in self._unseen if i in known]:
            self._unseen_known[executor_id] = self._unseen.pop(executor_id).resource_profile_id
        for executor_id in [i for i in self._unseen_known if i not in known]:
            # The driver let it go (removed as missing, its pod gone before any snapshot showed
            # it): it no longer holds a slot. Spark keeps it, and its target is never met.
            del self._unseen_known[executor_id]
        self._expire_unseen_requests()
        if snapshots:
            self._last_snapshot = snapshots[-1]
        self._deleted.revisit(self._last_snapshot, self._delete_pending, self._clock.monotonic())
        self._deleted.forget_gone(self._last_snapshot)
        self._creator.observe_starts(snapshots)
        self._features.observe(
            RoundFacts(
                app_id=self._app_or_fail(),
                snapshot=self._last_snapshot,
                batch=snapshots,
                known=known,
                now=self._clock.time(),
            )
        )
        states = self._profile_states(known)
        states = [self._scale_down(state) for state in states]
        self._scale_up(states)
        pending_unknown = sum(len(s.pending_unknown) for s in states)
        with self._lock:
            self._outstanding = pending_unknown + len(self._unseen)

    def _recover(self) -> bool:
        """Before the first create, adopt the pods in the cluster (`recovery.py`) and read the
        id ledger's mark (`ids.py`); both are retried next round when they fail."""
        try:
            mark = self._ids.read_mark()
        except PodOperationError as error:
            logger.warning("Could not read the executor id ledger (%s); retrying.", error)
            self._progress.stall(
                ID_LEDGER_UNREADABLE,
                f"the executor id ledger cannot be read ({error}); no executor is created "
                "before it is, since an id could otherwise be issued twice (retried every "
                "allocation round)",
            )
            return False
        self._progress.resume(ID_LEDGER_UNREADABLE)
        adoption = recover(
            self._pods,
            self._labels,
            self._app_or_fail(),
            maximum=self._settings.allocation_maximum,
            reserved_through=mark,
        )
        if adoption is None:
            return False
        first = self._ids.start(mark, adoption.highest_id)
        if first > 1:
            logger.info("New executor ids start at %d.", first)
        now = self._clock.monotonic()
        self._unseen.update({i: _Request(now, p) for i, p in adoption.live.items()})
        self._recovered = True
        return True

    def _forget_seen(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """Drop the requests any snapshot of the batch shows.

        A delta snapshot adds only its changed ids to its parent's, so only full snapshots need a
        lookup per waiting id: a batch of thousands of watch updates costs what changed.
        """
        waiting = set(self._unseen) | set(self._unseen_known)
        if not waiting or not snapshots:
            return
        seen: set[int] = set()
        for snapshot in snapshots:
            if snapshot.changed_ids is None:
                seen.update(i for i in waiting if i in snapshot.executor_pods)
            else:
                seen.update(waiting.intersection(snapshot.changed_ids))
        for executor_id in seen:
            self._unseen.pop(executor_id, None)
            self._unseen_known.pop(executor_id, None)

    def _expire_unseen_requests(self) -> None:
        if not self._unseen:
            return
        now = self._clock.monotonic()
        timeout = self._settings.pod_creation_timeout
        expired = sorted(i for i, r in self._unseen.items() if now - r.created_at > timeout)
        if not expired:
            return
        logger.warning(
            "Executors with ids %s were not detected in the Kubernetes cluster after %.0f s "
            "despite the fact that a previous allocation attempt tried to create them. The "
            "executors may have been deleted but the application missed the deletion event.",
            ",".join(map(str, expired)),
            timeout,
        )
        for executor_id in expired:
            del self._unseen[executor_id]
        self._creator.starts.forget(expired)
        if self._settings.delete_on_termination:
            # Spark's delete by id; followed until gone as scale-down's are (retried only while
            # Pending): a denied delete must not leak them.
            self._deleted.delete(expired, self._delete_expired, now)

    def _profile_states(self, known: frozenset[int]) -> list[ProfileState]:
        """Every profile with a target, classified from the last snapshot, in ascending id."""
        with self._lock:
            targets = dict(self._targets)
        running: dict[int, int] = dict.fromkeys(targets, 0)
        pending_unknown: dict[int, list[int]] = {p: [] for p in targets}
        pending_known: dict[int, int] = dict.fromkeys(targets, 0)
        deleted = self._deleted.ids
        for executor_id, observed in self._last_snapshot.executor_pods.items():
            kind = observed.state
            if kind is ExecutorState.TERMINATING and _still_running(observed.pod.phase):
                # Spark 4.3 counts a Running pod being deleted as running until it is gone
                # (its toState makes it PodRunning): no replacement while it shuts down.
                kind = ExecutorState.RUNNING
            if (kind is not ExecutorState.RUNNING and kind is not ExecutorState.PENDING) or (
                executor_id in deleted
            ):
                continue
            profile_id = profile_id_of(observed.pod, self._labels)
            if profile_id not in targets:
                continue
            if kind is ExecutorState.RUNNING:
                running[profile_id] += 1
            elif executor_id in known:
                pending_known[profile_id] += 1
            else:
                pending_unknown[profile_id].append(executor_id)
        unseen: dict[int, list[int]] = {p: [] for p in targets}
        for executor_id, request in self._unseen.items():
            unseen.setdefault(request.resource_profile_id, []).append(executor_id)
        unseen_known: dict[int, int] = dict.fromkeys(targets, 0)
        for profile_id in self._unseen_known.values():
            unseen_known[profile_id] = unseen_known.get(profile_id, 0) + 1
        return [
            ProfileState(
                profile_id=profile_id,
                target=targets[profile_id],
                running=running[profile_id],
                pending_unknown=tuple(sorted(pending_unknown[profile_id])),
                pending_known=pending_known[profile_id],
                unseen=tuple(sorted(unseen.get(profile_id, ()))),
                unseen_known=unseen_known.get(profile_id, 0),
            )
            for profile_id in sorted(targets)
        ]

    # Scale-down.

    def _scale_down(self, state: ProfileState) -> ProfileState:
        if state.pod_count <= state.target:
            return state
        # Unseen requests age on the monotonic clock; Pending pods by their creation timestamps.
        now, wall = self._clock.monotonic(), self._clock.time()
        pods = self._last_snapshot.executor_pods
        pending_ages: dict[int, float | None] = {}
        for executor_id in state.pending_unknown:
            stamp = pods[executor_id].pod.creation_timestamp
            pending_ages[executor_id] = None if stamp is None else wall - stamp.timestamp()
        excess = excess_to_delete(
            state,
            request_ages={i: now - self._unseen[i].created_at for i in state.unseen},
            pending_ages=pending_ages,
            idle_timeout=self._settings.executor_idle_timeout,
        )
        if not excess:
            return state
        ids = excess.ids
        logger.info(
            "Deleting %d excess pod requests of resource profile %d (%s).",
            len(ids),
            state.profile_id,
            ",".join(map(str, ids)),
        )
        # Deleted or being retried, the ids count as deleted (`scaledown.py`): never orphaned.
        self._deleted.delete(ids, self._delete_pending, self._clock.monotonic())
        for executor_id in excess.unseen:
            self._unseen.pop(executor_id, None)
        self._creator.starts.forget(ids)
        dropped = set(ids)
        return ProfileState(
            profile_id=state.profile_id,
            target=state.target,
            running=state.running,
            pending_unknown=tuple(i for i in state.pending_unknown if i not in dropped),
            pending_known=state.pending_known,
            unseen=tuple(i for i in state.unseen if i not in dropped),
            unseen_known=state.unseen_known,
        )

    def _delete_expired(self, ids: frozenset[int]) -> None:
        self._pods.delete_by_selector(
            PodSelector.executors_of(self._labels, self._app_or_fail(), ids)
        )

    def _delete_pending(self, ids: frozenset[int]) -> None:
        """Scale-down's one call: the Pending pods of `ids`, never one that turned Running."""
        selector = PodSelector(
            labels=self._labels.for_app(self._app_or_fail()),
            label_in={self._labels.executor_id: frozenset(str(i) for i in ids)},
            phase="Pending",
        )
        self._pods.delete_by_selector(selector)

    # Scale-up.

    def _scale_up(self, states: list[ProfileState]) -> None:
        if self._failures is not None and self._failures.application_failure is not None:
            return  # too many executors failed (spark.executor.maxNumFailures): stopped for good
        settings = self._settings
        held = {s.profile_id for s in states if self._creator.held(s.profile_id)}
        if settings.wait_for_pending_pods:
            held.update(s.profile_id for s in states if s.pending_unknown or s.pending_known)
        all_states = {s.profile_id: s for s in states}
        for state in states:
            if state.unseen and state.running < state.target:
                logger.debug(
                    "Still waiting for %d executors of resource profile %d requested but not yet "
                    "seen before requesting more (%d pending in the cluster).",
                    len(state.unseen),
                    state.profile_id,
                    len(state.pending_unknown) + state.pending_known,
                )
        counts = request_counts(
            states,
            limits=Limits(
                max_pending=settings.max_pending_pods,
                max_pending_per_rp=settings.max_pending_pods_per_rp,
            ),
            batch_sizes={s.profile_id: self._creator.round_cap(s.profile_id) for s in states},
            held=held,
        )
        short: dict[int, int] = {}
        held_for_ledger = False
        for profile_id, count in counts.items():
            allowed = self._ids.reserve(count)
            if allowed < count:
                if self._ids.left < count:
                    short[profile_id] = count - self._ids.left
                else:
                    held_for_ledger = True
                    self._report_reservation_failure(profile_id, count - allowed)
            elif self._ids.last_error is None:
                self._reservation_reported = False
            if allowed <= 0:
                continue
            allowed = self._features.cap(profile_id, allowed)  # e.g. waiting to reuse claims
            if allowed <= 0:
                continue
            state = all_states[profile_id]
            logger.info(
                "Going to request %d executors from Kubernetes for resource profile %d "
                "(target %d, %d running, %d not running).",
                allowed,
                profile_id,
                state.target,
                state.running,
                state.not_running,
            )
            requested = self._creator.create(
                app_id=self._app_or_fail(),
                profile_id=profile_id,
                count=allowed,
                ids=self._ids,
            )
            for r in requested:
                self._unseen[r.executor_id] = _Request(r.at, r.resource_profile_id)
            self._lost.add(r.executor_id for r in requested if r.answer_lost)
        if not held_for_ledger:
            self._progress.resume(ID_LEDGER_UNWRITABLE)
        # Told after the round issued the ids it still could: the numbers are then final.
        if short and self._ids.left == 0:
            profile_id = min(short)
            self._report_maximum(profile_id, short[profile_id])

    def _report_reservation_failure(self, profile_id: int, held_back: int) -> None:
        error = self._ids.last_error
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
        maximum = self._settings.allocation_maximum
        message = (
            f"Exceeded the pod creation limit spark.kubernetes.allocation.maximum={maximum}: "
            f"{self._ids.issued} executor ids were issued since this allocator started (Spark's "
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

    def _app_or_fail(self) -> str:
        if self._app_id is None:
            raise RuntimeError("the allocator was not started")
        return self._app_id
