"""One scripted stream, shared by the blocking and asyncio client tests: full, delta, removals."""

from __future__ import annotations

from execpods.client import ExecutorState, StreamUpdate
from execpods.v1 import allocator_pb2 as pb

S = pb.ObservedPod
E = pb.ExecutorState

SCRIPT = [
    pb.StreamSnapshotsResponse(
        snapshots=[
            pb.ExecutorPodsSnapshot(
                executor_pods={1: S(state=E.STATE_PENDING), 2: S(state=E.STATE_PENDING)},
                full_snapshot_ts_ms=1000,
                full=True,
            )
        ]
    ),
    pb.StreamSnapshotsResponse(
        snapshots=[
            pb.ExecutorPodsSnapshot(executor_pods={1: S(state=E.STATE_RUNNING)}, full=False),
            pb.ExecutorPodsSnapshot(
                executor_pods={2: S(state=E.STATE_FAILED, exit_code=1)}, full=False
            ),
        ],
        removed_executors=[pb.ExecutorRemoved(executor_id=2, exit_code=1, exit_caused_by_app=True)],
    ),
    pb.StreamSnapshotsResponse(removed_executors=[pb.ExecutorRemoved(executor_id=9)]),
]


def check_script_updates(updates: list[StreamUpdate]) -> None:
    """The updates the client must make of `SCRIPT`."""
    assert len(updates) == 3
    rebuilt = [
        {i: v.state for i, v in snapshot.executors.items()}
        for update in updates
        for snapshot in update.snapshots
    ]
    assert rebuilt == [
        {1: ExecutorState.PENDING, 2: ExecutorState.PENDING},
        {1: ExecutorState.RUNNING, 2: ExecutorState.PENDING},
        {1: ExecutorState.RUNNING, 2: ExecutorState.FAILED},
    ]
    last = updates[1].snapshots[-1]
    assert last.executors[2].exit_code == 1
    assert last.full_snapshot_ts_ms == 0
    assert [r.executor_id for r in updates[1].removed] == [2]
    assert updates[2].snapshots == ()
    assert [r.executor_id for r in updates[2].removed] == [9]
