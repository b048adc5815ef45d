"""Properties of the allocator over any ordering of targets, cluster progress, driver registrations,
refusals and time, as hypothesis finds them.

- never more executors not yet running than spark.kubernetes.allocation.maxPendingPods, nor more of
  one profile than maxPendingPodsPerRp, because of a create;
- scale-down never deletes a pod of an executor the driver knows or that is running;
- an executor id is never issued twice;
- and the pure rules behind them: `split_slots` shares exactly the slots it is given, fairly.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import partial

from execpods.core import CoreSettings, PodAdmissionRejected, ResourceProfile, ResourceProfiles
from execpods.core.allocation import split_slots
from execpods.core.creation import ThreadPoolRunner
from execpods.core.labels import SPARK_LABELS
from execpods.core.testing import TEST_APP_ID
from hypothesis import example, given, settings
from hypothesis import strategies as st

from .allocator_support import pod
from .conftest import AllocatorRig, make_allocator_rig

START = 1_767_225_600.0

TARGET = st.tuples(st.just("target"), st.tuples(st.integers(0, 1), st.integers(0, 30)))
APPEAR = st.tuples(st.just("appear"), st.integers(1, 10))
REGISTER = st.tuples(st.just("register"), st.integers(1, 10))
ROUND = st.tuples(st.just("round"), st.none())
STEP = st.one_of(
    TARGET,
    TARGET,
    APPEAR,
    APPEAR,
    st.tuples(st.just("start"), st.integers(0, 10)),
    st.tuples(st.just("fail"), st.integers(0, 3)),
    REGISTER,
    st.tuples(st.just("refuse"), st.integers(1, 3)),
    st.tuples(st.just("time"), st.integers(1, 40)),
    ROUND,
    ROUND,
    ROUND,
)


class Cluster:
    """A model cluster over the rig's pod registry: what each created executor is doing."""

    def __init__(self, rig: AllocatorRig) -> None:
        self.rig = rig
        self.phase: dict[int, str] = {}

    def profile(self, executor_id: int) -> int:
        for manifest in self.rig.pods.created:
            labels = manifest["metadata"]["labels"]
            if labels["spark-exec-id"] == str(executor_id):
                return int(labels["spark-exec-resourceprofile-id"])
        raise AssertionError(executor_id)

    def alive(self) -> list[int]:
        """Created executors whose pods still exist (scale-down and timeouts delete them)."""
        names = set(self.rig.pods.pods)
        return [
            i for i in self.rig.pods.created_executor_ids() if f"{TEST_APP_ID}-exec-{i}" in names
        ]

    def move(self, executor_id: int, phase: str) -> None:
        self.phase[executor_id] = phase
        self.rig.store.update_pod(pod(self.rig, executor_id, phase, self.profile(executor_id)))

    def not_running(self, rp: int | None = None) -> int:
        return sum(
            1
            for i in self.alive()
            if self.phase.get(i, "unseen") in ("unseen", "pending")
            and (rp is None or self.profile(i) == rp)
        )


