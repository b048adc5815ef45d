from __future__ import annotations

import pytest
from execpods.client import (
    ExecutorRemoval,
    ExecutorState,
    ExecutorView,
    Snapshot,
    SnapshotRebuilder,
    StreamProtocolError,
)
from execpods.v1 import allocator_pb2 as pb
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.client.encoding import encode, removal_to_proto

RUNNING = pb.ExecutorState.STATE_RUNNING
PENDING = pb.ExecutorState.STATE_PENDING
FAILED = pb.ExecutorState.STATE_FAILED


def wire(
    states: dict[int, pb.ExecutorState.ValueType], *, full: bool, ts: int = 0
) -> pb.ExecutorPodsSnapshot:
    return pb.ExecutorPodsSnapshot(
        executor_pods={i: pb.ObservedPod(state=s, pod_name=f"exec-{i}") for i, s in states.items()},
        full_snapshot_ts_ms=ts,
        full=full,
    )


def states_of(snapshot: Snapshot) -> dict[int, ExecutorState]:
    return {i: view.state for i, view in snapshot.executors.items()}


def test_a_delta_overlays_the_changed_executors_on_the_previous_snapshot() -> None:
    rebuilder = SnapshotRebuilder()
    first = rebuilder.apply_snapshot(wire({1: PENDING, 2: PENDING}, full=True, ts=100))
    second = rebuilder.apply_snapshot(wire({2: RUNNING}, full=False, ts=100))
    assert states_of(first) == {1: ExecutorState.PENDING, 2: ExecutorState.PENDING}
    assert states_of(second) == {1: ExecutorState.PENDING, 2: ExecutorState.RUNNING}
    assert (first.was_full, second.was_full) == (True, False)
    assert second.executors[1] is first.executors[1]
    assert rebuilder.current is second


def test_a_full_snapshot_replaces_and_so_can_drop_executors() -> None:
    rebuilder = SnapshotRebuilder()
    rebuilder.apply_snapshot(wire({1: RUNNING, 2: RUNNING}, full=True, ts=100))
    replaced = rebuilder.apply_snapshot(wire({2: FAILED}, full=True, ts=200))
    assert states_of(replaced) == {2: ExecutorState.FAILED}
    assert replaced.full_snapshot_ts_ms == 200


def test_each_snapshot_keeps_its_own_timestamp() -> None:
    rebuilder = SnapshotRebuilder()
    rebuilder.apply_snapshot(wire({1: RUNNING}, full=True, ts=100))
    assert rebuilder.apply_snapshot(wire({}, full=False, ts=0)).full_snapshot_ts_ms == 0


def test_a_delta_before_any_full_snapshot_breaks_the_contract() -> None:
    with pytest.raises(StreamProtocolError, match="before any full"):
        SnapshotRebuilder().apply_snapshot(wire({1: RUNNING}, full=False))


def test_a_message_is_decoded_in_order_with_its_removals() -> None:
    rebuilder = SnapshotRebuilder()
    removal = ExecutorRemoval(executor_id=1, exit_code=137, exit_caused_by_app=True, message="oom")
    update = rebuilder.apply(
        pb.StreamSnapshotsResponse(
            snapshots=[wire({1: RUNNING}, full=True), wire({1: FAILED}, full=False)],
            removed_executors=[removal_to_proto(removal)],
        )
    )
    assert [states_of(s) for s in update.snapshots] == [
        {1: ExecutorState.RUNNING},
        {1: ExecutorState.FAILED},
    ]
    assert update.removed == (removal,)
    assert update.latest is update.snapshots[-1]


def test_a_message_with_only_removals_has_no_snapshots_and_keeps_the_current_one() -> None:
    rebuilder = SnapshotRebuilder()
    first = rebuilder.apply_snapshot(wire({1: RUNNING}, full=True))
    update = rebuilder.apply(
        pb.StreamSnapshotsResponse(removed_executors=[pb.ExecutorRemoved(executor_id=1)])
    )
    assert update.snapshots == ()
    assert update.latest is None
    assert [r.executor_id for r in update.removed] == [1]
    assert rebuilder.current is first


# --- the property: whatever a server sends, within the contract, decodes to what it meant ---

_text = st.text(alphabet="abcXYZ-0 ", max_size=6)
_views = st.builds(
    ExecutorView,
    state=st.sampled_from(ExecutorState),
    pod_name=_text,
    phase=st.sampled_from(["", "Pending", "Running", "Failed"]),
    exit_code=st.none() | st.integers(-(2**31), 2**31 - 1),
    reason=_text,
    message=_text,
    node_name=_text,
    pod_ip=_text,
    container_reason=_text,
)
_snapshots = st.builds(
    Snapshot,
    executors=st.dictionaries(st.integers(0, 12) | st.integers(0, 2**63 - 1), _views, max_size=8),
    full_snapshot_ts_ms=st.integers(0, 2**63 - 1),
)


@settings(max_examples=200, deadline=None)
@given(
    snapshots=st.lists(_snapshots, min_size=1, max_size=12),
    force_full=st.lists(st.booleans(), max_size=12),
    cuts=st.lists(st.integers(1, 12), max_size=12),
)
def test_any_sequence_of_snapshots_survives_full_and_delta_encoding(
    snapshots: list[Snapshot], force_full: list[bool], cuts: list[int]
) -> None:
    wire_snapshots, fulls = encode(snapshots, force_full=force_full)
    # Group the wire snapshots into stream messages at arbitrary points, as batching would.
    messages: list[pb.StreamSnapshotsResponse] = []
    start = 0
    for size in [*cuts, len(wire_snapshots)]:
        if start >= len(wire_snapshots):
            break
        messages.append(pb.StreamSnapshotsResponse(snapshots=wire_snapshots[start : start + size]))
        start += size

    rebuilder = SnapshotRebuilder()
    decoded = [s for m in messages for s in rebuilder.apply(m).snapshots]

    assert [(s.executors, s.full_snapshot_ts_ms) for s in decoded] == [
        (s.executors, s.full_snapshot_ts_ms) for s in snapshots
    ]
    assert [s.was_full for s in decoded] == fulls
    assert rebuilder.current == decoded[-1]
