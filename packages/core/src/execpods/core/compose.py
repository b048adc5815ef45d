"""The composition root: the one place a running allocation is assembled from its ports.

Every caller (the sidecar's wiring, the embedded sidecar, the benchmarks, the tests) hands
`compose_backend` three values: the `Ports` that face the world (pod operations, the pod builder,
the driver view, the sources...), the `FeatureSettings` (every feature's settings slice) and the
`Machinery` it may vary (the clock, the store, the threads, who hears each round), and gets back
one `ExecutorPodsBackend`, not yet started. What is built here, and only here:

- the snapshot store, by the `store` factory, which is handed the labels, the pod classifier and
  the clock that the settings derive, so that every store (threaded, deterministic, timed)
  classifies pods alike;
- the sources (watch, poll), made by `sources` over the store's write side;
- the one `NoticeHub` and every feature (`_features`: one line each, `features.py` says how a
  feature plugs in), each handed the backend's own pod operations and the ports' claim and
  resize calls, so what a feature does to the cluster is counted as everything else, and the
  features' scheduler for work on a schedule of its own;
- the allocator and the lifecycle manager over the store's read side, sharing one
  `ExecutorFailureTracker` (refused creations and failed pods both count), each round reported to
  `on_round` when given;
- the lifecycle manager's one observer, the removal channel (`removals.py`): it numbers each
  removal once, keeps the newest `removal_window` for streams that resume, hands each to every
  open stream, to the features and to the given `observers`, and each round to `round_observers`
  (the sidecar's driver view, which hears removals only as the `DriverView`);
- the backend, which owns the start and stop order.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any, Protocol

from execpods.core import (
    badnodes,
    claims,
    crashloop,
    decommission,
    oom_recovery,
    pendingtimeout,
    quota,
    registration,
    resize,
)
from execpods.core import ids as idbudget
from execpods.core.adaptive import API_RATE_CEILING
from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.backend import ExecutorPodsBackend
from execpods.core.badnodes import NodeBlocklistSettings
from execpods.core.claims import ClaimSettings
from execpods.core.clock import SystemClock
from execpods.core.crashloop import CrashLoopSettings
from execpods.core.creation import CreateRunner, ThreadPoolRunner
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.features import Feature, FeatureParts, FeatureSet
from execpods.core.labels import ExecutorLabels
from execpods.core.lifecycle import ExecutorPodsLifecycleManager, RemovalReasons
from execpods.core.notices import NoticeHub
from execpods.core.pendingtimeout import PendingTimeoutSettings
from execpods.core.ports import (
    ClaimOperations,
    Clock,
    DriverView,
    ExecutorIdLedger,
    ExecutorPodBuilder,
    LifecycleObserver,
    PodOperations,
    ResizeOperations,
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
from execpods.core.quota import QuotaSettings
from execpods.core.registration import RegistrationSettings
from execpods.core.removals import RemovalChannel
from execpods.core.resize import ResizeSettings
from execpods.core.scheduling import ThreadScheduler
from execpods.core.settingkit import SettingsBase
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Ports:
    """What the allocation reaches the world through: the adapter's, or in-memory ones."""

    pod_operations: PodOperations
    pod_builder: ExecutorPodBuilder
    driver: DriverView
    sources: SourcesFactory = no_sources
    id_ledger: ExecutorIdLedger | None = None
    """Keeps the highest reserved executor id beyond the process (the adapter's keeps it in the
    cluster): ids are reserved through it before use and never issued twice across restarts;
    None keeps the mark in the process only (restarts are then safe only while the pods of the
    highest ids exist)."""
    claims: ClaimOperations | None = None
    """The executors' claim calls: with them, creates also make the executors' OnDemand claims,
    and stop deletes the application's claims."""
    resize: ResizeOperations | None = None
    """In-place resize calls (the memory resize feature's, `resize.py`); None: never resized."""
    profiles: ResourceProfiles | None = None
    """The declared resource profiles (shared with the pod builder)."""
    close: Callable[[], None] | None = None
    """Runs last on stop (the API client)."""
    api_rate_ceiling: float = API_RATE_CEILING
    """The most API calls a second the client's rate policy may ever allow (the adapter's
    settings): it sizes a round."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Machinery:
    """How the backend runs: its clock, store and threads, and who hears its rounds."""

    clock: Clock | None = None
    store: StoreFactory | None = None
    """Makes the snapshot store (by default `scheduled_store()`: two worker threads)."""
    request_scheduler: Scheduler | None = None
    """Runs the driver's requests (by default one worker thread, as in production)."""
    feature_scheduler: Scheduler | None = None
    """Runs features' periodic work (by default one worker thread, started by the first task
    and shut down when the backend stops; one given here is its giver's to shut down)."""
    concurrent_creates: bool = False
    """A round's creates on up to `execpods.allocation.batch.concurrency` threads (else one after
    another, or through `runner`)."""
    runner: CreateRunner | None = None
    rng: random.Random | None = None
    """Draws the back-off jitter."""
    on_round: RoundHook | None = None
    observers: Sequence[LifecycleObserver] = ()
    round_observers: Sequence[RoundObserver] = ()
    removal_window: int = DEFAULT_REMOVAL_WINDOW


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureSettings:
    """Every feature's own settings slice, read from the same properties as `CoreSettings`
    (features of Spark's own keys read theirs from `CoreSettings`)."""

    claims: ClaimSettings = field(default_factory=ClaimSettings)
    bad_nodes: NodeBlocklistSettings = field(default_factory=NodeBlocklistSettings)
    registration: RegistrationSettings = field(default_factory=RegistrationSettings)
    quota: QuotaSettings = field(default_factory=QuotaSettings)
    pending_timeout: PendingTimeoutSettings = field(default_factory=PendingTimeoutSettings)
    crash_loop: CrashLoopSettings = field(default_factory=CrashLoopSettings)
    resize: ResizeSettings = field(default_factory=ResizeSettings)

    @classmethod
    def slices(cls) -> tuple[type[SettingsBase], ...]:
        """The settings class of every slice, in declaration order (for the docs and the CLI)."""
        return tuple(_slice_class(f) for f in fields(cls))

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> FeatureSettings:
        """Every slice read from `properties` (validated as each slice is)."""
        read: dict[str, Any] = {
            f.name: _slice_class(f).from_properties(properties) for f in fields(cls)
        }
        return cls(**read)

    def values(self) -> tuple[SettingsBase, ...]:
        """Every slice, in declaration order."""
        return tuple(getattr(self, f.name) for f in fields(self))


