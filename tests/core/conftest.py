"""Shared wiring for the core's behaviour tests: SPARK-24248's deterministic store, real fakes.

Every rig is assembled by the one composition root (`compose_backend`, through
`execpods.core.testing.compose_deterministic`), so the reconcilers under test are wired exactly
as in production; a rig starts only the reconciler it tests and drives its rounds by hand.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from execpods.core import (
    AllocatorNotice,
    CoreSettings,
    ExecutorIdLedger,
    ExecutorPodsBackend,
    ManualClock,
    NoticeKind,
    ResourceProfiles,
)
from execpods.core.adaptive import API_RATE_CEILING
from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.creation import CreateRunner
from execpods.core.ids import ExecutorIds, IdBudget
from execpods.core.lifecycle import ExecutorPodsLifecycleManager
from execpods.core.testing import (
    TEST_APP_ID,
    DeterministicSnapshotsStore,
    InMemoryPodOperations,
    RecordingDriver,
    RecordingObserver,
    compose_deterministic,
)


@dataclass
class AllocatorRig:
    allocator: ExecutorPodsAllocator
    store: DeterministicSnapshotsStore
    pods: InMemoryPodOperations
    clock: ManualClock
    settings: CoreSettings
    driver: RecordingDriver
    backend: ExecutorPodsBackend
    """The facade over the same parts (its notices are the allocator's)."""
    ids: ExecutorIds
    """The id counter the id ledger's feature issues from."""
    notices: list[AllocatorNotice]
    """Every notice since the rig was made."""

    def told(self, kind: NoticeKind) -> int:
        """How many creates the notices of this kind stood for."""
        return sum(n.count for n in self.notices if n.kind is kind)


@dataclass
class LifecycleRig:
    manager: ExecutorPodsLifecycleManager
    store: DeterministicSnapshotsStore
    pods: InMemoryPodOperations
    driver: RecordingDriver
    clock: ManualClock
    observer: RecordingObserver


def make_allocator_rig(
    settings: CoreSettings | None = None,
    *,
    profiles: ResourceProfiles | None = None,
    clock_start: float = 0.0,
    runner: CreateRunner | None = None,
    pods: InMemoryPodOperations | None = None,
    id_ledger: ExecutorIdLedger | None = None,
    api_rate_ceiling: float = API_RATE_CEILING,
) -> AllocatorRig:
    settings = settings or CoreSettings()
    pods = pods if pods is not None else InMemoryPodOperations()
    clock = ManualClock(clock_start)
    driver = RecordingDriver()
    composed = compose_deterministic(
        settings=settings,
        pod_operations=pods,
        driver=driver,
        clock=clock,
        profiles=profiles,
        runner=runner,
        rng=random.Random(7),
        id_ledger=id_ledger,
        api_rate_ceiling=api_rate_ceiling,
    )
    composed.allocator.start(TEST_APP_ID, driver)
    notices: list[AllocatorNotice] = []
    composed.backend.add_notice_listener(notices.append)
    ids = composed.feature(IdBudget).ids
    return AllocatorRig(
        composed.allocator,
        composed.store,
        pods,
        clock,
        settings,
        driver,
        composed.backend,
        ids,
        notices,
    )


def make_lifecycle_rig(settings: CoreSettings | None = None) -> LifecycleRig:
    clock = ManualClock()
    pods = InMemoryPodOperations()
    driver = RecordingDriver()
    observer = RecordingObserver()
    composed = compose_deterministic(
        settings=settings, pod_operations=pods, driver=driver, clock=clock, observers=[observer]
    )
    composed.lifecycle.start(driver)
    return LifecycleRig(composed.lifecycle, composed.store, pods, driver, clock, observer)


@pytest.fixture
def rig() -> AllocatorRig:
    return make_allocator_rig()


@pytest.fixture
def life() -> LifecycleRig:
    return make_lifecycle_rig()
