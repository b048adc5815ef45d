"""Bad-node avoidance in the allocator's rounds: block after failures, lift after the cool-down.

Deterministic: a manual clock and the deterministic store; the pods the allocator creates are read
back from the in-memory registry, where their node anti-affinity shows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from execpods.core import (
    AllocatorNotice,
    CoreSettings,
    ExecutorPod,
    FeatureSettings,
    ManualClock,
    NoticeKind,
)
from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.badnodes import NodeBlocklist, NodeBlocklistSettings
from execpods.core.testing import (
    TEST_APP_ID,
    DeterministicSnapshotsStore,
    InMemoryPodOperations,
    RecordingDriver,
    compose_deterministic,
    failed_executor,
    running_executor,
)

SETTINGS = NodeBlocklistSettings(enabled=True, max_failures=2, failure_window=60, cool_down=300)


@dataclass
class Rig:
    allocator: ExecutorPodsAllocator
    store: DeterministicSnapshotsStore
    pods: InMemoryPodOperations
    clock: ManualClock
    blocklist: NodeBlocklist
    notices: list[AllocatorNotice]

    def avoided(self, executor_id: int) -> list[str]:
        """The nodes executor `executor_id`'s pod may not run on."""
        for manifest in self.pods.created:
            if manifest["metadata"]["labels"]["spark-exec-id"] != str(executor_id):
                continue
            affinity: Any = manifest["spec"].get("affinity")
            if affinity is None:
                return []
            required = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            (term,) = required["nodeSelectorTerms"]
            (expression,) = term["matchExpressions"]
            assert (expression["key"], expression["operator"]) == (
                "kubernetes.io/hostname",
                "NotIn",
            )
            return list(expression["values"])
        raise AssertionError(f"executor {executor_id} was never created")


def make_rig(settings: NodeBlocklistSettings = SETTINGS) -> Rig:
    """The feature as the composition root plugs it, from its settings slice."""
    clock = ManualClock(1_000.0)
    pods = InMemoryPodOperations()
    composed = compose_deterministic(
        settings=CoreSettings(batch_size=10, adaptive_batches=False),
        pod_operations=pods,
        clock=clock,
        rng=random.Random(1),
        features=FeatureSettings(bad_nodes=settings),
    )
    notices: list[AllocatorNotice] = []
    composed.backend.add_notice_listener(notices.append)
    composed.allocator.start(TEST_APP_ID, RecordingDriver())
    blocklist = composed.feature(NodeBlocklist)
    return Rig(composed.allocator, composed.store, pods, clock, blocklist, notices)


def test_the_feature_is_plugged_only_when_enabled() -> None:
    composed = compose_deterministic(features=FeatureSettings(bad_nodes=NodeBlocklistSettings()))
    assert not [f for f in composed.features if isinstance(f, NodeBlocklist)]


def on(pod: ExecutorPod, node: str) -> ExecutorPod:
    return replace(pod, node_name=node)


