"""Issue 33: where execpods differed from Spark 4.3.0 (M1-M8), each fix against the Spark method
it follows, read in Spark 4.3.0's bytecode (`javap -c -p` on spark-kubernetes_2.13-4.3.0.jar).

The M1, M2 and M5 tests fail on 128638e (checked against a worktree of that commit).
"""

from __future__ import annotations

from execpods.core import AllocatorNotice, CoreSettings, NoticeKind
from execpods.core.testing import InMemoryIdLedger, InMemoryPodOperations

from tests.core.conftest import make_allocator_rig


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
    second.allocator.add_notice_listener(notices.append)
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
    second.allocator.add_notice_listener(notices.append)
    second.allocator.set_total_expected_executors(5)
    assert len(cluster.created_executor_ids()) == 6, "three more: a new life, a new count"
    (notice,) = notices
    assert notice.kind is NoticeKind.ALLOCATION_MAXIMUM_REACHED
    assert "3 executor ids were issued" in notice.message
