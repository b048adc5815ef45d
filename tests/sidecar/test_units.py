"""The stream encoder and the driver view, on core snapshots (no server)."""

from __future__ import annotations

import asyncio
import typing

import grpc.aio
from execpods.core import (
    AllocatorNotice,
    ExecutorExited,
    ExecutorPodsSnapshot,
    ExecutorRemoval,
    NoticeKind,
    NumberedRemoval,
    Position,
)
from execpods.core.testing import failed_executor, pending_executor, running_executor
from execpods.sidecar.driver_view import InferredDriverView
from execpods.sidecar.rpc.service import AllocatorService
from execpods.sidecar.stream.encoding import (
    EncodingCache,
    SnapshotEncoder,
    encode_notice,
    encode_state,
)
from execpods.sidecar.stream.feed import Pending, StreamFeed
from execpods.sidecar.stream.messages import StreamCursor, build_response
from execpods.v1 import allocator_pb2 as pb

GONE = ExecutorExited(exit_code=-1, exit_caused_by_app=False, message="gone")


def _numbered(sequence: int, executor_id: int, snapshot_serial: int = 0) -> NumberedRemoval:
    removal = ExecutorRemoval(executor_id=executor_id, reason=GONE, snapshot_serial=snapshot_serial)
    return NumberedRemoval(sequence=sequence, removal=removal)


def _chain() -> list[ExecutorPodsSnapshot]:
    first = ExecutorPodsSnapshot.from_pods([pending_executor(1), pending_executor(2)])
    second = first.with_update(running_executor(1))
    third = second.with_update(failed_executor(2, exit_code=7))
    return [first, second, third]


def test_first_and_listed_snapshots_are_full_others_carry_only_changes() -> None:
    first, second, third = _chain()
    relisted = ExecutorPodsSnapshot.from_pods([running_executor(1), running_executor(2)])
    encoder = SnapshotEncoder(EncodingCache())
    messages = [encoder.encode(s).decode() for s in (first, second, third, relisted)]
    assert [m.full for m in messages] == [True, False, False, True]
    assert sorted(messages[0].executor_pods) == [1, 2]
    assert list(messages[1].executor_pods) == [1]
    assert messages[1].executor_pods[1].state == pb.ExecutorState.STATE_RUNNING
    failed = messages[2].executor_pods[2]
    assert (failed.state, failed.exit_code, failed.message) == (
        pb.ExecutorState.STATE_FAILED,
        7,
        "Executor failed.",
    )
    assert sorted(messages[3].executor_pods) == [1, 2]


def test_a_snapshot_not_derived_from_the_previous_one_goes_full() -> None:
    first, _, third = _chain()
    encoder = SnapshotEncoder(EncodingCache())
    encoder.encode(first)
    assert encoder.encode(third).full  # its parent (second) was never sent on this stream


def test_streams_on_the_same_chain_share_encodings() -> None:
    cache = EncodingCache()
    chain = _chain()
    for _ in range(3):
        encoder = SnapshotEncoder(cache)
        for snapshot in chain:
            encoder.encode(snapshot)
    assert (cache.misses, cache.hits) == (3, 6)


def test_the_first_message_holds_exactly_the_current_snapshot() -> None:
    first, second, _ = _chain()
    encoder = SnapshotEncoder(EncodingCache())
    pending = Pending(snapshots=[first, second], removals=[_numbered(4, 9)])
    cursor = StreamCursor(Position(incarnation="i", sequence=3))
    head, rest = (
        pb.StreamSnapshotsResponse.FromString(message.join())
        for message in build_response(encoder, pending, first=True, cursor=cursor)
    )
    assert (head.position.incarnation, head.position.sequence) == ("i", 3)
    assert (rest.position.incarnation, rest.position.sequence) == ("i", 4)
    assert len(head.snapshots) == 1
    assert head.snapshots[0].full
    assert not head.removed_executors
    assert [s.full for s in rest.snapshots] == [False]
    assert [r.executor_id for r in rest.removed_executors] == [9]