def test_a_node_with_repeated_failures_is_avoided_then_lifted_after_the_cool_down() -> None:
    rig = make_rig()
    rig.allocator.set_total_expected_executors(3)
    assert [rig.avoided(i) for i in (1, 2, 3)] == [[], [], []]
    rig.store.update_pod(on(failed_executor(1), "node-a"))
    rig.store.update_pod(on(running_executor(2), "node-b"))
    rig.store.update_pod(on(running_executor(3), "node-a"))
    rig.store.notify_subscribers()
    assert rig.blocklist.blocked() == []  # one failure is not enough
    assert rig.avoided(4) == []  # executor 1's replacement
    rig.clock.advance(10)
    rig.store.update_pod(on(running_executor(4), "node-c"))
    rig.store.update_pod(on(failed_executor(3), "node-a"))
    rig.store.notify_subscribers()
    assert rig.blocklist.blocked() == ["node-a"]
    assert rig.avoided(5) == ["node-a"]  # executor 3's replacement
    (blocked,) = [n for n in rig.notices if n.kind is NoticeKind.NODE_BLOCKED]
    assert "node-a" in blocked.message
    assert blocked.retry_in == 300
    # Within the cool-down every new executor keeps off node-a; after it, they may go there.
    rig.clock.advance(289)
    rig.store.update_pod(on(failed_executor(5), "node-b"))
    rig.store.notify_subscribers()
    assert rig.avoided(6) == ["node-a"]
    rig.clock.advance(11)  # blocked at 1010 for 300 s: lifted at 1310
    rig.store.update_pod(on(failed_executor(6), "node-c"))
    rig.store.notify_subscribers()
    assert rig.blocklist.blocked() == []
    assert rig.avoided(7) == []
    (lifted,) = [n for n in rig.notices if n.kind is NoticeKind.NODE_UNBLOCKED]
    assert "node-a" in lifted.message
    assert rig.blocklist.blocks == 1


def test_failures_older_than_the_window_do_not_add_up() -> None:
    rig = make_rig()
    rig.allocator.set_total_expected_executors(1)
    rig.store.update_pod(on(failed_executor(1), "node-a"))
    rig.store.notify_subscribers()
    rig.clock.advance(61)
    rig.store.update_pod(on(failed_executor(2), "node-a"))
    rig.store.notify_subscribers()
    assert rig.blocklist.blocked() == []
    assert rig.avoided(3) == []


def test_preemptions_and_drains_are_not_the_nodes_fault_node_pressure_is() -> None:
    rig = make_rig()
    rig.allocator.set_total_expected_executors(1)
    preempted = replace(on(failed_executor(1), "node-a"), disruption="PreemptionByScheduler")
    drained = replace(on(failed_executor(2), "node-a"), disruption="EvictionByEvictionAPI")
    rig.store.update_pod(preempted)
    rig.store.update_pod(drained)
    rig.store.notify_subscribers()
    assert rig.blocklist.blocked() == []
    for executor_id in (3, 4):
        pressed = on(failed_executor(executor_id), "node-a")
        rig.store.update_pod(replace(pressed, disruption="TerminationByKubelet"))
    rig.store.notify_subscribers()
    assert rig.blocklist.blocked() == ["node-a"]


def test_the_same_failed_executor_counts_once_however_many_rounds_see_it() -> None:
    rig = make_rig()
    rig.allocator.set_total_expected_executors(1)
    rig.store.update_pod(on(failed_executor(1), "node-a"))
    for _ in range(3):
        rig.store.notify_subscribers()
        rig.clock.advance(1)
    assert rig.blocklist.blocked() == []


def test_a_block_that_leaves_no_node_says_so() -> None:
    """Issue 32 (also noted): on `128638e` blocking every node executors ran on passed without a
    word beyond the one node's notice, and new executors could only stay Pending."""
    rig = make_rig()
    rig.allocator.set_total_expected_executors(2)
    rig.store.update_pod(on(failed_executor(1), "node-a"))
    rig.store.update_pod(on(failed_executor(2), "node-a"))
    rig.store.notify_subscribers()
    (first,) = [n for n in rig.notices if n.kind is NoticeKind.NODE_BLOCKED]
    assert first.reason == "EveryNodeBlocked"  # node-a was the only node seen
    assert "Every node" in first.message
    rig.notices.clear()
    rig.clock.advance(400)
    rig.store.notify_subscribers()  # node-a lifted
    rig.store.update_pod(on(running_executor(3), "node-b"))  # executors run on node-b too
    rig.store.update_pod(on(failed_executor(4), "node-a"))
    rig.store.update_pod(on(failed_executor(5), "node-a"))
    rig.store.notify_subscribers()
    (again,) = [n for n in rig.notices if n.kind is NoticeKind.NODE_BLOCKED]
    assert again.reason == ""  # node-b is left
