"""Allocation over the contract, end to end: resource profiles, IsDeleted, and allocator notices.

Real gRPC to an embedded sidecar over real HTTP to the simulator: a driver declares profiles and
per-profile totals in RequestTotal, asks IsDeleted about an executor scale-down removed, and hears
refused creates and the lifetime id cap on its stream.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest
from execpods.client import AllocatorClient, AllocatorNotice, ExecutorProfile
from execpods.kubesim import KubeSim, Pod
from execpods.kubesim.bodies import Container
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc

from tests.sidecar.conftest import SidecarFactory, app_pods, wait_for

GPU_PROFILE = pb.ResourceProfile(
    id=1,
    cores=2,
    memory_mib=1024,
    memory_overhead_mib=256,
    extra_resources={"example.com/gpu": "1"},
)


def _stub(address: str) -> Iterator[pb_grpc.ExecutorAllocatorStub]:
    with grpc.insecure_channel(address) as channel:
        yield pb_grpc.ExecutorAllocatorStub(channel)


def _profile_of(pod: Pod) -> str:
    return pod["metadata"]["labels"]["spark-exec-resourceprofile-id"]


def _resource(container: Container, kind: str, name: str) -> object:
    """One entry of the container's resources (`requests` or `limits`)."""
    resources = container["resources"][kind]
    assert isinstance(resources, dict)
    return resources[name]


