"""The composition root: the one place a running allocation is assembled from its ports.

Every caller (the sidecar's wiring, the embedded sidecar, benchmarks, tests) hands
`compose_backend` the parts that face the world and gets back one `ExecutorPodsBackend`, not yet
started. What is built here, and only here:

- the snapshot store, delivering on `store_scheduler`;
- the sources (watch, poll), made by `sources` over the store's write side;
- the allocator and the lifecycle manager over the store's read side, sharing one
  `ExecutorFailureTracker` (refused creations and failed pods both count);
- the lifecycle manager's observer: the given `observers`, then the backend's subscribers;
- the backend, which owns the start and stop order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.backend import ExecutorPodsBackend, LifecycleFanout
from execpods.core.badnodes import AvoidingPodBuilder, NodeBlocklist
from execpods.core.claims import ClaimingPodOperations, ExecutorClaims
from execpods.core.clock import SystemClock
from execpods.core.creation import ThreadPoolRunner
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.lifecycle import ExecutorPodsLifecycleManager
from execpods.core.ports import (
    Clock,
    DriverView,
    ExecutorPodBuilder,
    LifecycleObserver,
    PodOperations,
    Scheduler,
    SnapshotSource,
    SnapshotsStore,
    SnapshotsWriter,
)
from execpods.core.profiles import ResourceProfiles
from execpods.core.registration import RegistrationTimeout
from execpods.core.scheduling import ThreadScheduler
from execpods.core.settings import CoreSettings
from execpods.core.states import PodClassifier
from execpods.core.store import SnapshotsStoreImpl

SourcesFactory = Callable[[SnapshotsWriter], Sequence[SnapshotSource]]
"""Makes the sources that feed a store, in start order (watch before poll); may make none."""


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
    clock: Clock | None = None,
    store: SnapshotsStore | None = None,
    store_scheduler: Scheduler | None = None,
    request_scheduler: Scheduler | None = None,
    close: Callable[[], None] | None = None,
    profiles: ResourceProfiles | None = None,
    concurrent_creates: bool = False,
    claims: ExecutorClaims | None = None,
    blocklist: NodeBlocklist | None = None,
    registration: RegistrationTimeout | None = None,
) -> ExecutorPodsBackend:
    """The backend over these ports, not yet started.

    `store` replaces the `SnapshotsStoreImpl` on `store_scheduler` (a deterministic store in
    tests); `close` runs last on stop (the API client). Without schedulers, the store delivers
    on two worker threads and requests run on one, as in production. `profiles` are the declared
    resource profiles (shared with the pod builder); with `concurrent_creates`, a round's creates
    run on up to `spark.kubernetes.allocation.batch.concurrency` threads (else one after another).
    With `claims`, the allocator's creates also make the executors' OnDemand claims, and stop
    deletes the application's claims. With `blocklist`, new executor pods keep off the nodes it
    blocks (it counts failures per node each allocation round, and its notices go to the
    allocator's listeners). With `registration`, Running executors the driver does not know
    in time are deleted and reported with its reason.
    """
    clock = clock if clock is not None else SystemClock()
    if store is None:
        store = SnapshotsStoreImpl(
            store_scheduler
            if store_scheduler is not None
            else ThreadScheduler(workers=2, name="execpods-subscribers"),
            clock=clock,
            labels=settings.labels,
            classifier=PodClassifier(
                executor_container=settings.executor_container_name,
                check_all_containers=settings.check_all_containers,
            ),
        )
    fanout = LifecycleFanout(observers)
    runner = ThreadPoolRunner(workers=settings.batch_concurrency) if concurrent_creates else None
    if runner is not None:
        close = _then(runner.shutdown, close)  # the create threads go with the backend
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
        store=store,
        clock=clock,
        failure_tracker=failures,
        profiles=profiles,
        runner=runner,
        claims=claims,
        round_hooks=[h for h in (claims, blocklist) if h is not None],
    )
    if blocklist is not None:
        blocklist.set_notify(allocator.notify)
    lifecycle = ExecutorPodsLifecycleManager(
        settings=settings,
        pod_operations=pod_operations,
        store=store,
        clock=clock,
        observer=fanout,
        failure_tracker=failures,
    )
    if registration is not None:
        registration.attach(driver=driver, expect_removal=lifecycle.expect_removal)
        store.add_subscriber(settings.event_processing_interval, registration.on_new_snapshots)
    return ExecutorPodsBackend(
        app_id=app_id,
        settings=settings,
        store=store,
        allocator=allocator,
        lifecycle=lifecycle,
        pod_operations=pod_operations,
        driver=driver,
        fanout=fanout,
        request_scheduler=(
            request_scheduler
            if request_scheduler is not None
            else ThreadScheduler(workers=1, name="execpods-requests")
        ),
        sources=sources(store),
        close=close,
        clock=clock,
    )


def _then(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    def both() -> None:
        try:
            first()
        finally:
            if then is not None:
                then()

    return both
