"""Shared wiring for the core's behaviour tests: SPARK-24248's deterministic store, real fakes."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from execpods.core import (
    CoreSettings,
    CreateRunner,
    ExecutorFailureTracker,
    ExecutorIdLedger,
    ExecutorPodsAllocator,
    ManualClock,
    ResourceProfiles,
)
from execpods.core.lifecycle import ExecutorPodsLifecycleManager
from execpods.core.testing import (
    TEST_APP_ID,
    DeterministicSnapshotsStore,
    InMemoryPodOperations,
    RecordingDriver,
    RecordingObserver,
    SimpleExecutorPodBuilder,
)


@dataclass
class AllocatorRig:
    allocator: ExecutorPodsAllocator
    store: DeterministicSnapshotsStore
    pods: InMemoryPodOperations
    clock: ManualClock
    settings: CoreSettings
    driver: RecordingDriver


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
    failures: ExecutorFailureTracker | None = None,
    pods: InMemoryPodOperations | None = None,
    id_ledger: ExecutorIdLedger | None = None,
) -> AllocatorRig:
    settings = settings or CoreSettings()
    store = DeterministicSnapshotsStore()
    pods = pods if pods is not None else InMemoryPodOperations()
    clock = ManualClock(clock_start)
    driver = RecordingDriver()
    allocator = ExecutorPodsAllocator(
        settings=settings,
        pod_builder=SimpleExecutorPodBuilder(),
        pod_operations=pods,
        store=store,
        clock=clock,
        failure_tracker=failures,
        profiles=profiles,
        runner=runner,
        rng=random.Random(7),
        id_ledger=id_ledger,
    )
    allocator.start(TEST_APP_ID, driver)
    return AllocatorRig(allocator, store, pods, clock, settings, driver)


def make_lifecycle_rig(settings: CoreSettings | None = None) -> LifecycleRig:
    clock = ManualClock()
    store = DeterministicSnapshotsStore(clock=clock)
    pods = InMemoryPodOperations()
    driver = RecordingDriver()
    observer = RecordingObserver()
    manager = ExecutorPodsLifecycleManager(
        settings=settings or CoreSettings(),
        pod_operations=pods,
        store=store,
        clock=clock,
        observer=observer,
    )
    manager.start(driver)
    return LifecycleRig(manager, store, pods, driver, clock, observer)


@pytest.fixture
def rig() -> AllocatorRig:
    return make_allocator_rig()


@pytest.fixture
def life() -> LifecycleRig:
    return make_lifecycle_rig()
