"""Conversions between the wire messages (`execpods.v1`) and the client's dataclasses.

Kept apart from the transport so that the rebuilder and both clients agree on one mapping, and so
that it can be tested without a channel. Only what a client does is here (requests out, responses
and stream messages in); the inverse, which only tests need, is in tests/client/encoding.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from execpods.client.model import (
    AllocatorNotice,
    ExecutorProfile,
    ExecutorRemoval,
    ExecutorState,
    ExecutorView,
    RequestTotalResult,
)
from execpods.v1 import allocator_pb2 as pb

_TO_WIRE: Mapping[ExecutorState, pb.ExecutorState.ValueType] = {
    ExecutorState.PENDING: pb.ExecutorState.STATE_PENDING,
    ExecutorState.RUNNING: pb.ExecutorState.STATE_RUNNING,
    ExecutorState.TERMINATING: pb.ExecutorState.STATE_TERMINATING,
    ExecutorState.SUCCEEDED: pb.ExecutorState.STATE_SUCCEEDED,
    ExecutorState.FAILED: pb.ExecutorState.STATE_FAILED,
    ExecutorState.DELETED: pb.ExecutorState.STATE_DELETED,
    ExecutorState.UNKNOWN: pb.ExecutorState.STATE_UNKNOWN,
}
_FROM_WIRE: Mapping[int, ExecutorState] = {wire: state for state, wire in _TO_WIRE.items()}


def state_from_proto(state: int) -> ExecutorState:
    """The state for a wire value; unspecified or unrecognised values are `UNKNOWN`."""
    return _FROM_WIRE.get(state, ExecutorState.UNKNOWN)


def executor_from_proto(message: pb.ObservedPod) -> ExecutorView:
    return ExecutorView(
        state=state_from_proto(message.state),
        pod_name=message.pod_name,
        phase=message.phase,
        # Field presence, not the default 0: exit code 0 (success) differs from "not exited yet".
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        reason=message.reason,
        message=message.message,
        node_name=message.node_name,
        pod_ip=message.pod_ip,
        container_reason=message.container_reason,
        pending_reason=_pending_reason(message.pending_reason),
        pending_message=message.pending_message,
    )


def _pending_reason(value: int) -> str:
    """The reason's name without its prefix, lower-case; "" when unspecified or unknown to this
    client (a newer server's reason still shows in `pending_message`)."""
    try:
        name = pb.PendingReason.Name(value)  # type: ignore[arg-type]
    except ValueError:
        return ""
    return "" if value == 0 else name.removeprefix("PENDING_REASON_").lower()


def removal_from_proto(message: pb.ExecutorRemoved) -> ExecutorRemoval:
    return ExecutorRemoval(
        executor_id=message.executor_id,
        exit_code=message.exit_code,
        exit_caused_by_app=message.exit_caused_by_app,
        message=message.message,
        killed_by_driver=message.killed_by_driver,
    )


def request_total_result(message: pb.RequestTotalResponse) -> RequestTotalResult:
    return RequestTotalResult(
        total=message.total,
        running=message.running,
        pending=message.pending,
        profile_totals=MappingProxyType(dict(message.profile_totals)),
    )


def request_total_request(
    total: int,
    profile_totals: Mapping[int, int] | None = None,
    profiles: Iterable[ExecutorProfile] = (),
) -> pb.RequestTotalRequest:
    """The contract's RequestTotal; the sidecar judges every field (the client does not)."""
    return pb.RequestTotalRequest(
        total=total,
        profile_totals=dict(profile_totals or {}),
        profiles=[
            pb.ResourceProfile(
                id=p.id,
                cores=p.cores,
                memory_mib=p.memory_mib,
                memory_overhead_mib=p.memory_overhead_mib,
                extra_resources=dict(p.extra_resources),
                pod_template=p.pod_template,
            )
            for p in profiles
        ],
    )


def notice_from_proto(message: pb.AllocatorNotice) -> AllocatorNotice:
    name = pb.AllocatorNotice.Kind.Name(message.kind)
    return AllocatorNotice(
        kind=name.removeprefix("KIND_").lower(),
        message=message.message,
        resource_profile_id=message.resource_profile_id,
        count=message.count,
        retry_in_ms=message.retry_in_ms,
        reason=message.reason,
    )


def kill_request(executor_ids: Iterable[int | str]) -> pb.KillExecutorsRequest:
    """Ints become decimal strings; strings go as given, so the server judges their spelling.

    The client does not validate: the contract makes the sidecar the one judge of an id (a bad one
    fails the whole call with INVALID_ARGUMENT), and a second opinion here could only disagree.
    """
    if isinstance(executor_ids, str | bytes):
        # A lone "7" would otherwise be iterated character by character.
        raise TypeError("executor_ids must be an iterable of ids, not a single string")
    return pb.KillExecutorsRequest(executor_ids=[_id_text(i) for i in executor_ids])


def update_request(
    registered: Iterable[int],
    released: Iterable[int],
    *,
    explicit: bool,
    registered_at_ms: Mapping[int, int] | None = None,
    registration_timeout_ms: int | None = None,
) -> pb.UpdateDriverExecutorsRequest:
    request = pb.UpdateDriverExecutorsRequest(
        registered=list(registered),
        released=list(released),
        explicit=explicit,
        registered_at_ms=dict(registered_at_ms or {}),
    )
    if registration_timeout_ms is not None:
        request.registration_timeout_ms = registration_timeout_ms
    return request


def _id_text(executor_id: int | str) -> str:
    if isinstance(executor_id, bool):
        # bool is an int; True would silently become "True", which is surely a mistake.
        raise TypeError(f"executor id must be an int or a str, not {executor_id!r}")
    return executor_id if isinstance(executor_id, str) else str(executor_id)
