"""The inverse of the rebuilder, for tests: full snapshots in, the stream's wire messages out.

It encodes as the contract allows a server to: the first snapshot in full, later ones as deltas of
the executors that changed, and in full whenever asked to or when an executor disappeared (a delta
never removes executors).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from execpods.client import ExecutorRemoval, ExecutorState, ExecutorView, Snapshot
from execpods.v1 import allocator_pb2 as pb


def state_to_proto(state: ExecutorState) -> pb.ExecutorState.ValueType:
    return pb.ExecutorState.Value(f"STATE_{state.name}")


def executor_to_proto(view: ExecutorView) -> pb.ObservedPod:
    """The wire form of `view`, for servers and test servicers that speak the contract."""
    message = pb.ObservedPod(
        state=state_to_proto(view.state),
        pod_name=view.pod_name,
        phase=view.phase,
        reason=view.reason,
        message=view.message,
        node_name=view.node_name,
        pod_ip=view.pod_ip,
        container_reason=view.container_reason,
        pending_reason=pb.PendingReason.Value(f"PENDING_REASON_{view.pending_reason.upper()}")
        if view.pending_reason
        else pb.PendingReason.PENDING_REASON_UNSPECIFIED,
        pending_message=view.pending_message,
    )
    if view.exit_code is not None:
        message.exit_code = view.exit_code
    return message


def snapshot_to_proto(
    snapshot: Snapshot, *, full: bool, only: Iterable[int] | None = None
) -> pb.ExecutorPodsSnapshot:
    """The wire form of `snapshot`: every executor, or just the ids in `only` for a delta."""
    ids = snapshot.executors.keys() if only is None else only
    return pb.ExecutorPodsSnapshot(
        executor_pods={i: executor_to_proto(snapshot.executors[i]) for i in ids},
        full_snapshot_ts_ms=snapshot.full_snapshot_ts_ms,
        full=full,
    )


def removal_to_proto(removal: ExecutorRemoval) -> pb.ExecutorRemoved:
    return pb.ExecutorRemoved(
        executor_id=removal.executor_id,
        exit_code=removal.exit_code,
        exit_caused_by_app=removal.exit_caused_by_app,
        message=removal.message,
        killed_by_driver=removal.killed_by_driver,
    )


def encode(
    snapshots: Sequence[Snapshot], *, force_full: Sequence[bool] = ()
) -> tuple[list[pb.ExecutorPodsSnapshot], list[bool]]:
    """The wire snapshots, and which of them were sent full."""
    messages: list[pb.ExecutorPodsSnapshot] = []
    fulls: list[bool] = []
    previous: Snapshot | None = None
    for index, snapshot in enumerate(snapshots):
        forced = index < len(force_full) and force_full[index]
        if previous is None or forced or previous.executors.keys() - snapshot.executors.keys():
            messages.append(snapshot_to_proto(snapshot, full=True))
            fulls.append(True)
        else:
            before = previous.executors
            changed = [i for i, v in snapshot.executors.items() if before.get(i) != v]
            messages.append(snapshot_to_proto(snapshot, full=False, only=changed))
            fulls.append(False)
        previous = snapshot
    return messages, fulls
