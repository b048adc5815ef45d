"""The delta encoding, as a property over chains of core snapshots.

A chain is what the store publishes: full lists (`from_pods`) and watch updates (`with_update`),
some of which change nothing the contract shows (a label, the resource version). Whatever the
chain, the stream's messages decode, with the client's `SnapshotRebuilder`, to exactly the chain;
and no non-full snapshot carries an executor whose state the client already had.
"""

from __future__ import annotations

from dataclasses import replace

from execpods.client import SnapshotRebuilder
from execpods.client.convert import executor_from_proto
from execpods.core import (
    ContainerStatus,
    ContainerTerminated,
    ExecutorPod,
    ExecutorPodsSnapshot,
    ObservedPod,
)
from execpods.core import ExecutorState as CoreExecutorState
from execpods.core.testing import executor_pod
from execpods.sidecar.stream.encoding import EncodingCache, SnapshotEncoder, encode_state
from execpods.v1 import allocator_pb2 as pb
from hypothesis import given, settings
from hypothesis import strategies as st

_IDS = st.integers(1, 6)


def _pod(executor_id: int, variant: int) -> ExecutorPod:
    """Pods of one executor; variants 1/2 and 4/5 differ only in what the stream does not show."""
    base = executor_pod(executor_id)
    if variant == 0:
        return replace(base, phase="Pending")
    if variant in (1, 2):  # scheduled; a condition or label change moves only the version
        return replace(base, phase="Pending", node_name="node-1", resource_version=str(variant))
    if variant == 3:
        return replace(base, phase="Running", node_name="node-1", pod_ip="10.0.0.1")
    if variant in (4, 5):
        labels = {**base.labels, "extra": str(variant)}
        return replace(base, phase="Running", node_name="node-1", pod_ip="10.0.0.1", labels=labels)
    terminated = ContainerTerminated(exit_code=variant, reason="Error", message="boom")
    return replace(
        base,
        phase="Failed",
        reason="Error",
        message="the executor failed",
        container_statuses=(ContainerStatus(name="c", image="i", state=terminated),),
    )


_VARIANTS = st.integers(0, 7)
_STEP = st.one_of(
    st.tuples(st.just("update"), _IDS, _VARIANTS),
    st.tuples(st.just("list"), st.dictionaries(_IDS, _VARIANTS, max_size=6)),
)


def _chain(steps: list[tuple[object, ...]]) -> list[ExecutorPodsSnapshot]:
    snapshots = [ExecutorPodsSnapshot.from_pods([], full_snapshot_ts=1.0)]
    for number, step in enumerate(steps, start=2):
        current = snapshots[-1]
        if step[0] == "update":
            _, executor_id, variant = step
            assert isinstance(executor_id, int)
            assert isinstance(variant, int)
            snapshots.append(current.with_update(_pod(executor_id, variant)))
        else:
            listed = step[1]
            assert isinstance(listed, dict)
            pods = [_pod(i, v) for i, v in listed.items()]
            snapshots.append(ExecutorPodsSnapshot.from_pods(pods, full_snapshot_ts=float(number)))
    return snapshots


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(_STEP, max_size=25), start=st.integers(0, 5))
def test_streams_rebuild_the_chain_and_deltas_carry_only_changes(
    steps: list[tuple[object, ...]], start: int
) -> None:
    chain = _chain(steps)
    cache = EncodingCache()
    # Two streams on one cache: one from the start, one subscribing later (its first is full).
    for subscribed in (chain, chain[min(start, len(chain) - 1) :]):
        encoder = SnapshotEncoder(cache)
        rebuilder = SnapshotRebuilder()
        for index, snapshot in enumerate(subscribed):
            before = rebuilder.current
            wire = encoder.encode(snapshot).decode()
            rebuilt = rebuilder.apply_snapshot(wire)
            expected = {i: executor_from_proto(encode_state(s)) for i, s in snapshot.items()}
            assert rebuilt.executors == expected
            assert rebuilt.full_snapshot_ts_ms == round(snapshot.full_snapshot_ts * 1000)
            assert wire.full == (index == 0 or (snapshot.parent_serial is None))
            if not wire.full:
                assert before is not None
                for executor_id in wire.executor_pods:
                    assert before.executors.get(executor_id) != expected[executor_id], (
                        f"executor {executor_id} is unchanged but was sent in a delta"
                    )


def test_every_executor_state_has_one_name_in_core_contract_and_client() -> None:
    # Issue 8 §5: the state is ExecutorState everywhere, TERMINATING included (SPARK-31125).
    for state in CoreExecutorState:
        message = encode_state(ObservedPod(state, executor_pod(1)))
        assert pb.ExecutorState.Name(message.state) == f"STATE_{state.name}"
        assert executor_from_proto(message).state.name == state.name
