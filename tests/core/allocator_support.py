"""Shared by the allocator's tests: Spark's suite settings, pods of a profile, what was created."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from execpods.core import CoreSettings, ExecutorPod, ResourceProfile, ResourceProfiles
from execpods.core.labels import SPARK_LABELS
from execpods.core.testing import TEST_APP_ID

from .conftest import AllocatorRig, make_allocator_rig

START = 1_767_225_600.0
IDLE = 10.0
SPARK_SUITE = CoreSettings(batch_size=5, executor_idle_timeout=IDLE, adaptive_batches=False)
RP = 1
APP_LABELS = {"spark-app-selector": TEST_APP_ID, "spark-role": "executor"}


def spark_rig(settings: CoreSettings = SPARK_SUITE, *, profiles: bool = False) -> AllocatorRig:
    declared = ResourceProfiles([ResourceProfile(id=RP, cores=4, memory_mib=2048)])
    return make_allocator_rig(settings, profiles=declared if profiles else None, clock_start=START)


def pod(rig: AllocatorRig, executor_id: int, phase: str, rp: int = 0) -> ExecutorPod:
    """An executor pod of profile `rp`, created now (by the rig's clock)."""
    labels = SPARK_LABELS.for_executor(TEST_APP_ID, executor_id)
    labels[SPARK_LABELS.resource_profile_id] = str(rp)
    return ExecutorPod(
        name=f"{TEST_APP_ID}-exec-{executor_id}",
        labels=labels,
        phase=phase,
        creation_timestamp=datetime.fromtimestamp(rig.clock.time(), UTC),
    )


def created(rig: AllocatorRig) -> list[int]:
    return rig.pods.created_executor_ids()


def profile_of(rig: AllocatorRig, executor_id: int) -> int:
    for manifest in rig.pods.created:
        labels = manifest["metadata"]["labels"]
        if labels["spark-exec-id"] == str(executor_id):
            return int(labels["spark-exec-resourceprofile-id"])
    raise AssertionError(f"executor {executor_id} was never created")


def deleted_ids(rig: AllocatorRig) -> list[list[int]]:
    """The executor ids of every delete-by-selector call, in order."""
    calls = []
    for call in rig.pods.deletes:
        assert call.selector is not None
        calls.append(sorted(int(i) for i in call.selector.label_in["spark-exec-id"]))
    return calls


T = TypeVar("T")


class StepRecorder:
    """A serial runner that records the size of every step it is given."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def run(self, tasks: Sequence[Callable[[], T]], limit: int) -> list[T]:
        self.steps.append(len(tasks))
        return [task() for task in tasks]
