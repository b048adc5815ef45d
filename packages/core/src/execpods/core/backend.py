"""The backend: the one facade over a running allocation, as `compose_backend` assembles it.

It is Spark's `KubernetesClusterSchedulerBackend` without the Spark. Everything a caller (the
sidecar's servicer, the embedded sidecar, a benchmark, a test) does with a running allocation goes
through it: ask for totals, kill executors, read the counts, subscribe to snapshots, open a stream
(snapshots, numbered removals, the application's failure, notices: one handle), start and stop.
Nothing reaches past it to the store, the reconcilers or the removal channel.

It starts in Spark's order (SPARK-24248's `KubernetesClusterSchedulerBackend.start`: target =
initial executors, lifecycle manager, allocator, then the sources, watch before poll) so that the
reconcilers are subscribed before the first events arrive, and stops in Spark's order (the store,
the sources, delete the application's executor pods, close the client), each step tolerant of the
others failing so that a broken watch cannot leave pods behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

from execpods.core.allocator import ExecutorCounts, ExecutorPodsAllocator
from execpods.core.errors import AllocationStopped, PodOperationError
from execpods.core.features import FeatureParts, FeatureSet
from execpods.core.idlists import summarize_ids
from execpods.core.ids import IdBudget
from execpods.core.kills import GracefulKiller
from execpods.core.lifecycle import ExecutorPodsLifecycleManager
from execpods.core.notices import AllocatorNotice, NoticeKind, NoticeListener
from execpods.core.pendingtimeout import PendingTimeoutFeature
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    Clock,
    PodSelector,
    Scheduler,
    SnapshotsCallback,
    SnapshotSource,
    SnapshotsStore,
    Subscription,
)
from execpods.core.profiles import ResourceProfile
from execpods.core.progress import ProgressChange, Stall
from execpods.core.quota import QuotaFeature
from execpods.core.registration import RegistrationTimeout
from execpods.core.removals import (
    FailureListener,
    InvalidPosition,
    Opened,
    Position,
    RemovalChannel,
    RemovalListener,
)
from execpods.core.scheduling import ThreadScheduler
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.totals import TotalsRequest

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "AllocationCounts",
    "ExecutorPodsBackend",
    "InvalidPosition",
    "ShutdownReport",
    "StreamHandle",
]

_FIRST_RETRY_S = 0.2
_MAX_RETRY_S = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ShutdownReport:
    """What stopping did to the application's executor pods."""

    complete: bool
    """True unless deleting the executor pods failed until the grace period ran out."""
    deleted: int = 0
    attempts: int = 0
    error: str = ""
    """The last failure, when not complete."""
    left: tuple[str, ...] | None = ()
    """The executor pods still there when not complete; None when the API could not say."""

    def describe(self, app_id: str) -> str:
        if self.complete:
            return f"deleted the {self.deleted} executor pods of application {app_id}"
        if self.left is None:
            what = "an unknown number of executor pods (the API did not answer a list either)"
        else:
            what = f"{len(self.left)} executor pods ({summarize_ids(self.left)})"
        return (
            f"could not delete the executor pods of application {app_id} in {self.attempts} "
            f"attempts ({self.error}); {what} may be left"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationCounts:
    """The target and what the latest snapshot shows of it."""

    total: int
    """The total number of executors asked for, over every resource profile."""
    running: int
    pending: int


class StreamHandle:
    """One open stream (`ExecutorPodsBackend.open_stream`): where it starts in the numbered
    removals, what it missed, and one `cancel()` that ends everything it registered."""

    __slots__ = ("_cancels", "_live", "backlog", "resync", "start")

    def __init__(self, opened: Opened, live: set[object]) -> None:
        self.start: Position = opened.start
        """The position the stream starts from: removals after it come, each once."""
        self.backlog = opened.backlog
        """The removals it missed (already handed to its listener)."""
        self.resync = opened.resync
        """Some removals after the resume position are gone: the client should re-sync."""
        self._cancels: list[Callable[[], object]] = [opened.cancel]
        self._live = live

    def cancel(self) -> None:
        """Stop every delivery to this stream (idempotent)."""
        cancels, self._cancels = self._cancels, []
        for cancel in reversed(cancels):
            cancel()
        self._live.discard(self)


class _Subscription:
    __slots__ = ("_live", "_store_subscription")

    def __init__(self, store_subscription: Subscription, live: set[object]) -> None:
        self._store_subscription = store_subscription
        self._live = live

    def cancel(self) -> None:
        self._store_subscription.cancel()
        self._live.discard(self)


class ExecutorPodsBackend:
    """The facade; made by `execpods.core.compose_backend`, not by hand."""

    def __init__(
        self,
        *,
        parts: FeatureParts,
        store: SnapshotsStore,
        allocator: ExecutorPodsAllocator,
        lifecycle: ExecutorPodsLifecycleManager,
        removals: RemovalChannel,
        features: FeatureSet,
        request_scheduler: Scheduler | None = None,
        sources: Sequence[SnapshotSource] = (),
        close: Callable[[], None] | None = None,
    ) -> None:
        """`parts` are what the backend shares with its features (the app id, settings, clock,
        pod operations, driver view, notice hub and progress monitor); the driver's requests run
        on `request_scheduler` (one worker thread when None)."""
        self.app_id = parts.app_id
        self.settings = parts.settings
        self._store = store
        self._allocator = allocator
        self._lifecycle = lifecycle
        self._pods = parts.pod_operations
        self._driver = parts.driver
        self._requests: Scheduler = (
            request_scheduler
            if request_scheduler is not None
            else ThreadScheduler(workers=1, name="execpods-requests")
        )
        self._sources = tuple(sources)
        self._close = close
        self._removals = removals
        self._notices = parts.notices
        self._registration = next((f for f in features if isinstance(f, RegistrationTimeout)), None)
        self._quota = next((f for f in features if isinstance(f, QuotaFeature)), None)
        self._pending = next((f for f in features if isinstance(f, PendingTimeoutFeature)), None)
        self._ids = next(f.ids for f in features if isinstance(f, IdBudget))
        self._live: set[object] = set()
        self._clock: Clock = parts.clock
        self.progress = parts.progress
        """Whether allocation can make progress; any part may say it cannot (`progress.py`).
        Each stall and its end reach every stream as a notice."""
        self.progress.add_listener(self._progress_changed)
        self._started = False
        self._request_lock = threading.Lock()
        self._killer = GracefulKiller(
            settings=parts.settings,
            pod_operations=parts.pod_operations,
            scheduler=self._requests,
            on_killed=lifecycle.executors_killed,
            before_delete=features.killing,
        )

    # Start and stop.

    def start(self, *, initial_executors: int | None = None) -> None:
        initial = (
            self.settings.initial_executors if initial_executors is None else initial_executors
        )
        TotalsRequest.of(initial).check(
            declared=self._allocator.profiles, max_total=self.settings.max_total
        )
        # From here on stopping deletes the app's executor pods; a backend that never started
        # (its server failed to bind, say) must touch nothing: the pods may be another live
        # sidecar's.
        self._started = True
        self._allocator.set_total_expected_executors(initial)
        self._lifecycle.start(self._driver)
        self._allocator.start(self.app_id, self._driver)
        for source in self._sources:
            source.start(self.app_id)
        logger.info("Started allocating executors for application %s.", self.app_id)

    def stop(
        self,
        *,
        wait: Callable[[float], None] = time.sleep,
        hopeless: Callable[[], str | None] = lambda: None,
    ) -> ShutdownReport:
        """Stop in Spark's order; returns what happened to the executor pods.

        Deleting them is retried with back-off for `execpods.shutdown.deleteGrace` while the API
        fails (`wait` sleeps between attempts), unless `hopeless` gives a reason not to after a
        failed attempt (the sidecar's: the API server never answered, so no retry can reach it
        and no pod of this run exists); a backend that was never started deletes nothing.
        """
        report = ShutdownReport(complete=True)

        def delete() -> None:
            nonlocal report
            report = self._delete_all_executors(wait, hopeless)

        steps: list[tuple[str, Callable[[], object]]] = [
            ("stop the snapshots store", self._store.stop)
        ]
        steps.extend((f"stop {type(s).__name__}", s.stop) for s in self._sources)
        if self.settings.delete_on_termination and self._started:
            steps.append(("delete the executor pods", delete))
        steps.append(("stop the request scheduler", self._requests.shutdown))
        if self._close is not None:
            steps.append(("close the Kubernetes client", self._close))
        for what, step in steps:
            try:
                step()
            except Exception:
                logger.exception("Failed to %s while stopping; going on with the rest.", what)
        logger.info("Stopped allocating executors for application %s.", self.app_id)
        return report

    def _delete_all_executors(
        self, wait: Callable[[float], None], hopeless: Callable[[], str | None]
    ) -> ShutdownReport:
        selector = PodSelector.executors_of(self.settings.labels, self.app_id)
        deadline = self._clock.monotonic() + self.settings.delete_grace
        delay = _FIRST_RETRY_S
        attempts = 0
        while True:
            attempts += 1
            try:
                deleted = self._pods.delete_by_selector(selector)
            except PodOperationError as error:
                last = error
            else:
                logger.info("Deleted %d executor pods of application %s.", deleted, self.app_id)
                return ShutdownReport(complete=True, deleted=deleted, attempts=attempts)
            reason = hopeless()
            if reason is not None:
                report = ShutdownReport(complete=False, attempts=attempts, error=reason, left=None)
                logger.error("Stopping without retrying: %s.", report.describe(self.app_id))
                return report
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                break
            logger.warning(
                "Could not delete the executor pods of application %s (%s); retrying for "
                "another %.1f s.",
                self.app_id,
                last,
                remaining,
            )
            wait(min(delay, remaining))
            delay = min(delay * 2, _MAX_RETRY_S)
        left: tuple[str, ...] | None
        try:
            left = tuple(sorted(pod.name for pod in self._pods.list(selector)))
        except PodOperationError:
            left = None
        report = ShutdownReport(complete=False, attempts=attempts, error=str(last), left=left)
        logger.error("Stopping: %s.", report.describe(self.app_id))
        return report

    # What the driver asks for.

    def request(self, request: TotalsRequest) -> Future[None]:
        """Apply a driver's request: judged whole first (`TotalsRequest.check`: a broken rule
        raises `ValueError` and nothing changes), then its profiles declared and its totals set
        asynchronously, as Spark's `doRequestTotalExecutors`.

        Judging and declaring happen under one lock, so two requests cannot both pass a check
        that only one of them may pass. Raises `RuntimeError` when the backend is shutting down.
        """
        with self._request_lock:
            if self._ids.closed and any(total > 0 for total in request.totals.values()):
                raise AllocationStopped(
                    "the driver stopped this application's allocation (RequestTotal.stopping): "
                    "no executor is created for it again"
                )
            request.check(declared=self._allocator.profiles, max_total=self.settings.max_total)
            self._allocator.profiles.declare(request.profiles)
            totals = dict(request.totals)
            return self._run_async(lambda: self._allocator.set_totals(totals))

    def stop_allocating(self) -> Future[None]:
        """The driver's allocation ends for good, as Spark's `ExecutorPodsAllocator.stop`: every
        target drops to 0 and no executor id is issued again (`ExecutorIds.close`: the id ledger
        is left to the application's clean-up). The pods are the driver's to delete (Spark's
        stop deletes them by label); a later request for more executors raises
        `AllocationStopped`."""
        with self._request_lock:
            self._ids.close()
            totals = dict.fromkeys(self._allocator.profiles.ids(), 0)
            logger.info(
                "The driver stopped allocating executors for application %s: no executor id is "
                "issued again, and the id ledger is left to the application's clean-up.",
                self.app_id,
            )
            return self._run_async(lambda: self._allocator.set_totals(totals))

    @property
    def allocation_stopped(self) -> bool:
        """Whether the driver stopped the allocation for good (`stop_allocating`)."""
        return self._ids.closed

    def request_total(
        self, total: int, *, resource_profile_id: int = DEFAULT_RESOURCE_PROFILE_ID
    ) -> Future[None]:
        """`request(TotalsRequest.of(total))`: one profile's total."""
        return self.request(TotalsRequest.of(total, resource_profile_id=resource_profile_id))

    def set_failure_limit(self, *, max_failures: int, validity_interval: float | None) -> None:
        """Replace the executor failure limit and its window with the driver's (`ValueError` on
        a negative limit or a non-positive window, and nothing changes)."""
        self._lifecycle.failures.set_limit(
            max_failures=max_failures, validity_interval=validity_interval
        )

    def failure_limit(self) -> tuple[int, float | None]:
        """The failure limit and window in force."""
        tracker = self._lifecycle.failures
        return tracker.max_failures, tracker.validity_interval

    def declared_profile(self, profile_id: int) -> ResourceProfile | None:
        """The resource profile declared under this id, if any."""
        return self._allocator.profiles.get(profile_id)

    def declared_profile_ids(self) -> list[int]:
        """The ids of every declared resource profile (0, the default, always)."""
        return self._allocator.profiles.ids()

    def is_deleted(self, executor_id: int) -> bool:
        """Whether scale-down deleted this executor and its pod may still show (Spark's
        `isDeleted`: a driver refuses such an executor's late registration)."""
        return self._allocator.is_deleted(executor_id)

    def targets(self) -> dict[int, int]:
        """The target of every resource profile."""
        return self._allocator.targets()

    def effective_targets(self) -> dict[int, int]:
        """The target of every resource profile as allocation pursues it: the driver's, capped
        at what the namespace's quota admits and lowered by the pending timeout."""
        effective = self._allocator.targets()
        for feature in (self._quota, self._pending):
            if feature is not None:
                for profile_id, capped in feature.effective_targets().items():
                    effective[profile_id] = min(effective.get(profile_id, capped), capped)
        return effective

    def kept_out_by_quota(self) -> int:
        """Executors the namespace's quota keeps from being created now (all profiles)."""
        return 0 if self._quota is None else self._quota.kept_out()

    def add_notice_listener(self, listener: NoticeListener) -> Callable[[], None]:
        """Hear every later allocator notice (refused or throttled creates, the id cap, the
        features' notices)."""
        return self._notices.add_listener(listener)

    def set_registration_timeout(self, seconds: float) -> None:
        """The driver's registration timeout (`UpdateDriverExecutors`; 0 turns it off):
        `ValueError` when negative, and nothing changes."""
        if self._registration is None:
            raise RuntimeError("this backend was composed without a registration timeout")
        self._registration.set_timeout(seconds)

    def _progress_changed(self, change: ProgressChange) -> None:
        self._notices.notify(stall_notice(change.stall, stalled=change.stalled))

    def highest_executor_id(self) -> int:
        """The highest executor id that may exist for this application: issued (by this process
        or, as the id ledger and the adopted pods say, an earlier one) or in the current
        snapshot. A driver cannot know an executor above it: what it says of such ids is kept
        nowhere (issue 32: driver input stays bounded)."""
        pods = self._store.current_snapshot.executor_pods
        return max(self._ids.highest, max(pods, default=0))

    def kill_executors(self, executor_ids: Collection[int]) -> Future[int]:
        """Delete these executors' pods gracefully (`GracefulKiller`, `KILL_CHUNK` ids a request);
        the events drive the rest."""
        ids = frozenset(executor_ids)
        if not ids:
            done: Future[int] = Future()
            done.set_result(0)
            return done
        return self._run_async(lambda: self._killer.kill(self.app_id, ids))

    def _run_async(self, action: Callable[[], T]) -> Future[T]:
        """Run `action` on the request scheduler; `RuntimeError` if it is shut down."""
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(action())
            except BaseException as error:
                future.set_exception(error)

        self._requests.submit(run)
        return future

    # What the driver reads.

    @property
    def current_snapshot(self) -> ExecutorPodsSnapshot:
        return self._store.current_snapshot

    def counts(self) -> AllocationCounts:
        # O(1): the snapshot keeps its counts per state (a driver may ask hundreds of times a
        # second).
        counts = ExecutorCounts.of(self._store.current_snapshot)
        return AllocationCounts(
            total=sum(self._allocator.targets().values()),
            running=counts.running,
            pending=counts.pending,
        )

    @property
    def failed_executors(self) -> int:
        """Executor failures counted toward `spark.executor.maxNumFailures` (those within
        `spark.executor.failuresValidityInterval`): what the fault suite reports."""
        return self._lifecycle.failures.failed_executors

    def subscribe(self, interval: float, on_snapshots: SnapshotsCallback) -> Subscription:
        """`on_snapshots` gets the current snapshot, then every `interval` s the ones since, until
        the returned subscription is cancelled (a stream also hears removals: `open_stream`).
        Raises `RuntimeError` once the backend has stopped."""
        subscription = _Subscription(self._store.add_subscriber(interval, on_snapshots), self._live)
        self._live.add(subscription)
        return subscription

    def open_stream(
        self,
        interval: float,
        *,
        on_snapshots: SnapshotsCallback,
        on_removal: RemovalListener,
        on_application_failure: FailureListener | None = None,
        on_notice: NoticeListener | None = None,
        resume_from: Position | None = None,
    ) -> StreamHandle:
        """Open one driver stream: its snapshots every `interval` s (the current one first), each
        removal the lifecycle manager reports after `resume_from` (or from now), numbered, once
        and in order, the application's failure (at once, when it came before), and the
        allocator's notices; all until the handle is cancelled.

        Raises `InvalidPosition` for a resume position this process never gave out, and
        `RuntimeError` once the backend has stopped; either way nothing stays registered.
        """
        opened = self._removals.open(resume_from, on_removal, on_application_failure)
        handle = StreamHandle(opened, self._live)
        try:
            if on_notice is not None:
                with self.progress.held() as stalls:  # opened while stalled: it hears why
                    handle._cancels.append(self._notices.add_listener(on_notice))
                    for stall in stalls:
                        on_notice(stall_notice(stall, stalled=True))
            handle._cancels.append(self._store.add_subscriber(interval, on_snapshots).cancel)
        except BaseException:
            handle.cancel()
            raise
        self._live.add(handle)
        return handle

    @property
    def removal_position(self) -> Position:
        """This process's incarnation and the sequence number of its newest removal (0 before
        the first): where a stream opened now starts."""
        return Position(incarnation=self._removals.incarnation, sequence=self._removals.sequence)

    @property
    def subscription_count(self) -> int:
        """How many subscriptions and streams are live (the sidecar's open streams), for health
        checks and leak tests."""
        return len(self._live)


def stall_notice(stall: Stall, *, stalled: bool) -> AllocatorNotice:
    """The notice every stream gets when a stall begins (`stalled`) or ends."""
    return AllocatorNotice(
        kind=NoticeKind.ALLOCATION_STALLED if stalled else NoticeKind.ALLOCATION_RESUMED,
        message=(
            f"Allocation cannot make progress: {stall.message}"
            if stalled
            else f"Allocation can make progress again ({stall.reason} is over)."
        ),
        resource_profile_id=DEFAULT_RESOURCE_PROFILE_ID,
        count=0,
        reason=stall.reason,
    )
