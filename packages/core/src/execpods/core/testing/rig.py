"""The deterministic rig: a backend assembled by `compose_backend` over the doubles.

This is the one place that wires the doubles together through the production composition root,
and the one place outside the backend allowed to look past its facade (`Composed`); kept apart
so the doubles stay free of the composition they are plugged into.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from execpods.core.adaptive import API_RATE_CEILING
from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.backend import ExecutorPodsBackend
from execpods.core.clock import ManualClock
from execpods.core.compose import FeatureSettings, Machinery, Ports, compose_backend
from execpods.core.creation import CreateRunner
from execpods.core.features import FeatureSet
from execpods.core.labels import ExecutorLabels
from execpods.core.lifecycle import ExecutorPodsLifecycleManager
from execpods.core.ports import (
    ClaimOperations,
    Clock,
    DriverView,
    ExecutorIdLedger,
    ExecutorPodBuilder,
    LifecycleObserver,
    PodOperations,
    ResizeOperations,
    Scheduler,
    SnapshotSource,
    SnapshotsStore,
    SnapshotsWriter,
)
from execpods.core.profiles import ResourceProfiles
from execpods.core.scheduling import DeterministicScheduler
from execpods.core.settings import CoreSettings
from execpods.core.states import PodClassifier
from execpods.core.testing.doubles import (
    InMemoryPodOperations,
    RecordingDriver,
    SimpleExecutorPodBuilder,
)
from execpods.core.testing.factories import TEST_APP_ID
from execpods.core.testing.store import DeterministicSnapshotsStore


class HandFed:
    """A sources factory that makes no source and keeps the store's write side, for a caller that
    feeds the store itself (a test, a benchmark): `compose_backend(sources=fed, ...)`, then
    `fed.writer.update_pod(...)`."""

    def __init__(self) -> None:
        self._writer: SnapshotsWriter | None = None

    def __call__(self, store: SnapshotsWriter) -> Sequence[SnapshotSource]:
        self._writer = store
        return ()

    @property
    def writer(self) -> SnapshotsWriter:
        if self._writer is None:
            raise RuntimeError("no backend was composed with these sources yet")
        return self._writer


F = TypeVar("F")


@dataclass(frozen=True, slots=True, kw_only=True)
class Composed:
    """A backend `compose_backend` built over a deterministic store, and the parts a test of one
    reconciler drives directly (start only the one under test: `allocator.start(...)`)."""

    backend: ExecutorPodsBackend
    store: DeterministicSnapshotsStore
    allocator: ExecutorPodsAllocator
    lifecycle: ExecutorPodsLifecycleManager
    features: FeatureSet

    def feature(self, kind: type[F]) -> F:
        """The plugged feature of this class (its settings turned it on)."""
        found = [f for f in self.features if isinstance(f, kind)]
        if len(found) != 1:
            raise LookupError(f"{len(found)} features of {kind.__name__} were plugged")
        return found[0]


def compose_deterministic(
    *,
    settings: CoreSettings | None = None,
    app_id: str = TEST_APP_ID,
    pod_operations: PodOperations | None = None,
    pod_builder: ExecutorPodBuilder | None = None,
    driver: DriverView | None = None,
    clock: Clock | None = None,
    observers: Sequence[LifecycleObserver] = (),
    profiles: ResourceProfiles | None = None,
    runner: CreateRunner | None = None,
    rng: random.Random | None = None,
    request_scheduler: Scheduler | None = None,
    id_ledger: ExecutorIdLedger | None = None,
    features: FeatureSettings | None = None,
    claims: ClaimOperations | None = None,
    resize: ResizeOperations | None = None,
    api_rate_ceiling: float = API_RATE_CEILING,
) -> Composed:
    """`compose_backend` over a `DeterministicSnapshotsStore` (deliveries on
    `notify_subscribers()`), in-memory ports by default and a deterministic request scheduler,
    which also runs the features' periodic work: the same assembly as production, with every part
    a test needs in reach."""
    clock = clock if clock is not None else ManualClock()
    manual = clock if isinstance(clock, ManualClock) else None
    scheduler = (
        request_scheduler if request_scheduler is not None else DeterministicScheduler(manual)
    )
    stores: list[DeterministicSnapshotsStore] = []

    def store(
        *, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock
    ) -> DeterministicSnapshotsStore:
        made = DeterministicSnapshotsStore(labels=labels, classifier=classifier, clock=clock)
        stores.append(made)
        return made

    backend = compose_backend(
        app_id=app_id,
        settings=settings if settings is not None else CoreSettings(),
        ports=Ports(
            pod_operations=(
                pod_operations if pod_operations is not None else InMemoryPodOperations()
            ),
            pod_builder=pod_builder if pod_builder is not None else SimpleExecutorPodBuilder(),
            driver=driver if driver is not None else RecordingDriver(),
            id_ledger=id_ledger,
            profiles=profiles,
            claims=claims,
            resize=resize,
            api_rate_ceiling=api_rate_ceiling,
        ),
        features=features,
        machinery=Machinery(
            observers=observers,
            clock=clock,
            store=store,
            request_scheduler=scheduler,
            feature_scheduler=scheduler,
            runner=runner,
            rng=rng,
        ),
    )
    # Core's own testing module may look past the facade; nothing else does.
    return Composed(
        backend=backend,
        store=stores[0],
        allocator=backend._allocator,
        lifecycle=backend._lifecycle,
        features=backend._allocator._features,
    )


Store = TypeVar("Store", bound=SnapshotsStore)


def composed_store(make: Callable[..., Store], *, settings: CoreSettings | None = None) -> Store:
    """The store `make` (a `StoreFactory`) makes when `compose_backend` assembles a backend around
    it over in-memory ports (the backend is not started): for tests and benchmarks of what feeds a
    store, such as the watch, with the store made as every store is."""
    made: list[Store] = []

    def store(*, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock) -> Store:
        made.append(make(labels=labels, classifier=classifier, clock=clock))
        return made[-1]

    compose_backend(
        app_id=TEST_APP_ID,
        settings=settings if settings is not None else CoreSettings(),
        ports=Ports(
            pod_operations=InMemoryPodOperations(),
            pod_builder=SimpleExecutorPodBuilder(),
            driver=RecordingDriver(),
        ),
        machinery=Machinery(store=store, request_scheduler=DeterministicScheduler()),
    )
    return made[0]
