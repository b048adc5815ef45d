"""RequestTotal.failure_limit: the driver's executor failure limit replaces the sidecar's own, over
real gRPC (the Spark plugin sends Spark's), and a bad one changes nothing."""

from __future__ import annotations

import grpc
import pytest
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc

from tests.sidecar.conftest import SidecarFactory


def test_the_drivers_failure_limit_replaces_the_sidecars(make_sidecar: SidecarFactory) -> None:
    sidecar = make_sidecar("limits")
    backend = sidecar.runtime.backend
    assert backend.failure_limit() == (3, None)  # its own: max(3, 2 x 0 executors)
    with grpc.insecure_channel(sidecar.address) as channel:
        stub = pb_grpc.ExecutorAllocatorStub(channel)
        limit = pb.FailureLimit(max_failures=40, validity_interval_ms=90_000)
        stub.RequestTotal(pb.RequestTotalRequest(total=0, failure_limit=limit), timeout=10)
        assert backend.failure_limit() == (40, 90.0)
        stub.RequestTotal(pb.RequestTotalRequest(total=0), timeout=10)  # unset: kept
        assert backend.failure_limit() == (40, 90.0)
        bad = pb.FailureLimit(max_failures=-1)
        with pytest.raises(grpc.RpcError) as caught:
            stub.RequestTotal(pb.RequestTotalRequest(total=2, failure_limit=bad), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "failure_limit" in (caught.value.details() or "")
    assert backend.failure_limit() == (40, 90.0)
    assert backend.targets()[0] == 0  # the bad request's total did not apply either
