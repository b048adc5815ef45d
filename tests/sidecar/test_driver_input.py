"""Issue 32 item 3 (R5): what a driver sends keeps no memory beyond the executors that exist.

On `128638e` UpdateDriverExecutors kept every id it was told, issued or not, for ever, and echoed
them all back in every answer (800,000 of them took the sidecar from 188 to 314 MiB, beyond the
shipped manifest's 256 Mi limit); a kill of a huge id list kept its ids too. Now ids above the
highest the application ever issued are not believed: registrations of them wait in a bounded
buffer until the ids exist, kills and releases of them are dropped, and nothing is echoed.
"""

from __future__ import annotations

import gc
import tracemalloc

import grpc
from execpods.kubesim import KubeSim
from execpods.sidecar.driver_view import MAX_UNCONFIRMED, InferredDriverView
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc

from tests.sidecar.conftest import SidecarFactory, running_ids, wait_for

BUDGET = 4 << 20
"""Python memory the sidecar may keep after the driver's bulk calls (a bounded buffer of
registrations is about 1 MiB; the ids themselves were tens of MiB)."""
UNKNOWN = 1_000_000_000
BULK = 50_000
"""Ids a call (the issue's probe sent 200,000; what one of them kept is a quarter of that)."""


SIDECAR_CODE = [
    tracemalloc.Filter(True, f"*/packages/{package}/*")
    for package in ("sidecar", "core", "k8s_adapter", "contract")
]
"""The sidecar's own code: the test's client lives in the same process and is not measured."""


def kept_by_the_sidecar(before: tracemalloc.Snapshot) -> int:
    gc.collect()
    after = tracemalloc.take_snapshot().filter_traces(SIDECAR_CODE)
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


def test_bulk_calls_with_unknown_ids_stay_within_a_memory_budget(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("budget", conf={"spark.executor.instances": "2"})
    view = sidecar.runtime.driver_view
    wait_for(lambda: set(view.executor_ids()) == {1, 2}, what="two running, known")
    with grpc.insecure_channel(sidecar.address) as channel:
        stub = pb_grpc.ExecutorAllocatorStub(channel)
        stub.UpdateDriverExecutors(pb.UpdateDriverExecutorsRequest(registered=[1]))  # warm up
        stub.KillExecutors(pb.KillExecutorsRequest(executor_ids=[str(UNKNOWN)]))
        gc.collect()
        tracemalloc.start(1)
        try:
            before = tracemalloc.take_snapshot().filter_traces(SIDECAR_CODE)
            for call in range(4):
                ids = range(UNKNOWN + call * BULK, UNKNOWN + (call + 1) * BULK)
                answer = stub.UpdateDriverExecutors(
                    pb.UpdateDriverExecutorsRequest(
                        registered=ids,
                        released=ids,
                        registered_at_ms=dict.fromkeys(ids[:1000], 1),
                    ),
                    timeout=60,
                )
                assert sorted(answer.known) == [1, 2]  # nothing echoed that was not believed
            killed = stub.KillExecutors(
                pb.KillExecutorsRequest(
                    executor_ids=[str(i) for i in range(UNKNOWN, UNKNOWN + 200_000)]
                ),
                timeout=60,
            )
            assert killed.deleted_pods == 0
            kept = kept_by_the_sidecar(before)
        finally:
            tracemalloc.stop()
    assert kept < BUDGET, f"{kept / 2**20:.1f} MiB kept after the driver's bulk calls"
    assert view.dropped == 4 * BULK - MAX_UNCONFIRMED
    assert running_ids(sim, "budget") == {1, 2}


def test_a_registration_before_its_id_exists_waits_and_then_counts() -> None:
    highest = [0]
    view = InferredDriverView(highest_id=lambda: highest[0])
    # A driver re-sends its view to a sidecar that has not listed its pods yet.
    assert view.update(registered=[3, 4], released=[], explicit=True, registered_at={3: 5.0}) == []
    assert list(view.executor_ids()) == []
    highest[0] = 3  # the ledger's mark read, the pods listed
    assert view.update(registered=[], released=[], explicit=True) == [3]
    assert view.registration_times() == {3: 5.0}
    highest[0] = 10
    view.round_started([])
    assert sorted(view.executor_ids()) == [3, 4]


def test_releases_and_times_of_ids_never_issued_are_not_kept() -> None:
    view = InferredDriverView(highest_id=lambda: 5)
    view.update(registered=[], released=range(6, 100_006), explicit=False, registered_at={9: 1.0})
    assert view.is_executor_active(7) is False
    assert view.registration_times() == {}
    assert len(view._released) == 0
    assert len(view._unconfirmed) == 0


def test_the_buffer_of_unconfirmed_registrations_is_bounded() -> None:
    view = InferredDriverView(highest_id=lambda: 0)
    view.update(registered=range(1, MAX_UNCONFIRMED + 501), released=[], explicit=True)
    assert len(view._unconfirmed) == MAX_UNCONFIRMED
    assert view.dropped == 500
