"""Adversarial input to every RPC, over a real gRPC channel, against a sidecar on kubesim.

hypothesis sends huge and negative numbers, unknown resource profile ids, malformed and oversized
ids, 100,000 ids, absurd intervals and positions from the future or from other processes. Every
call must end OK or with a clear INVALID_ARGUMENT naming the field (never UNKNOWN or INTERNAL: a
crash), exactly as the documented rules predict; the sidecar must still serve afterwards; and
kubesim's whole state and request log must show that nothing but this application's executor pods
was ever touched: the driver pod and another application's executors keep their identity and
labels, and every mutating request named this application's executor pods.

The module shares one simulator and one sidecar across all examples (a sidecar per example would
cost a second each); `execpods.allocation.maxTotal` is 5 so accepted totals stay small.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from execpods.devtools.simulated import simulator_properties
from execpods.k8s.ledger import ledger_config_map_name
from execpods.kubesim import KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.sidecar.conftest import FAST_CLUSTER

APP_ID = "fuzzed"
MAXIMUM = 5
MAX_INTERVAL_MS = 2_000
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)
_DECIMAL = re.compile(r"[0-9]+")
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CALL_TIMEOUT_S = 30


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "x"}]},
    }


BYSTANDERS = {
    "the-driver": {"spark-app-selector": APP_ID, "spark-role": "driver"},
    "other-exec-1": {"spark-app-selector": "other", "spark-role": "executor", "spark-exec-id": "1"},
    "other-exec-2": {"spark-app-selector": "other", "spark-role": "executor", "spark-exec-id": "2"},
    "unlabelled": {},
}


class Rig:
    def __init__(self, sim: KubeSim, sidecar: EmbeddedSidecar) -> None:
        self.sim = sim
        self.sidecar = sidecar
        self.channel = grpc.insecure_channel(sidecar.address)
        self.stub = pb_grpc.ExecutorAllocatorStub(self.channel)

    @property
    def incarnation(self) -> str:
        return self.sidecar.runtime.backend.removal_position.incarnation

    @property
    def sequence(self) -> int:
        return self.sidecar.runtime.backend.removal_position.sequence


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    with KubeSim(cluster=FAST_CLUSTER) as sim:
        for name, labels in BYSTANDERS.items():
            sim.create_pod(_pod(name, labels))
        before = {
            p["metadata"]["name"]: (p["metadata"]["uid"], p["metadata"].get("labels", {}))
            for p in sim.pods()
        }
        properties = simulator_properties(
            sim.url,
            APP_ID,
            **{
                "spark.executor.instances": "0",
                "spark.kubernetes.allocation.batch.delay": "150ms",
                "spark.kubernetes.executor.eventProcessingInterval": "100ms",
                "execpods.allocation.maxTotal": str(MAXIMUM),
                "execpods.sidecar.stream.maxBatchInterval": f"{MAX_INTERVAL_MS}ms",
            },
        )
        with EmbeddedSidecar(properties) as sidecar:
            fixture = Rig(sim, sidecar)
            yield fixture
            _still_serving(fixture)
            fixture.channel.close()
        _only_this_apps_executors_were_touched(sim, before)


def _code(call: Any) -> grpc.StatusCode:
    """The call's status; any failure must be a bounded INVALID_ARGUMENT that says why."""
    failure: grpc.RpcError | None = None
    try:
        call()
    except grpc.RpcError as error:
        failure = error
    if failure is None:
        return grpc.StatusCode.OK
    code: grpc.StatusCode = failure.code()
    details = failure.details() or ""
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    assert details, "an INVALID_ARGUMENT says why"
    assert len(details) < 2_000
    return code


def _expected(valid: bool) -> grpc.StatusCode:
    return grpc.StatusCode.OK if valid else grpc.StatusCode.INVALID_ARGUMENT


INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


@FUZZ
@given(
    total=st.one_of(INT32, st.integers(-3, 8)),
    profile_totals=st.one_of(st.just({}), st.dictionaries(INT32, INT32, max_size=3)),
)
@example(total=2**31 - 1, profile_totals={})
@example(total=-(2**31), profile_totals={})
@example(total=MAXIMUM + 1, profile_totals={})
@example(total=1, profile_totals={7: 1})  # an unknown resource profile
@example(total=1, profile_totals={0: 1})  # the default profile goes in `total`
def test_request_total(rig: Rig, total: int, profile_totals: dict[int, int]) -> None:
    request = pb.RequestTotalRequest(total=total, profile_totals=profile_totals)
    code = _code(lambda: rig.stub.RequestTotal(request, timeout=CALL_TIMEOUT_S))
    # No profile is ever declared here, so any per-profile total names an unknown one.
    assert code == _expected(0 <= total <= MAXIMUM and not profile_totals)


_ID_TEXT = st.one_of(
    st.integers(min_value=0, max_value=2**64).map(str),
    st.integers(max_value=-1).map(str),
    st.text(max_size=30),
    st.sampled_from(["", " 7", "7 ", "+7", "0x7", "\u0667", "99999999999999999999", "9" * 5000]),
)


def _valid_id(text: str) -> bool:
    digits = text.lstrip("0") or "0"
    return _DECIMAL.fullmatch(text) is not None and len(digits) <= 19 and int(digits) <= 2**63 - 1


