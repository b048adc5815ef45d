"""The composition root: the one place a running allocation is assembled from its ports.

Every caller (the sidecar's wiring, the embedded sidecar, the benchmarks, the tests) hands
`compose_backend` the parts that face the world, and hooks for what it must vary (how the store
delivers, how rounds are timed), and gets back one `ExecutorPodsBackend`, not yet started. What
is built here, and only here:

- the snapshot store, by the `store` factory, which is handed the labels, the pod classifier and
  the clock that the settings derive, so that every store (threaded, deterministic, timed)
  classifies pods alike;
- the sources (watch, poll), made by `sources` over the store's write side;
- the allocator and the lifecycle manager over the store's read side, sharing one
  `ExecutorFailureTracker` (refused creations and failed pods both count), each round reported to
  `on_round` when given;
- the lifecycle manager's one observer, the removal channel (`removals.py`): it numbers each
  removal once, keeps the newest `removal_window` for streams that resume, hands each to every
  open stream and to the given `observers`, and each round to `round_observers` (the sidecar's
  driver view, which hears removals only as the `DriverView`);
- the backend, which owns the start and stop order.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

from execpods.core.adaptive import API_RATE_CEILING
from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.backend import ExecutorPodsBackend
from execpods.core.badnodes import AvoidingPodBuilder, NodeBlocklist
from execpods.core.claims import ClaimingPodOperations, ExecutorClaims
from execpods.core.clock import SystemClock
from execpods.core.creation import CreateRunner, ThreadPoolRunner
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.labels import ExecutorLabels
from execpods.core.lifecycle import ExecutorPodsLifecycleManager
from execpods.core.oom_recovery import OomRecoveryMode, RecoveryModePodBuilder
from execpods.core.ports import (
    Clock,
    DriverView,
    ExecutorIdLedger,
    ExecutorPodBuilder,
    LifecycleObserver,
    PodOperations,
    RoundObserver,
    Scheduler,
    SnapshotsCallback,
    SnapshotSource,
    SnapshotsReader,
    SnapshotsStore,
    SnapshotsWriter,
    Subscription,
)
from execpods.core.profiles import ResourceProfiles
from execpods.core.progress import ProgressMonitor
from execpods.core.registration import RegistrationTimeout
from execpods.core.removals import RemovalChannel
from execpods.core.scheduling import ThreadScheduler
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import PodClassifier
from execpods.core.store import ScheduledSnapshotsStore

DEFAULT_REMOVAL_WINDOW = 10_000
"""Removals kept for streams that resume (the sidecar passes its
execpods.sidecar.stream.removalWindow)."""

SourcesFactory = Callable[[SnapshotsWriter], Sequence[SnapshotSource]]
"""Makes the sources that feed a store, in start order (watch before poll); may make none."""

RoundHook = Callable[[str, float], None]
"""Hears each reconciler round: `allocator` or `lifecycle`, and how long it took (seconds on the
backend's clock). Called on the round's thread; it must be quick and never raise."""


class StoreFactory(Protocol):
    """Makes the snapshot store from what the settings derive (`DeterministicSnapshotsStore` is
    one, for tests; `scheduled_store` makes the production one)."""

    def __call__(
        self, *, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock
    ) -> SnapshotsStore: ...


def scheduled_store(scheduler: Scheduler | None = None) -> StoreFactory:
    """The production store, delivering on `scheduler` (two worker threads when None)."""

    def make(*, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock) -> SnapshotsStore:
        return ScheduledSnapshotsStore(
            scheduler
            if scheduler is not None
            else ThreadScheduler(workers=2, name="execpods-subscribers"),
            clock=clock,
            labels=labels,
            classifier=classifier,
        )

    return make


def no_sources(store: SnapshotsWriter) -> Sequence[SnapshotSource]:
    """For a backend whose store is fed by the caller (tests, benchmarks)."""
    return ()


def compose_backend(
    *,
    app_id: str,
    settings: CoreSettings,
    pod_operations: PodOperations,
    pod_builder: ExecutorPodBuilder,
    driver: DriverView,
    sources: SourcesFactory = no_sources,
    observers: Sequence[LifecycleObserver] = (),
    round_observers: Sequence[RoundObserver] = (),
    removal_window: int = DEFAULT_REMOVAL_WINDOW,
    clock: Clock | None = None,
    store: StoreFactory | None = None,
    on_round: RoundHook | None = None,
    request_scheduler: Scheduler | None = None,
    close: Callable[[], None] | None = None,
    profiles: ResourceProfiles | None = None,
    concurrent_creates: bool = False,
    runner: CreateRunner | None = None,
    rng: random.Random | None = None,
    id_ledger: ExecutorIdLedger | None = None,
    claims: ExecutorClaims | None = None,
    blocklist: NodeBlocklist | None = None,
    registration: RegistrationTimeout | None = None,
    api_rate_ceiling: float = API_RATE_CEILING,
) -> ExecutorPodsBackend:
    """The backend over these ports, not yet started.

    `store` makes the snapshot store (by default `scheduled_store()`: two worker threads);
    `on_round` hears every reconciler round; `close` runs last on stop (the API client). Without
    a request scheduler, requests run on one worker thread, as in production. `profiles` are the
    declared resource profiles (shared with the pod builder). A round's creates run one after
    another, or through `runner`, or with `concurrent_creates` on up to
    `execpods.allocation.batch.concurrency` threads; `rng` draws the back-off jitter.
    `id_ledger` keeps the highest reserved executor id beyond the process (the adapter's keeps it
    in the cluster): ids are reserved through it before use and never issued twice across
    restarts; None keeps the mark in the process only (restarts are then safe only while the pods
    of the highest ids exist).
    With `claims`, the allocator's creates also make the executors' OnDemand claims, and stop
    deletes the application's claims. With `blocklist`, new executor pods keep off the nodes it
    blocks (it counts failures per node each allocation round, and its notices go to the
    allocator's listeners). With `registration`, Running executors the driver does not know
    in time are deleted and reported with its reason. `api_rate_ceiling` is the most API calls
    a second the client's rate policy may allow (the adapter's settings), which sizes a round.
    """
    clock = clock if clock is not None else SystemClock()
    progress = ProgressMonitor(clock=clock)
    make_store = store if store is not None else scheduled_store()
    snapshots = make_store(
        labels=settings.labels,
        classifier=PodClassifier(
            executor_container=settings.executor_container_name,
            check_all_containers=settings.check_all_containers,
        ),
        clock=clock,
    )
    recovery = OomRecoveryMode(
        enabled=settings.recovery_mode_enabled, cores=settings.recovery_cores
    )
    pod_builder = RecoveryModePodBuilder(
        pod_builder, recovery, container_name=settings.executor_container_name
    )
    removals = RemovalChannel(
        window=removal_window, observers=[*observers, recovery], round_observers=round_observers
    )
    if concurrent_creates:
        if runner is not None:
            raise ValueError("give either a runner or concurrent_creates, not both")
        pool = ThreadPoolRunner(workers=settings.batch_concurrency)
        close = _then(pool.shutdown, close)  # the create threads go with the backend
        runner = pool
    failures = ExecutorFailureTracker.from_settings(settings, clock)
    creating: PodOperations = pod_operations
    if claims is not None:
        creating = ClaimingPodOperations(
            pod_operations, claims, executor_id_label=settings.labels.executor_id
        )
        close = _then(partial(claims.stop, app_id), close)
    if blocklist is not None:
        pod_builder = AvoidingPodBuilder(pod_builder, blocklist)
    allocator = ExecutorPodsAllocator(
        settings=settings,
        pod_builder=pod_builder,
        pod_operations=creating,
        store=_timed(snapshots, "allocator", on_round, clock),
        clock=clock,
        failure_tracker=failures,
        profiles=profiles,
        runner=runner,
        rng=rng,
        id_ledger=id_ledger,
        claims=claims,
        round_hooks=[h for h in (claims, blocklist) if h is not None],
        progress=progress,
        api_rate_ceiling=api_rate_ceiling,
    )
    recovery.set_notify(allocator.notify)
    if blocklist is not None:
        blocklist.set_notify(allocator.notify)
    lifecycle = ExecutorPodsLifecycleManager(
        settings=settings,
        pod_operations=pod_operations,
        store=_timed(snapshots, "lifecycle", on_round, clock),
        clock=clock,
        observer=removals,
        failure_tracker=failures,
    )
    if registration is not None:
        registration.attach(driver=driver, expect_removal=lifecycle.expect_removal)
        snapshots.add_subscriber(settings.event_processing_interval, registration.on_new_snapshots)
    return ExecutorPodsBackend(
        app_id=app_id,
        settings=settings,
        store=snapshots,
        allocator=allocator,
        lifecycle=lifecycle,
        pod_operations=pod_operations,
        driver=driver,
        removals=removals,
        request_scheduler=(
            request_scheduler
            if request_scheduler is not None
            else ThreadScheduler(workers=1, name="execpods-requests")
        ),
        sources=sources(snapshots),
        close=close,
        clock=clock,
        progress=progress,
    )


def _timed(
    store: SnapshotsReader, kind: str, on_round: RoundHook | None, clock: Clock
) -> SnapshotsReader:
    return store if on_round is None else _ReportedRounds(store, kind, on_round, clock)


class _ReportedRounds:
    """The store's read side as one reconciler sees it: each of its rounds reported to a hook."""

    def __init__(self, store: SnapshotsReader, kind: str, on_round: RoundHook, clock: Clock):
        self._store = store
        self._kind = kind
        self._on_round = on_round
        self._clock = clock

    def add_subscriber(self, interval: float, callback: SnapshotsCallback) -> Subscription:
        kind, on_round, clock = self._kind, self._on_round, self._clock

        def timed(snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
            started = clock.monotonic()
            try:
                callback(snapshots)
            finally:
                on_round(kind, clock.monotonic() - started)

        timed.__qualname__ = getattr(callback, "__qualname__", kind)
        return self._store.add_subscriber(interval, timed)

    def notify_subscribers(self) -> None:
        self._store.notify_subscribers()

    @property
    def current_snapshot(self) -> ExecutorPodsSnapshot:
        return self._store.current_snapshot


def _then(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    def both() -> None:
        try:
            first()
        finally:
            if then is not None:
                then()

    return both
