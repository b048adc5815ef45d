"""Registration timeout: a Running executor the driver never registers is deleted, reported with
a reason of its own, and replaced; one the driver knows never is. Manual clock, no sleeps."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from execpods.core import ExecutorPodsBackend, FeatureSettings, ManualClock
from execpods.core.registration import (
    REGISTRATION_TIMEOUT_KEY,
    RegistrationSettings,
    RegistrationTimeout,
)
from execpods.core.testing import (
    DeterministicSnapshotsStore,
    InMemoryPodOperations,
    RecordingDriver,
    RecordingObserver,
    compose_deterministic,
    deleted_executor,
    running_executor,
)


@dataclass
class Rig:
    backend: ExecutorPodsBackend
    store: DeterministicSnapshotsStore
    pods: InMemoryPodOperations
    driver: RecordingDriver
    clock: ManualClock
    observer: RecordingObserver
    registration: RegistrationTimeout


def watch(timeout: float) -> Rig:
    """A started backend (no executors asked for) whose registration timeout is `timeout`, as
    its settings slice sets it: the feature is plugged by the composition root."""
    clock, pods, driver, observer = (
        ManualClock(),
        InMemoryPodOperations(),
        RecordingDriver(),
        RecordingObserver(),
    )
    composed = compose_deterministic(
        pod_operations=pods,
        driver=driver,
        clock=clock,
        observers=[observer],
        features=FeatureSettings(registration=RegistrationSettings(timeout=timeout)),
    )
    composed.backend.start(initial_executors=0)
    registration = composed.feature(RegistrationTimeout)
    return Rig(composed.backend, composed.store, pods, driver, clock, observer, registration)


def round_(rig: Rig, seconds: float = 0.0) -> None:
    rig.clock.advance(seconds)
    rig.store.notify_subscribers()


def test_a_running_executor_that_never_registers_is_replaced_with_its_own_reason() -> None:
    rig = watch(60.0)
    registration = rig.registration
    rig.driver.known.add(2)  # executor 2 registered, executor 1 never does
    for executor_id in (1, 2):
        rig.pods.pods[f"spark-executor-{executor_id}"] = running_executor(executor_id)
        rig.store.update_pod(running_executor(executor_id))
    round_(rig)
    round_(rig, 59.0)
    assert rig.pods.deletes == []
    round_(rig, 1.0)
    assert rig.pods.deletes_of("spark-executor-1") == 1
    assert rig.pods.deletes_of("spark-executor-2") == 0
    assert registration.replaced == 1
    # The pod goes; the lifecycle manager reports the executor with the timeout's reason.
    rig.store.update_pod(deleted_executor(1))
    round_(rig, 1.0)
    (removal,) = [r for r in rig.observer.removals if r.executor_id == 1]
    assert "without registering with the driver" in removal.reason.message
    assert REGISTRATION_TIMEOUT_KEY in removal.reason.message
    assert (removal.reason.exit_code, removal.reason.exit_caused_by_app) == (-1, False)
    assert not removal.reason.killed_by_driver
    # Later rounds do not delete it again.
    round_(rig, 120.0)
    assert rig.pods.deletes_of("spark-executor-1") == 1


def test_registering_in_time_or_no_timeout_keeps_the_executor() -> None:
    rig = watch(0.0)
    rig.store.update_pod(running_executor(1))
    round_(rig)
    round_(rig, 1_000.0)
    assert rig.pods.deletes == []
    rig.backend.set_registration_timeout(30.0)  # as a driver would, with UpdateDriverExecutors
    round_(rig)
    round_(rig, 20.0)
    rig.driver.known.add(1)  # registers within the 30 s
    round_(rig, 20.0)
    assert rig.pods.deletes == []


def test_the_clock_starts_when_the_executor_runs_not_when_it_was_created() -> None:
    rig = watch(10.0)
    round_(rig, 100.0)  # nothing running yet
    rig.store.update_pod(running_executor(1))
    round_(rig)
    round_(rig, 9.0)
    assert rig.pods.deletes == []
    round_(rig, 1.0)
    assert rig.pods.deletes_of("spark-executor-1") == 1


def test_a_negative_timeout_is_refused() -> None:
    rig = watch(1.0)
    with pytest.raises(ValueError, match="must not be negative"):
        rig.backend.set_registration_timeout(-1)
    assert rig.registration.timeout == 1.0, "nothing changed"
