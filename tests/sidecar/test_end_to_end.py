"""End to end: real gRPC channels to an in-process sidecar, the simulator behind it over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grpc
import pytest
from execpods.client import AllocatorClient, ExecutorRemoval, ExecutorState, StreamUpdate
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import SidecarFactory, app_pods, creates, running_ids, wait_for


def _follow(
    stream: Iterable[StreamUpdate], until: Callable[[list[StreamUpdate]], bool]
) -> list[StreamUpdate]:
    """The stream's updates up to the first after which `until` holds."""
    updates: list[StreamUpdate] = []
    for update in stream:
        updates.append(update)
        if until(updates):
            break
    return updates


def _running_at(count: int) -> Callable[[list[StreamUpdate]], bool]:
    """For `_follow`: the newest update's latest snapshot has `count` executors running."""

    def reached(updates: list[StreamUpdate]) -> bool:
        latest = updates[-1].latest
        return latest is not None and latest.count(ExecutorState.RUNNING) == count

    return reached


def _scale_to(client: AllocatorClient, sim: KubeSim, app_id: str, count: int) -> None:
    """Ask for `count` executors and wait until the simulator runs that many."""
    client.request_total(count)
    wait_for(lambda: len(running_ids(sim, app_id)) == count, what=f"{count} running")


def test_scales_to_n_and_reaches_n_running(sim: KubeSim, make_sidecar: SidecarFactory) -> None:
    sidecar = make_sidecar("scale")
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        result = client.request_total(12)
        assert result.total == 12
        updates = _follow(stream, _running_at(12))
    assert updates[0].snapshots[0].was_full
    later = [s for u in updates[1:] for s in u.snapshots]
    assert any(not s.was_full for s in later)  # watch events travel as deltas
    assert len(running_ids(sim, "scale")) == 12
    assert creates(sim) == 12
    with AllocatorClient(sidecar.address) as client:
        again = client.request_total(12)
    assert (again.total, again.running, again.pending) == (12, 12, 0)