@FUZZ
@given(ids=st.lists(_ID_TEXT, max_size=40))
@example(ids=[str(i) for i in range(1, 100_001)])
@example(ids=[*(str(i) for i in range(1, 100_000)), "x"])
def test_kill_executors(rig: Rig, ids: list[str]) -> None:
    request = pb.KillExecutorsRequest(executor_ids=ids)
    code = _code(lambda: rig.stub.KillExecutors(request, timeout=CALL_TIMEOUT_S))
    assert code == _expected(all(_valid_id(i) for i in ids))


@FUZZ
@given(registered=st.lists(INT64, max_size=40), released=st.lists(INT64, max_size=40))
@example(registered=list(range(1, 100_001)), released=[])
@example(registered=[], released=[0])
def test_update_driver_executors(rig: Rig, registered: list[int], released: list[int]) -> None:
    request = pb.UpdateDriverExecutorsRequest(registered=registered, released=released)
    code = _code(lambda: rig.stub.UpdateDriverExecutors(request, timeout=CALL_TIMEOUT_S))
    assert code == _expected(all(i >= 1 for i in registered + released))


@FUZZ
@given(
    interval=st.one_of(INT64, st.integers(-2, MAX_INTERVAL_MS + 2)),
    resume=st.one_of(
        st.none(),
        st.tuples(st.sampled_from(["ours", "other", ""]), UINT64),
        st.tuples(st.just("ours"), st.integers(0, 3)),
    ),
)
@example(interval=2**63 - 1, resume=None)
@example(interval=0, resume=("ours", 2**64 - 1))
@example(interval=0, resume=("other", 2**64 - 1))
def test_stream_snapshots(rig: Rig, interval: int, resume: tuple[str, int] | None) -> None:
    request = pb.StreamSnapshotsRequest(batch_interval_ms=interval)
    future = False
    resync = False
    if resume is not None:
        which, sequence = resume
        incarnation = rig.incarnation if which == "ours" else which
        request.resume_from.incarnation = incarnation
        request.resume_from.sequence = sequence
        future = which == "ours" and sequence > rig.sequence
        resync = which != "ours"
    first: list[pb.StreamSnapshotsResponse] = []

    def call() -> None:
        stream = rig.stub.StreamSnapshots(request, timeout=CALL_TIMEOUT_S)
        try:
            first.append(next(stream))
        finally:
            stream.cancel()

    code = _code(call)
    assert code == _expected(0 <= interval <= MAX_INTERVAL_MS and not future)
    if code == grpc.StatusCode.OK:
        (message,) = first
        assert message.snapshots[0].full
        assert message.position.incarnation == rig.incarnation
        if message.resync and not resync:
            # Our own position, yet flagged: only when more removals than the window holds came
            # after it (100,000 executors registered by the driver and never seen are each
            # reported missing, for one).
            window = rig.sidecar.runtime.settings.sidecar.stream_removal_window
            assert rig.sequence - request.resume_from.sequence > window
        else:
            assert message.resync == resync


def _still_serving(rig: Rig) -> None:
    health: Any = health_pb2_grpc.HealthStub(rig.channel)
    answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    assert rig.stub.RequestTotal(pb.RequestTotalRequest(total=0), timeout=5).total == 0


_EXECUTOR_SELECTOR = re.compile(rf"^spark-app-selector={APP_ID},spark-role=executor(,|$)")


def _only_this_apps_executors_were_touched(
    sim: KubeSim, before: dict[str, tuple[str, dict[str, str]]]
) -> None:
    """Over kubesim's whole state and every request it served.

    A bystander's resource version moves as the simulated kubelet runs it, so what is compared
    is its identity (uid), its labels and that nobody deleted it; the request log shows that no
    request named it.
    """
    after = {p["metadata"]["name"]: p for p in sim.pods()}
    for name, (uid, labels) in before.items():
        metadata = after[name]["metadata"]
        assert (metadata["uid"], metadata.get("labels", {})) == (uid, labels), name
        assert not metadata.get("deletionTimestamp"), name
    for name, pod in after.items():  # everything else is one of our executors
        if name not in BYSTANDERS:
            labels = pod["metadata"].get("labels", {})
            assert labels.get("spark-app-selector") == APP_ID, name
            assert labels.get("spark-role") == "executor", name
    for record in sim.requests():
        if record.method in ("GET", "HEAD"):
            continue
        name = record.path.rstrip("/").rsplit("/", 1)[-1]
        if record.method == "DELETE" and name == "pods":  # deletecollection: by its selector
            assert _EXECUTOR_SELECTOR.match(record.query.get("labelSelector", "")), record
        elif name == "configmaps" or name == ledger_config_map_name(APP_ID):
            # The executor id ledger (no driver pod here): its own ConfigMap, nothing else's.
            assert record.method in ("POST", "PATCH"), record
        elif record.method == "POST":  # a create: the pod it made is one of ours
            assert record.path.endswith("/pods"), record
        else:  # delete or patch of one pod: one of ours
            assert name not in BYSTANDERS, record
            assert name.startswith(f"{APP_ID}-exec-"), record
