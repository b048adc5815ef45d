"""Issue 33: where execpods differed from Spark 4.3.0 (M1-M8), each fix against the Spark method
it follows, read in Spark 4.3.0's bytecode (`javap -c -p` on spark-kubernetes_2.13-4.3.0.jar).

The M1, M2 and M5 tests fail on 128638e (checked against a worktree of that commit).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from execpods.core import AllocatorNotice, CoreSettings, NoticeKind
from execpods.core.errors import AllocationStopped
from execpods.core.ids import IdsUnavailable
from execpods.core.testing import (
    InMemoryIdLedger,
    InMemoryPodOperations,
    SimpleExecutorPodBuilder,
    compose_deterministic,
    failed_executor,
    running_executor,
)

from tests.core.conftest import make_allocator_rig


def _cores_of(manifest: dict[str, Any]) -> str:
    env = manifest["spec"]["containers"][0]["env"]
    return str(next(e["value"] for e in env if e["name"] == "SPARK_EXECUTOR_CORES"))


def _losing(executor_id: int, *, deleted: bool) -> Any:
    """Executor `executor_id`'s container killed with 137: its pod deleted (a drain that
    outlasted its grace) or not (the container's own OOM kill)."""
    killed = failed_executor(executor_id, exit_code=137)
    if not deleted:
        return killed
    return dataclasses.replace(killed, deletion_timestamp=datetime(2026, 1, 1, tzinfo=UTC))


def _cores_after_a_137(*, deleted: bool) -> tuple[list[str], list[AllocatorNotice]]:
    pods = InMemoryPodOperations()
    composed = compose_deterministic(
        settings=CoreSettings.from_properties({"spark.executor.instances": "2"}),
        pod_operations=pods,
        pod_builder=SimpleExecutorPodBuilder(cores=4),
    )
    backend, store = composed.backend, composed.store
    notices: list[AllocatorNotice] = []
    backend.add_notice_listener(notices.append)
    backend.start()
    store.notify_subscribers()
    store.update_pod(running_executor(1))
    store.update_pod(_losing(2, deleted=deleted))
    store.notify_subscribers()  # the lifecycle manager judges the loss; the allocator replaces
    store.notify_subscribers()
    store.update_pod(running_executor(3))  # the replacement runs (Spark waits to see it)
    store.update_pod(_losing(1, deleted=deleted))
    store.notify_subscribers()
    store.notify_subscribers()
    return [_cores_of(m) for m in pods.created], notices


def test_m1_a_deleted_executor_killed_at_the_end_of_its_grace_is_not_an_oom() -> None:
    """`KubernetesClusterSchedulerBackend.doRemoveExecutor` switches recovery mode on only when
    the loss reason's message contains "OOM", and `ExecutorPodsLifecycleManager.findExitReason`
    gives a deleted pod (`PodDeleted`) "deleted by a user or the framework", whatever its exit
    code. On 128638e a drained executor's 137 turned recovery mode on: every later executor
    announced 1 core instead of 4."""
    cores, notices = _cores_after_a_137(deleted=True)
    assert cores == ["4"] * len(cores), cores
    assert len(cores) >= 4, "both lost executors were replaced"
    assert not [n for n in notices if n.kind is NoticeKind.RECOVERY_MODE]


def test_m1_a_container_oom_killed_still_switches_recovery_mode_on() -> None:
    """The other half of the same rule: a failed pod's message describes 137 as "possible
    container OOM", so its loss switches the mode on, and the executors created after it
    announce one core."""
    cores, notices = _cores_after_a_137(deleted=False)
    assert cores[-1] == "1", cores
    assert [n.kind for n in notices if n.kind is NoticeKind.RECOVERY_MODE] == [
        NoticeKind.RECOVERY_MODE
    ]


def test_m5_a_restart_under_allocation_maximum_counts_only_its_own_creates() -> None:
    """`ExecutorPodsAllocator.requestNewExecutors`: `EXECUTOR_ID_COUNTER.incrementAndGet()` must
    stay below spark.kubernetes.allocation.maximum, and the counter starts at 0 with each driver:
    the maximum counts the pods this life creates. Ids reserved by the earlier life are skipped
    (never issued twice), never counted: 128638e counted them and, with maximum=50, a restart
    after 3 executors created nothing ("49 executor ids were issued")."""
    settings = CoreSettings(batch_size=10, adaptive_batches=False, allocation_maximum=50)
    cluster, ledger = InMemoryPodOperations(), InMemoryIdLedger()
    first = make_allocator_rig(settings, pods=cluster, id_ledger=ledger)
    first.allocator.set_total_expected_executors(3)
    assert cluster.created_executor_ids() == [1, 2, 3]
    cluster.pods.clear()  # the driver and its sidecar restart; the executors went with them
    second = make_allocator_rig(settings, pods=cluster, id_ledger=ledger)
    notices: list[AllocatorNotice] = []
    second.backend.add_notice_listener(notices.append)
    second.allocator.set_total_expected_executors(3)
    again = cluster.created_executor_ids()[3:]
    assert len(again) == 3, cluster.created_executor_ids()
    assert min(again) > 3, "ids are still never issued twice"
    assert not [n for n in notices if n.kind is NoticeKind.ALLOCATION_MAXIMUM_REACHED]


def test_m5_each_life_creates_at_most_maximum_minus_one_pods() -> None:
    """The same counter: ids 1..maximum-1 are issued, the next one throws in Spark (here: the
    notice, once, and allocation stops)."""
    settings = CoreSettings(batch_size=10, adaptive_batches=False, allocation_maximum=4)
    cluster, ledger = InMemoryPodOperations(), InMemoryIdLedger()
    first = make_allocator_rig(settings, pods=cluster, id_ledger=ledger)
    first.allocator.set_total_expected_executors(5)
    assert cluster.created_executor_ids() == [1, 2, 3]
    cluster.pods.clear()
    second = make_allocator_rig(settings, pods=cluster, id_ledger=ledger)
    notices: list[AllocatorNotice] = []
    second.backend.add_notice_listener(notices.append)
    second.allocator.set_total_expected_executors(5)
    assert len(cluster.created_executor_ids()) == 6, "three more: a new life, a new count"
    (notice,) = notices
    assert notice.kind is NoticeKind.ALLOCATION_MAXIMUM_REACHED
    assert "3 executor ids were issued" in notice.message


# -- the plugin's stop: Spark's ExecutorPodsAllocator.stop ends the allocation for good ----------


def test_a_stopped_allocation_leaves_the_id_ledger_to_the_applications_clean_up() -> None:
    """`KubernetesClusterSchedulerBackend.stop` calls `ExecutorPodsAllocator.stop`, then deletes
    the ConfigMaps labelled as its executors' (the sidecar's ledger among them, in client mode).
    After the driver's `stopping` request (`backend.stop_allocating`) the ledger found gone is not
    written again, no id is issued, and a request for executors is refused; before it, a ledger
    found gone is written again at once (R2)."""
    ledger = InMemoryIdLedger()
    rig = make_allocator_rig(CoreSettings(batch_size=10, adaptive_batches=False), id_ledger=ledger)
    rig.allocator.set_total_expected_executors(3)
    assert rig.pods.created_executor_ids() == [1, 2, 3]
    ledger.lose()  # by hand, while the application runs: written again
    assert rig.ids.verify() is not None
    assert ledger.highest >= 3
    rig.backend.stop_allocating()
    assert rig.backend.allocation_stopped  # its targets of 0 apply as any request's do
    writes = ledger.writes
    ledger.lose()  # Spark's clean-up after its allocator's stop
    assert rig.ids.verify() is None
    assert rig.ids.reassert()
    assert (ledger.highest, ledger.writes) == (0, writes), "the ledger is left deleted"
    with pytest.raises(IdsUnavailable):
        rig.ids.next()
    with pytest.raises(AllocationStopped):
        rig.backend.request_total(1)
    rig.backend.request_total(0)  # a total of 0 is still accepted