@settings(max_examples=400, deadline=None)
@given(
    steps=st.lists(STEP, max_size=60),
    max_pending=st.integers(1, 12),
    per_rp=st.integers(1, 12),
    adaptive=st.booleans(),
)
@example(  # registered pending executors, then a lower target: none of them may go
    steps=[
        ("target", (0, 3)),
        ("appear", 3),
        ("register", 3),
        ("time", 10),
        ("target", (0, 0)),
        ("round", None),
    ],
    max_pending=12,
    per_rp=12,
    adaptive=False,
)
def test_allocation_invariants_hold_for_any_ordering(
    steps: list[tuple[str, object]], max_pending: int, per_rp: int, adaptive: bool
) -> None:
    per_rp = min(per_rp, max_pending)
    core = CoreSettings(
        batch_size=3,
        executor_idle_timeout=5.0,
        adaptive_batches=adaptive,
        max_pending_pods=max_pending,
        max_pending_pods_per_rp_setting=per_rp,
    )
    profiles = ResourceProfiles([ResourceProfile(id=1, cores=2)])
    rig = make_allocator_rig(core, profiles=profiles, clock_start=START, api_rate_ceiling=2)
    cluster = Cluster(rig)
    rig.store.replace_snapshot([])
    for kind, value in steps:
        deletes_before = len(rig.pods.deletes)
        known = set(rig.driver.known)
        running = {i for i, p in cluster.phase.items() if p == "running"}
        if kind == "target":
            assert isinstance(value, tuple)
            rig.allocator.set_total_expected_executors(value[1], resource_profile_id=value[0])
        elif kind == "appear":
            unseen = [i for i in cluster.alive() if i not in cluster.phase]
            for executor_id in unseen[: int(str(value))]:
                cluster.move(executor_id, "pending")
            continue
        elif kind in ("start", "fail"):
            pending = [i for i in cluster.alive() if cluster.phase.get(i) == "pending"]
            for executor_id in pending[: int(str(value))]:
                cluster.move(executor_id, "running" if kind == "start" else "failed")
            continue
        elif kind == "register":
            seen = [i for i in cluster.alive() if cluster.phase.get(i) in ("pending", "running")]
            rig.driver.known.update(seen[: int(str(value))])
            continue
        elif kind == "refuse":
            for _ in range(int(str(value))):
                rig.pods.fail_next_create(PodAdmissionRejected("exceeded quota", status=403))
            continue
        elif kind == "time":
            rig.clock.advance(float(str(value)))
            continue
        else:
            rig.store.notify_subscribers()
        # Scale-down never touched a known or running executor.
        for call in rig.pods.deletes[deletes_before:]:
            assert call.selector is not None
            if call.selector.phase != "Pending":
                continue  # a creation timeout's delete: the executor was never seen
            ids = {int(i) for i in call.selector.label_in[SPARK_LABELS.executor_id]}
            assert not ids & known, f"deleted executors the driver knows: {ids & known}"
            assert not ids & running, f"deleted running executors: {ids & running}"
        # Creates never pushed the not-yet-running executors over the caps.
        assert cluster.not_running() <= max_pending
        for rp in (0, 1):
            assert cluster.not_running(rp) <= per_rp
        # Ids are never reused.
        created = rig.pods.created_executor_ids()
        assert len(created) == len(set(created))
        assert created == sorted(created)


@settings(max_examples=300, deadline=None)
@given(consumers=st.lists(st.integers(), min_size=1, max_size=8), slots=st.integers(0, 100))
def test_split_slots_shares_every_slot_fairly_first_ones_first(
    consumers: list[int], slots: int
) -> None:
    shares = [share for _, share in split_slots(consumers, slots)]
    assert [c for c, _ in split_slots(consumers, slots)] == consumers
    assert sum(shares) == slots
    assert max(shares) - min(shares) <= 1
    assert shares == sorted(shares, reverse=True)


def test_the_properties_run_against_a_capped_allocator() -> None:
    """The property's own rig is capped: a direct check that the cap binds at all."""
    core = replace(CoreSettings(), batch_size=10, adaptive_batches=False, max_pending_pods=4)
    rig = make_allocator_rig(core, clock_start=START)
    rig.allocator.set_total_expected_executors(10)
    assert len(rig.pods.created) == 4


def test_the_thread_pool_runner_keeps_order_and_at_most_limit_in_flight() -> None:
    in_flight = 0
    most = 0
    lock = threading.Lock()
    release = threading.Barrier(3, timeout=10)

    def task(value: int) -> int:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        release.wait()  # three at once must be possible, and no more are started
        with lock:
            in_flight -= 1
        return value * 2

    runner = ThreadPoolRunner(workers=8)
    try:
        results = runner.run([partial(task, i) for i in range(9)], 3)
    finally:
        runner.shutdown()
    assert results == [i * 2 for i in range(9)]
    assert most == 3
