from __future__ import annotations

from typing import Any

import pytest
from execpods.client import (
    ExecutorRemoval,
    ExecutorState,
    ExecutorView,
    RequestTotalResult,
    Snapshot,
)
from execpods.client.convert import (
    executor_from_proto,
    kill_request,
    removal_from_proto,
    request_total_result,
    state_from_proto,
)
from execpods.v1 import allocator_pb2 as pb

from tests.client.encoding import executor_to_proto

S = pb.ObservedPod
E = pb.ExecutorState


@pytest.mark.parametrize(
    ("wire", "state"),
    [
        (E.STATE_PENDING, ExecutorState.PENDING),
        (E.STATE_RUNNING, ExecutorState.RUNNING),
        (E.STATE_TERMINATING, ExecutorState.TERMINATING),
        (E.STATE_SUCCEEDED, ExecutorState.SUCCEEDED),
        (E.STATE_FAILED, ExecutorState.FAILED),
        (E.STATE_DELETED, ExecutorState.DELETED),
        (E.STATE_UNKNOWN, ExecutorState.UNKNOWN),
        (E.STATE_UNSPECIFIED, ExecutorState.UNKNOWN),
        (99, ExecutorState.UNKNOWN),  # a value from a newer contract
    ],
)
def test_states(wire: int, state: ExecutorState) -> None:
    assert state_from_proto(wire) is state


def test_final_states() -> None:
    assert {s for s in ExecutorState if s.is_final} == {
        ExecutorState.SUCCEEDED,
        ExecutorState.FAILED,
        ExecutorState.DELETED,
    }


def test_every_field_of_an_executor_is_read() -> None:
    fields: dict[str, Any] = {
        "pod_name": "app-exec-3",
        "phase": "Failed",
        "exit_code": 137,
        "reason": "Evicted",
        "message": "low on memory",
        "node_name": "node-1",
        "pod_ip": "10.0.0.3",
        "container_reason": "OOMKilled",
        "pending_message": "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.",
    }
    # Every field of the wire message has a value here, so none can be dropped unnoticed.
    assert set(fields) | {"state", "pending_reason"} == set(S.DESCRIPTOR.fields_by_name)
    message = S(
        state=E.STATE_FAILED,
        pending_reason=pb.PendingReason.PENDING_REASON_UNSCHEDULABLE,
        **fields,
    )
    assert executor_from_proto(message) == ExecutorView(
        state=ExecutorState.FAILED, pending_reason="unschedulable", **fields
    )


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (0, ""),
        (1, "unschedulable"),
        (2, "scheduling_gated"),
        (3, "image_pull"),
        (4, "container_config"),
        (5, "crash_loop"),
        (6, "failed_mount"),
        (99, ""),  # a newer server's reason: its words still come in pending_message
    ],
)
def test_pending_reasons(wire: int, reason: str) -> None:
    assert executor_from_proto(S(state=E.STATE_PENDING, pending_reason=wire)).pending_reason == (  # type: ignore[arg-type]
        reason
    )


def test_exit_code_zero_is_not_the_same_as_no_exit_code() -> None:
    assert executor_from_proto(S(state=E.STATE_SUCCEEDED, exit_code=0)).exit_code == 0
    assert executor_from_proto(S(state=E.STATE_RUNNING)).exit_code is None
    assert not executor_to_proto(ExecutorView(state=ExecutorState.RUNNING)).HasField("exit_code")
    assert executor_to_proto(ExecutorView(state=ExecutorState.FAILED, exit_code=0)).HasField(
        "exit_code"
    )


def test_an_executor_survives_the_round_trip() -> None:
    view = ExecutorView(state=ExecutorState.DELETED, pod_name="p", exit_code=-1, pod_ip="10.1.1.1")
    assert executor_from_proto(executor_to_proto(view)) == view


def test_removal_and_request_total_answers() -> None:
    removed = pb.ExecutorRemoved(
        executor_id=7, exit_code=-1, exit_caused_by_app=False, message="gone"
    )
    assert removal_from_proto(removed) == ExecutorRemoval(
        executor_id=7, exit_code=-1, exit_caused_by_app=False, message="gone"
    )
    answer = pb.RequestTotalResponse(total=5, running=2, pending=3)
    assert request_total_result(answer) == RequestTotalResult(total=5, running=2, pending=3)


def test_kill_request_sends_ints_as_decimals_and_strings_untouched() -> None:
    assert list(kill_request([7, "8", " 9"]).executor_ids) == ["7", "8", " 9"]


@pytest.mark.parametrize("ids", ["7", b"7", [True]])
def test_kill_request_refuses_what_is_surely_a_mistake(ids: object) -> None:
    with pytest.raises(TypeError):
        kill_request(ids)  # type: ignore[arg-type]


def test_snapshot_helpers_and_immutability() -> None:
    source = {
        1: ExecutorView(state=ExecutorState.RUNNING),
        2: ExecutorView(state=ExecutorState.PENDING),
        3: ExecutorView(state=ExecutorState.RUNNING),
    }
    snapshot = Snapshot(executors=source)
    source[4] = ExecutorView(state=ExecutorState.RUNNING)
    assert snapshot.count(ExecutorState.RUNNING) == 2
    assert snapshot.ids_in(ExecutorState.RUNNING) == frozenset({1, 3})
    assert snapshot.ids_in(ExecutorState.FAILED) == frozenset()
    with pytest.raises(TypeError):
        snapshot.executors[5] = ExecutorView(state=ExecutorState.FAILED)  # type: ignore[index]