def _slice_class(slice_field: Field[Any]) -> type[SettingsBase]:
    factory: object = slice_field.default_factory
    if not (isinstance(factory, type) and issubclass(factory, SettingsBase)):
        raise TypeError(f"FeatureSettings.{slice_field.name} must default to its settings class")
    return factory


def _features(slices: FeatureSettings, parts: FeatureParts) -> tuple[Feature | None, ...]:
    """Every feature, in the order the allocation calls them (after the id ledger): one line
    each; a feature that is off is None."""
    return (
        badnodes.plug(slices.bad_nodes, parts),
        oom_recovery.plug(parts),
        claims.plug(slices.claims, parts),
        registration.plug(slices.registration, parts),
        decommission.plug(parts),
        quota.plug(slices.quota, parts),
        pendingtimeout.plug(slices.pending_timeout, parts),
        crashloop.plug(slices.crash_loop, parts),
        resize.plug(slices.resize, parts),
    )


def compose_backend(
    *,
    app_id: str,
    settings: CoreSettings,
    ports: Ports,
    features: FeatureSettings | None = None,
    machinery: Machinery | None = None,
) -> ExecutorPodsBackend:
    """The backend over these ports, with these features, not yet started."""
    run = machinery if machinery is not None else Machinery()
    clock = run.clock if run.clock is not None else SystemClock()
    snapshots = _store(run, settings, clock)
    parts, reasons, release = _parts(app_id, settings, ports, run, clock)
    ids = idbudget.plug(parts, ports.id_ledger)
    plugged = FeatureSet((ids, *_features(features or FeatureSettings(), parts)))
    runner, close = _runner(run, settings, then=_then(plugged.close, _then(release, ports.close)))
    failures = ExecutorFailureTracker.from_settings(settings, clock)
    removals = RemovalChannel(
        window=run.removal_window,
        observers=[*run.observers, plugged],
        round_observers=run.round_observers,
    )
    allocator = ExecutorPodsAllocator(
        settings=settings,
        pod_builder=ports.pod_builder,
        pod_operations=ports.pod_operations,
        store=_timed(snapshots, "allocator", run.on_round, clock),
        clock=clock,
        notices=parts.notices,
        ids=ids,
        features=plugged,
        failure_tracker=failures,
        profiles=ports.profiles,
        runner=runner,
        rng=run.rng,
        api_rate_ceiling=ports.api_rate_ceiling,
    )
    lifecycle = ExecutorPodsLifecycleManager(
        settings=settings,
        pod_operations=ports.pod_operations,
        store=_timed(snapshots, "lifecycle", run.on_round, clock),
        clock=clock,
        observer=removals,
        failure_tracker=failures,
        reasons=reasons,
        notify=parts.notices.notify,
    )
    return ExecutorPodsBackend(
        parts=parts,
        store=snapshots,
        allocator=allocator,
        lifecycle=lifecycle,
        removals=removals,
        features=plugged,
        request_scheduler=run.request_scheduler,
        sources=ports.sources(snapshots),
        close=close,
    )