def test_streams_send_one_shared_encoding_as_protobuf_would_serialize_it() -> None:
    """Issue 12 (load): a snapshot is serialized once for all streams, the first message's full
    snapshot included, and each stream's message is those very bytes plus its own fields."""
    first, second, third = _chain()
    cache = EncodingCache()
    streams = [
        (SnapshotEncoder(cache), StreamCursor(Position(incarnation="i", sequence=n)))
        for n in range(5)
    ]
    sent: list[list[bytes]] = []
    parts: list[list[tuple[bytes, ...]]] = []
    for encoder, cursor in streams:
        pending = Pending(snapshots=[first, second], removals=[_numbered(7, 9, first.serial)])
        outgoing = build_response(encoder, pending, first=True, cursor=cursor)
        outgoing += build_response(encoder, Pending(snapshots=[third]), first=False, cursor=cursor)
        assert [m.size for m in outgoing] == [len(m.join()) for m in outgoing]
        sent.append([m.join() for m in outgoing])
        parts.append([m.parts for m in outgoing])
    assert (cache.misses, cache.hits) == (3, 12)  # full first, two deltas: once each
    frames = [s.frame for s in (cache.get(first, None), cache.get(second, first))]
    frames.append(cache.get(third, second).frame)
    for stream_parts in parts:  # until sent, a stream holds the shared frames themselves
        assert [p[0] for p in stream_parts] == frames
        assert all(p[0] is frame for p, frame in zip(stream_parts, frames, strict=True))
    for number, messages in enumerate(sent):
        decoded = [pb.StreamSnapshotsResponse.FromString(m) for m in messages]
        for message, wire in zip(decoded, messages, strict=True):
            # The contract's bytes as protobuf writes them, but for the order of map entries
            # (which protobuf leaves undefined): nothing repeated, nothing added.
            assert len(message.SerializeToString()) == len(wire)
        for message, wire, frame in zip(decoded, messages, frames, strict=True):
            assert len(message.snapshots) == 1
            assert wire.startswith(frame)
        assert [m.position.sequence for m in decoded] == [number, 7, 7]
        assert [r.executor_id for r in decoded[1].removed_executors] == [9]
        assert [m.snapshots[0].full for m in decoded] == [True, False, False]
        # The full snapshot holds every executor of `first`, each as protobuf encodes it alone.
        assert dict(decoded[0].snapshots[0].executor_pods) == {
            executor_id: encode_state(state) for executor_id, state in first.executor_pods.items()
        }


def test_a_full_encoding_serializes_only_the_executors_changed_since_the_last_full_one() -> None:
    """Issue 12 (load at 10,000 executors): streams opening in a burst each need a different
    snapshot in full; each full encoding reuses the entries of the executors that did not change,
    and still says exactly what the snapshot holds."""
    first, second, third = _chain()
    cache = EncodingCache()
    encoded = [cache.get(first, None)]
    assert cache.entry_misses == 2
    encoded.append(cache.get(second, None))
    assert cache.entry_misses == 3  # executor 1 started running; executor 2's entry is reused
    encoded.append(cache.get(third, None))
    assert cache.entry_misses == 4  # executor 2 failed; executor 1's entry is reused
    for snapshot, wire in zip((first, second, third), encoded, strict=True):
        expected = pb.ExecutorPodsSnapshot(
            executor_pods={i: encode_state(s) for i, s in snapshot.items()},
            full_snapshot_ts_ms=round(snapshot.full_snapshot_ts * 1000),
            full=True,
        )
        assert wire.full
        assert wire.decode() == expected
    relisted = ExecutorPodsSnapshot.from_pods([running_executor(1)], full_snapshot_ts=5.0)
    assert dict(cache.get(relisted, third).decode().executor_pods) == {
        1: encode_state(relisted.executor_pods[1])
    }
    assert cache.entries == 1  # executor 2, gone from the list, is forgotten
    assert cache.entry_misses == 5  # a list makes new states: serialized afresh


def test_the_encoding_cache_keeps_at_most_its_byte_budget() -> None:
    cache = EncodingCache(max_bytes=1000)
    pods = [running_executor(i) for i in range(1, 11)]
    one = len(cache.get(ExecutorPodsSnapshot.from_pods(pods), None).frame)
    assert 100 < one < 1000
    for _ in range(20):
        cache.get(ExecutorPodsSnapshot.from_pods(pods), None)
        assert cache.bytes_held <= 1000
    assert cache.bytes_held > 1000 - one  # it keeps what fits, not nothing
    huge = EncodingCache(max_bytes=10)
    encoded = huge.get(ExecutorPodsSnapshot.from_pods(pods), None)
    assert huge.bytes_held == len(encoded.frame)  # the newest entry stays, for the next stream


