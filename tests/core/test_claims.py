"""OnDemand claims per executor: ports of Spark's `ExecutorPodsAllocatorSuite` PVC scenarios.

Spark's suite mocks the client; here the claims live in an in-memory registry, the pods in the
in-memory pod registry, and time on a manual clock, so each scenario runs Spark's steps and
asserts what was created, reused and counted.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from execpods.core import (
    ExecutorPodsBackend,
    NoticeKind,
    PodForbidden,
)
from execpods.core.claims import ClaimSettings
from execpods.core.testing import TEST_APP_ID

from .claims_support import DRIVER_OWNER, ClaimsRig, claims_rig

WAIT = ClaimSettings(wait_to_reuse=True)


def run_round(rig: ClaimsRig, *pods: tuple[int, str]) -> None:
    for executor_id, phase in pods:
        rig.store.update_pod(rig.pod(executor_id, phase))
    rig.store.notify_subscribers()


def test_on_demand_claims_are_created_per_executor_and_owned_by_the_driver_pod() -> None:
    rig = claims_rig()
    rig.allocator.set_total_expected_executors(2)
    assert rig.claims.created == [f"{TEST_APP_ID}-exec-1-pvc-0", f"{TEST_APP_ID}-exec-2-pvc-0"]
    for executor_id in (1, 2):
        name = rig.claim_of(executor_id)
        assert rig.claims.claims[name]["metadata"]["ownerReferences"] == [DRIVER_OWNER]
    assert rig.policy.made == 2


def test_without_a_driver_pod_the_executor_pod_owns_its_claim_and_none_is_reused() -> None:
    rig = claims_rig(driver_owner=None)
    rig.claims.add_existing("old-pvc", age=60.0)
    rig.allocator.set_total_expected_executors(1)
    name = rig.claim_of(1)
    assert name == f"{TEST_APP_ID}-exec-1-pvc-0"  # no reuse without a driver pod (Spark)
    owner = rig.claims.claims[name]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Pod", f"{TEST_APP_ID}-exec-1")


def test_spark_35416_support_persistent_volume_claim_reuse() -> None:
    """SPARK-35416: a new executor takes over an unused claim of the same class and size."""
    rig = claims_rig()
    rig.claims.add_existing("pvc-0", age=900.0)
    rig.allocator.set_total_expected_executors(1)
    assert rig.claim_of(1) == "pvc-0"
    assert rig.claims.created == []
    run_round(rig, (1, "Running"))
    assert rig.allocator.outstanding_pods == 0
    # pvc-0 is in use by executor 1 now: executor 2 needs a claim of its own.
    rig.allocator.set_total_expected_executors(2)
    assert rig.claim_of(2) == f"{TEST_APP_ID}-exec-2-pvc-0"
    # Executor 1 is lost; once its pod is gone its claim goes to the replacement.
    rig.store.replace_snapshot([rig.pod(2, "Running")])
    rig.clock.advance(2.0)
    rig.store.notify_subscribers()
    assert rig.claim_of(3) == "pvc-0"
    assert rig.claims.created == [f"{TEST_APP_ID}-exec-2-pvc-0"]
    assert rig.policy.reused == 2


def test_a_claim_of_another_storage_class_is_not_reused() -> None:
    rig = claims_rig()
    rig.claims.add_existing("fast", age=900.0, storage_class="gp3")
    rig.allocator.set_total_expected_executors(1)
    assert rig.claim_of(1) == f"{TEST_APP_ID}-exec-1-pvc-0"


def test_spark_39688_get_reusable_pvcs_handles_accounts_with_no_pvc_permission() -> None:
    """SPARK-39688: a list the account may not make means no reuse, not a failed round."""
    rig = claims_rig()
    rig.claims.add_existing("pvc-0", age=900.0)
    rig.claims.list_error = PodForbidden("persistentvolumeclaims is forbidden")
    rig.allocator.set_total_expected_executors(1)
    assert rig.claim_of(1) == f"{TEST_APP_ID}-exec-1-pvc-0"
    assert rig.told(NoticeKind.CREATE_FAILED) == 0


def test_spark_41388_recently_created_pvcs_of_the_previous_batch_are_not_reused() -> None:
    """SPARK-41388: a claim made within the last batch delay may be about to be used."""
    rig = claims_rig()
    rig.claims.add_existing("pvc-1", age=900.0)
    rig.claims.add_existing("pvc-2", age=0.0)
    rig.allocator.set_total_expected_executors(2)
    assert rig.claim_of(1) == "pvc-1"
    assert rig.claim_of(2) == f"{TEST_APP_ID}-exec-2-pvc-0"


def test_spark_41410_support_wait_to_reuse_persistent_volume_claims() -> None:
    """SPARK-41410: at spark.executor.instances claims, a new executor waits for a free one."""
    rig = claims_rig(WAIT, max_claims=1)
    assert rig.policy.made == 0
    rig.allocator.set_total_expected_executors(1)
    assert rig.allocator.outstanding_pods == 1
    assert rig.policy.made == 1
    run_round(rig, (1, "Running"))
    assert rig.allocator.outstanding_pods == 0
    assert rig.pods.created_executor_ids() == [1]
    rig.allocator.set_total_expected_executors(2)
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0
    assert rig.pods.created_executor_ids() == [1]
    assert rig.policy.made == 1
    # Executor 1 goes: its claim is free again (once older than the pod creation timeout),
    # and one replacement takes it over (the other still waits: the application has its one
    # claim).
    rig.store.replace_snapshot([])
    rig.clock.advance(601.0)
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == [1, 2]
    assert rig.claim_of(2) == rig.claim_of(1)
    assert rig.policy.made == 1


def test_spark_41410_an_exception_during_pvc_creation_does_not_increase_the_counter() -> None:
    """SPARK-41410: a claim that failed is not counted; its executor's pod is deleted."""
    rig = claims_rig(WAIT, max_claims=1)
    rig.claims.create_errors.append(PodForbidden("PVC fails to create"))
    rig.allocator.set_total_expected_executors(1)
    assert rig.policy.made == 0
    assert rig.allocator.outstanding_pods == 0
    assert rig.pods.deletes_of(f"{TEST_APP_ID}-exec-1") == 1
    assert rig.told(NoticeKind.CREATE_REFUSED) == 1