def test_a_driver_declares_a_profile_and_gets_pods_of_its_shape(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("shapes")
    for stub in _stub(sidecar.address):
        response = stub.RequestTotal(
            pb.RequestTotalRequest(total=1, profile_totals={1: 2}, profiles=[GPU_PROFILE]),
            timeout=10,
        )
        assert dict(response.profile_totals) == {0: 1, 1: 2}
        assert response.total == 3
        wait_for(lambda: len(app_pods(sim, "shapes")) == 3, what="three pods")
    pods = app_pods(sim, "shapes")
    assert sorted(_profile_of(p) for p in pods) == ["0", "1", "1"]
    for pod in pods:
        if _profile_of(pod) != "1":
            continue
        (container,) = pod["spec"]["containers"]
        assert _resource(container, "requests", "cpu") == "2"
        assert _resource(container, "requests", "memory") == "1280Mi"
        assert _resource(container, "limits", "example.com/gpu") == "1"


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (pb.RequestTotalRequest(total=1, profile_totals={2: 1}), "resource profile 2 was never"),
        (pb.RequestTotalRequest(total=1, profile_totals={0: 1}), "profile_totals[0] is invalid"),
        (
            pb.RequestTotalRequest(total=1, profile_totals={1: -1}, profiles=[GPU_PROFILE]),
            "resource profile 1: total=-1 is invalid: it must not be negative",
        ),
        (  # the total is refused: the profile declared beside it is not declared either
            pb.RequestTotalRequest(total=10_001, profiles=[pb.ResourceProfile(id=7, cores=2)]),
            "resource profile 0: total=10001 is invalid: it is above "
            "execpods.allocation.maxTotal=10000",
        ),
        (
            pb.RequestTotalRequest(
                profiles=[pb.ResourceProfile(id=7, cores=2), pb.ResourceProfile(id=7, cores=3)]
            ),
            "resource profile 7 is declared twice in one request",
        ),
        (
            pb.RequestTotalRequest(profiles=[pb.ResourceProfile(id=3, pod_template="[1]")]),
            "the pod template is not a Pod",
        ),
        (
            pb.RequestTotalRequest(profiles=[pb.ResourceProfile(id=1, cores=-1)]),
            "cores=-1 must be positive",
        ),
        (  # a pod Spark built for another application (the Spark plugin's declarations)
            pb.RequestTotalRequest(
                profiles=[
                    pb.ResourceProfile(
                        id=0,
                        pod_template='{"metadata": {"labels": {"spark-app-selector": "spark-1"}}}',
                    )
                ]
            ),
            "labelled for application 'spark-1' (spark-app-selector) but this sidecar allocates"
            " for 'bad-profiles'",
        ),
    ],
)
def test_a_bad_profile_request_is_refused_whole(
    make_sidecar: SidecarFactory, request_: pb.RequestTotalRequest, message: str
) -> None:
    sidecar = make_sidecar("bad-profiles")
    for stub in _stub(sidecar.address):
        with pytest.raises(grpc.RpcError) as caught:
            stub.RequestTotal(request_, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in str(caught.value.details())
        assert sidecar.runtime.backend.declared_profile_ids() == [0], "nothing was declared"
        assert sidecar.runtime.backend.targets() == {0: 0}


def test_a_profile_cannot_change_shape_once_declared(make_sidecar: SidecarFactory) -> None:
    sidecar = make_sidecar("immutable")
    for stub in _stub(sidecar.address):
        stub.RequestTotal(pb.RequestTotalRequest(profiles=[GPU_PROFILE]), timeout=10)
        stub.RequestTotal(pb.RequestTotalRequest(profiles=[GPU_PROFILE]), timeout=10)  # same: fine
        reshaped = pb.ResourceProfile(id=1, cores=8)
        with pytest.raises(grpc.RpcError) as caught:
            stub.RequestTotal(
                pb.RequestTotalRequest(profile_totals={1: 3}, profiles=[reshaped]), timeout=10
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "immutable" in str(caught.value.details())
        assert sidecar.runtime.backend.targets() == {0: 0}


def _notices(
    stub: pb_grpc.ExecutorAllocatorStub, found: list[pb.AllocatorNotice]
) -> tuple[threading.Thread, grpc.RpcContext]:
    """Follow a stream's notices; returns once the stream is open (its first message arrived), so
    no notice of a later request can be missed: notices are events, not state."""
    call = stub.StreamSnapshots(pb.StreamSnapshotsRequest(batch_interval_ms=50))
    opened = threading.Event()

    def read() -> None:
        try:
            for message in call:
                opened.set()
                found.extend(message.allocator_notices)
        except grpc.RpcError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert opened.wait(10), "the stream opened"
    return reader, call


def test_the_allocation_maximum_is_reported_on_the_stream_and_allocation_stops(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("capped", conf={"spark.kubernetes.allocation.maximum": "3"})
    found: list[pb.AllocatorNotice] = []
    for stub in _stub(sidecar.address):
        reader, call = _notices(stub, found)
        stub.RequestTotal(pb.RequestTotalRequest(total=5), timeout=10)
        wait_for(lambda: found, what="the notice")
        wait_for(lambda: len(app_pods(sim, "capped")) == 2, what="the two pods under the cap")
        call.cancel()
        reader.join(5)
    (notice,) = found
    assert notice.kind == pb.AllocatorNotice.KIND_ALLOCATION_MAXIMUM_REACHED
    assert "spark.kubernetes.allocation.maximum=3" in notice.message
    assert sorted(
        int(p["metadata"]["labels"]["spark-exec-id"]) for p in app_pods(sim, "capped")
    ) == [
        1,
        2,
    ]


def test_a_refused_create_is_reported_on_the_stream(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("refused")
    found: list[pb.AllocatorNotice] = []
    sim.reject_creates(422, count=1)
    for stub in _stub(sidecar.address):
        reader, call = _notices(stub, found)
        stub.RequestTotal(pb.RequestTotalRequest(total=2), timeout=10)
        wait_for(lambda: found, what="the notice")
        wait_for(lambda: len(app_pods(sim, "refused")) == 2, what="two pods after the backoff")
        call.cancel()
        reader.join(5)
    assert found[0].kind == pb.AllocatorNotice.KIND_CREATE_REFUSED
    assert found[0].count == 1
    assert found[0].retry_in_ms > 0


def test_is_deleted_names_an_executor_scale_down_removed_until_its_pod_is_gone(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar(
        "trimmed",
        conf={
            "spark.dynamicAllocation.executorIdleTimeout": "1ms",
            # A full list drops the deleted pods from the snapshots (level-triggered).
            "spark.kubernetes.executor.apiPollingInterval": "300ms",
        },
    )
    with grpc.insecure_channel(sidecar.address) as channel:
        stub = pb_grpc.ExecutorAllocatorStub(channel)

        def deleted(executor_id: int) -> bool:
            answer: pb.IsDeletedResponse = stub.IsDeleted(
                pb.IsDeletedRequest(executor_id=executor_id), timeout=5
            )
            return answer.deleted

        sim.pause_kubelet()  # pods stay Pending, and a deleted one stays until the kubelet acts
        stub.RequestTotal(pb.RequestTotalRequest(total=3), timeout=10)
        wait_for(lambda: len(app_pods(sim, "trimmed")) == 3, what="three pending pods")
        stub.RequestTotal(pb.RequestTotalRequest(total=1), timeout=10)
        # The oldest requests go first, as Spark takes them in request order.
        wait_for(lambda: deleted(1) and deleted(2), what="executors 1 and 2 deleted")
        assert not deleted(3)
        sim.resume_kubelet()
        wait_for(lambda: not deleted(1), what="forgotten once the pod left the snapshots")
        with pytest.raises(grpc.RpcError) as caught:
            deleted(0)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_the_typed_client_declares_profiles_asks_is_deleted_and_hears_notices(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("typed", conf={"spark.kubernetes.allocation.maximum": "3"})
    with (
        AllocatorClient(sidecar.address) as client,
        client.stream_snapshots(batch_interval_ms=50) as stream,
    ):
        result = client.request_total(
            1, profile_totals={1: 2}, profiles=[ExecutorProfile(id=1, cores=2)]
        )
        assert dict(result.profile_totals) == {0: 1, 1: 2}
        notices: list[AllocatorNotice] = []
        for update in stream:
            notices.extend(update.notices)
            if notices:
                break
        assert notices[0].kind == "allocation_maximum_reached"
        assert not client.is_deleted(1)
    wait_for(lambda: len(app_pods(sim, "typed")) == 2, what="the two pods under the cap")