def test_a_feed_that_falls_behind_keeps_the_latest_snapshots() -> None:
    chain = _chain()

    async def scenario() -> Pending:
        feed = StreamFeed(asyncio.get_running_loop(), max_pending=2)
        feed.on_snapshots(chain)
        await feed.wait()
        return feed.take()

    pending = asyncio.run(scenario())
    assert pending.dropped == 1
    assert [s.serial for s in pending.snapshots] == [s.serial for s in chain[1:]]


def test_the_view_infers_known_executors_from_running_ones() -> None:
    view = InferredDriverView()
    first, second, third = _chain()
    view.round_started([first])
    assert set(view.executor_ids()) == set()
    view.round_started([second, third])
    assert set(view.executor_ids()) == {1}
    assert view.is_executor_active(1)
    view.update(registered=(), released=[1], explicit=False)
    assert not view.is_executor_active(1)
    view.remove_executor(1, GONE)
    assert set(view.executor_ids()) == set()
    assert not view.is_executor_active(1)
    view.round_started([ExecutorPodsSnapshot.from_pods([running_executor(1)])])
    assert set(view.executor_ids()) == set()  # a removed executor never comes back


def test_explicit_mode_knows_only_what_the_driver_registered() -> None:
    view = InferredDriverView()
    view.round_started([ExecutorPodsSnapshot.from_pods([running_executor(1), running_executor(2)])])
    assert view.update(registered=[3], released=(), explicit=False) == [1, 2, 3]
    assert view.update(registered=[2], released=(), explicit=True) == [2, 3]
    assert view.update(registered=(), released=(), explicit=False) == [2, 3]  # sticky


def test_a_removal_waits_for_the_snapshot_it_was_decided_on() -> None:
    first, second, _ = _chain()

    async def scenario() -> list[Pending]:
        feed = StreamFeed(asyncio.get_running_loop(), max_pending=10)
        feed.on_snapshots([first])
        await feed.wait()
        taken = [feed.take()]
        feed.on_removal(_numbered(1, 1, second.serial))
        taken.append(feed.take())  # held: the stream has not got `second` yet
        feed.on_snapshots([second])
        await feed.wait()
        taken.append(feed.take())
        return taken

    before, held, after = asyncio.run(scenario())
    assert before.snapshots == [first]
    assert held.removals == []
    assert [r.removal.executor_id for r in after.removals] == [1]
    assert after.snapshots == [second]


def test_a_removal_before_the_first_snapshot_waits_for_it() -> None:
    """Even one decided on no snapshot at all: the stream must open with its current snapshot."""
    first, _, _ = _chain()

    async def scenario() -> tuple[Pending, Pending]:
        feed = StreamFeed(asyncio.get_running_loop(), max_pending=10)
        feed.on_removal(_numbered(1, 1))
        held = feed.take()
        feed.on_snapshots([first])
        await feed.wait()
        return held, feed.take()

    held, opened = asyncio.run(scenario())
    assert (held.snapshots, held.removals) == ([], [])
    assert opened.snapshots == [first]
    assert [r.removal.executor_id for r in opened.removals] == [1]


def test_every_handler_is_typed_with_its_messages_and_an_aio_context() -> None:
    """The servicer's edges are typed (issue 8): each handler takes its request message and a
    grpc.aio.ServicerContext over that request and its response, so mypy checks what it does."""
    service = pb.DESCRIPTOR.services_by_name["ExecutorAllocator"]
    assert service.methods, "the contract has methods"
    for method in service.methods:
        hints = typing.get_type_hints(getattr(AllocatorService, method.name))
        request = getattr(pb, method.input_type.name)
        response = getattr(pb, method.output_type.name)
        assert hints["request"] is request, method.name
        assert typing.get_origin(hints["context"]) is grpc.aio.ServicerContext, method.name
        assert typing.get_args(hints["context"]) == (request, response), method.name


def test_every_allocator_notice_kind_has_its_own_contract_kind() -> None:
    """A notice kind the contract cannot say would end the stream (issue 20 added the id
    ledger's KIND_ID_RESERVATION_FAILED)."""
    kinds = {
        encode_notice(AllocatorNotice(kind=kind, message="m", resource_profile_id=0)).kind
        for kind in NoticeKind
    }
    assert len(kinds) == len(NoticeKind)
    assert pb.AllocatorNotice.KIND_UNSPECIFIED not in kinds
    assert pb.AllocatorNotice.KIND_ID_RESERVATION_FAILED in kinds