def _parts(
    app_id: str, settings: CoreSettings, ports: Ports, run: Machinery, clock: Clock
) -> tuple[FeatureParts, RemovalReasons, Callable[[], None]]:
    """What the backend and its features share: one notice hub, one progress monitor, the
    backend's pod operations, the features' scheduler; the reasons features give the lifecycle
    manager; and what releases the scheduler when the backend made it."""
    reasons = RemovalReasons()
    scheduler, release = _feature_scheduler(run)
    parts = FeatureParts(
        app_id=app_id,
        settings=settings,
        clock=clock,
        notices=NoticeHub(),
        pod_operations=ports.pod_operations,
        driver=ports.driver,
        expect_removal=reasons.expect,
        progress=ProgressMonitor(clock=clock),
        scheduler=scheduler,
        claims=ports.claims,
        resize=ports.resize,
    )
    return parts, reasons, release


def _feature_scheduler(run: Machinery) -> tuple[Scheduler, Callable[[], None]]:
    """The features' scheduler, and its release: the backend shuts down only the one it made
    (a thread only once a feature schedules something)."""
    if run.feature_scheduler is not None:
        return run.feature_scheduler, lambda: None
    made = ThreadScheduler(workers=1, name="execpods-features")
    return made, made.shutdown


def _store(run: Machinery, settings: CoreSettings, clock: Clock) -> SnapshotsStore:
    """The snapshot store, classifying pods as the settings say (whoever makes it)."""
    make = run.store if run.store is not None else scheduled_store()
    return make(
        labels=settings.labels,
        classifier=PodClassifier(
            executor_container=settings.executor_container_name,
            check_all_containers=settings.check_all_containers,
        ),
        clock=clock,
    )


def _runner(
    run: Machinery, settings: CoreSettings, *, then: Callable[[], None]
) -> tuple[CreateRunner | None, Callable[[], None]]:
    """The create runner, and the backend's last step on stop (`then` after the runner's)."""
    if not run.concurrent_creates:
        return run.runner, then
    if run.runner is not None:
        raise ValueError("give either a runner or concurrent_creates, not both")
    pool = ThreadPoolRunner(workers=settings.batch_concurrency)
    return pool, _then(pool.shutdown, then)  # the create threads go with the backend


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