def test_the_2018_rule_no_second_batch_until_the_first_is_running(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    """The 2018 rule as an explicit policy (newest Spark and execpods' default do not stall)."""
    sidecar = make_sidecar(
        "batches",
        conf={
            "spark.kubernetes.allocation.batch.size": "3",
            "execpods.allocation.waitForPendingPods": "true",
            "execpods.allocation.adaptiveBatches": "false",
        },
    )
    rounds: list[int] = []
    sim.pause_kubelet()
    sidecar.runtime.backend.subscribe(0.1, lambda batch: rounds.append(len(batch)))
    with AllocatorClient(sidecar.address) as client:
        client.request_total(7)
        wait_for(lambda: len(app_pods(sim, "batches")) == 3, what="the first batch")
        # Let the allocator run many more rounds (it shares this subscriber's interval) while the
        # first batch is pending: it must not ask for more.
        seen = len(rounds)
        wait_for(lambda: len(rounds) >= seen + 8, what="eight more allocation rounds")
        assert creates(sim) == 3
        sim.resume_kubelet()
        wait_for(lambda: len(running_ids(sim, "batches")) == 7, what="seven running")
    assert creates(sim) == 7


def test_a_failed_pod_is_replaced_and_reported_once(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("fails")
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        _scale_to(client, sim, "fails", 3)
        sim.fail_pod("fails-exec-2", exit_code=3, reason="Error", message="disk full")
        removals: list[ExecutorRemoval] = []

        def replaced(updates: list[StreamUpdate]) -> bool:
            removals.extend(updates[-1].removed)
            latest = stream.current
            return (
                bool(removals)
                and latest is not None
                and latest.ids_in(ExecutorState.RUNNING) == {1, 3, 4}
            )

        _follow(stream, replaced)
        # More changes, and so more lifecycle rounds, must not report it again.
        client.request_total(4)
        more = _follow(stream, _running_at(4))
        removals.extend(r for u in more for r in u.removed)
    assert [r.executor_id for r in removals] == [2]
    (removal,) = removals
    assert removal.exit_code == 3
    assert removal.exit_caused_by_app
    assert "disk full" in removal.message
    assert "exit code 3" in removal.message
    assert "exitCode=3, reason=Error, message=disk full" in removal.message
    assert running_ids(sim, "fails") == {1, 3, 4, 5}


def test_an_evicted_pod_is_reported_with_the_apis_reason_and_message(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("evicted")
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        _scale_to(client, sim, "evicted", 2)
        sim.evict("evicted-exec-1", message="The node was low on resource: ephemeral-storage.")
        updates = _follow(stream, lambda ups: bool(ups[-1].removed))
    (removal,) = updates[-1].removed
    # A disruption (issue 20): reported with its cause, not caused by the application.
    assert (removal.executor_id, removal.exit_code, removal.exit_caused_by_app) == (1, 137, False)
    assert "disrupted by Kubernetes (TerminationByKubelet)" in removal.message
    assert "exit code 137" in removal.message
    assert "The API gave the following brief reason: Evicted" in removal.message
    assert "low on resource: ephemeral-storage" in removal.message
    # The stream showed why before the removal arrived: the failed state with the API's words.
    failed = next(
        s.executors[1]
        for u in updates
        for s in u.snapshots
        if s.executors.get(1) and s.executors[1].state is ExecutorState.FAILED
    )
    assert (failed.reason, failed.exit_code, failed.phase) == ("Evicted", 137, "Failed")
    assert "ephemeral-storage" in failed.message


def test_kill_executors_deletes_exactly_those_pods(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("kills")
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        _scale_to(client, sim, "kills", 5)
        client.request_total(
            3
        )  # Spark (SPARK-24248) does not replace killed executors below the target
        assert client.kill_executors(["1", "3"]) == 2
        updates = _follow(stream, lambda ups: sum(len(u.removed) for u in ups) >= 2)
        removals = [r for u in updates for r in u.removed]
        wait_for(lambda: {1, 3}.isdisjoint(_names(sim, "kills")), what="pods 1 and 3 gone")
    assert sorted(r.executor_id for r in removals) == [1, 3]
    assert not any(r.exit_caused_by_app for r in removals)
    assert running_ids(sim, "kills") == {2, 4, 5}


def _names(sim: KubeSim, app_id: str) -> set[int]:
    return {int(p["metadata"]["labels"]["spark-exec-id"]) for p in app_pods(sim, app_id)}


def test_kill_executors_touches_only_this_app(sim: KubeSim, make_sidecar: SidecarFactory) -> None:
    ours = make_sidecar("ours")
    theirs = make_sidecar("theirs")
    with AllocatorClient(ours.address) as a, AllocatorClient(theirs.address) as b:
        a.request_total(2)
        b.request_total(2)
        wait_for(lambda: len(running_ids(sim, "ours")) == 2, what="ours running")
        wait_for(lambda: len(running_ids(sim, "theirs")) == 2, what="theirs running")
        b.request_total(0)
        assert b.kill_executors([1, 2]) == 2
        wait_for(lambda: not app_pods(sim, "theirs"), what="theirs gone")
    assert running_ids(sim, "ours") == {1, 2}


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.request_total(-1), "total=-1"),
        (lambda c: c.kill_executors(["1", "x"]), "executor_ids[1]='x'"),
        (lambda c: c.kill_executors(["-2"]), "executor_ids[0]='-2'"),
        (lambda c: c.kill_executors([" 1"]), "executor_ids[0]=' 1'"),
        (lambda c: c.kill_executors(["1.0"]), "executor_ids[0]='1.0'"),
        (lambda c: c.update_driver_executors(registered=[1, 0]), "registered[1]=0"),
        (lambda c: c.update_driver_executors(released=[-4]), "released[0]=-4"),
        (lambda c: next(iter(c.stream_snapshots(batch_interval_ms=-5))), "batch_interval_ms=-5"),
    ],
)
def test_invalid_arguments_change_nothing(
    sim: KubeSim, make_sidecar: SidecarFactory, call: object, field: str
) -> None:
    sidecar = make_sidecar("invalid")
    with AllocatorClient(sidecar.address) as client:
        client.request_total(2)
        wait_for(lambda: client.update_driver_executors() == frozenset({1, 2}), what="two known")
        before = len(sim.requests())
        with pytest.raises(grpc.RpcError) as raised:
            call(client)  # type: ignore[operator]
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert field in (raised.value.details() or "")
        assert client.request_total(2).total == 2
        assert client.update_driver_executors() == frozenset({1, 2})
    writes = [r for r in sim.requests()[before:] if r.verb not in ("list", "watch", "get")]
    assert writes == []
    assert running_ids(sim, "invalid") == {1, 2}