def stopping_backend(rig: ClaimsRig) -> ExecutorPodsBackend:
    return rig.backend


def test_claims_are_deleted_when_the_backend_stops() -> None:
    rig = claims_rig()
    backend = stopping_backend(rig)
    rig.allocator.set_total_expected_executors(1)  # allocation ran: claims were made
    rig.claims.add_existing("pvc-0", age=1.0)
    backend.stop(wait=lambda _s: None)
    assert rig.claims.deleted_for == [TEST_APP_ID]
    assert rig.claims.claims == {}


def test_a_backend_that_never_allocated_deletes_no_claims() -> None:
    """A sidecar that fails before its first round (a port it cannot bind) touches nothing."""
    rig = claims_rig()
    rig.claims.add_existing("pvc-0", age=1.0)
    stopping_backend(rig).stop(wait=lambda _s: None)
    assert rig.claims.deleted_for == []
    assert list(rig.claims.claims) == ["pvc-0"]


@pytest.mark.parametrize("own", [True, False])
def test_wait_to_reuse_needs_ownership(own: bool) -> None:
    rig = claims_rig(ClaimSettings(own=own, wait_to_reuse=True), max_claims=1)
    rig.allocator.set_total_expected_executors(2)
    assert rig.pods.created_executor_ids() == ([1] if own else [1, 2])


def test_m4_a_claim_is_reused_only_past_the_creation_timeout_and_out_of_use() -> None:
    """Issue 33 M4, `ExecutorPodsAllocator.getReusablePVCs`: only a claim created more than the
    pod creation timeout ago (max(5 x batch.delay, allocation.executor.timeout), 600 s) and that
    no pod uses is reused; a Terminating pod still uses its claim, a pod the API deleted no longer
    does (as real Spark 4.3 reuses it, side by side: the claims scenario). 128638e reused a claim
    one batch delay after its pod went, so under watch lag a claim made for a pod not yet seen
    could be handed to a second one."""
    rig = claims_rig()
    rig.allocator.set_total_expected_executors(1)
    run_round(rig, (1, "Running"))
    rig.clock.advance(2.0)
    running = rig.pod(1, "Running")
    terminating = replace(running, deletion_timestamp=running.creation_timestamp)
    rig.store.update_pod(terminating)
    rig.allocator.set_total_expected_executors(2)
    others = rig.pods.created_executor_ids()[1:]
    assert others, "more executors were asked for"
    for executor_id in others:  # executor 1 still mounts its claim: theirs are new
        assert rig.claim_of(executor_id) == f"{TEST_APP_ID}-exec-{executor_id}-pvc-0"
    rig.store.update_pod(replace(terminating, gone=True))  # gone: its claim is free, but young
    run_round(rig, *((i, "Running") for i in others))
    rig.allocator.set_total_expected_executors(len(others) + 1)
    young = max(rig.pods.created_executor_ids())
    assert rig.claim_of(young) == f"{TEST_APP_ID}-exec-{young}-pvc-0", "2 s old: not reused"
    run_round(rig, *((i, "Running") for i in [*others, young]))
    rig.clock.advance(700.0)
    rig.allocator.set_total_expected_executors(len(others) + 2)
    newest = max(rig.pods.created_executor_ids())
    assert rig.claim_of(newest) == f"{TEST_APP_ID}-exec-1-pvc-0", "old enough, out of use"


def test_m4_a_claim_younger_than_the_creation_timeout_is_not_reused() -> None:
    """The same rule's other half: out of every pod, but made 10 s ago: a new claim."""
    rig = claims_rig()
    rig.claims.add_existing("young", age=10.0)
    rig.allocator.set_total_expected_executors(1)
    assert rig.claim_of(1) == f"{TEST_APP_ID}-exec-1-pvc-0"
