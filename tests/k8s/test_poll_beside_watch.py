"""The poll beside the watch over HTTP: a list older than the watch's events loses none of them.

The poll's list reaches the store after the server read it; meanwhile the watch (its own thread)
applies the events of what changed since. The store below holds the poll's list back until the
watch has applied such events, the interleaving that over-allocated executors in
tests/sidecar/test_slow_stream.py, so it happens on every run instead of under load.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator

import pytest
from execpods.core import CoreSettings, ExecutorLabels, ExecutorPod, ExecutorState, PodClassifier
from execpods.core.ports import Clock, ListMark
from execpods.core.scheduling import DeterministicScheduler
from execpods.core.testing import composed_store
from execpods.k8s import KubernetesPodOperations, PollSource, WatchSource
from execpods.kubesim import KubeSim

from tests.k8s.conftest import APP_ID, FAST, RecordingStore, executor_pod
from tests.k8s.test_watch_source import SimClock

INTERVAL = CoreSettings().api_polling_interval


class HeldListStore(RecordingStore):
    """A real store that runs `meanwhile` once, when the next list with a mark arrives, before
    applying it: what the watch does between the server's read of a list and its arrival."""

    def __init__(self, *, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock) -> None:
        super().__init__(labels=labels, classifier=classifier, clock=clock)
        self.meanwhile: Callable[[], None] | None = None

    def replace_snapshot(
        self, pods: Iterable[ExecutorPod], *, since: ListMark | None = None
    ) -> None:
        listed = list(pods)
        if since is not None and self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            meanwhile()
        super().replace_snapshot(listed, since=since)


@pytest.fixture
def held() -> Iterator[HeldListStore]:
    store = composed_store(HeldListStore)
    yield store
    store.stop()


@pytest.fixture
def watch(
    sim: KubeSim, operations: KubernetesPodOperations, held: HeldListStore
) -> Iterator[WatchSource]:
    source = WatchSource(held, operations, settings=FAST, clock=SimClock(sim), rng=random.Random(7))
    source.start(APP_ID)
    assert sim.wait_for_watchers(1, 10)
    yield source
    source.stop()


def state(store: RecordingStore, executor_id: int) -> ExecutorState | None:
    observed = store.current_snapshot.get(executor_id)
    return None if observed is None else observed.state


def poll_once(store: HeldListStore, operations: KubernetesPodOperations) -> None:
    """One poll, on a scheduler the test ticks: its list is read and applied on this thread."""
    scheduler = DeterministicScheduler()
    poll = PollSource(store, operations, scheduler=scheduler)
    poll.start(APP_ID)
    try:
        scheduler.tick(INTERVAL)
    finally:
        poll.stop()


def gone(store: RecordingStore, executor_id: int) -> bool:
    return state(store, executor_id) is ExecutorState.DELETED


def test_a_poll_list_older_than_the_watch_keeps_what_the_watch_applied(
    sim: KubeSim,
    operations: KubernetesPodOperations,
    held: HeldListStore,
    watch: WatchSource,
) -> None:
    for executor_id in (1, 2):
        sim.create_pod(executor_pod(executor_id))
    sim.run_until_idle()
    assert held.wait_snapshot(lambda s: {1, 2} <= set(s))

    def the_watch_moves_on() -> None:
        sim.create_pod(executor_pod(3))
        sim.delete_pod(f"{APP_ID}-exec-1", grace_period=0)
        assert held.wait_for(lambda s: 3 in s.current_snapshot and gone(s, 1))

    held.meanwhile = the_watch_moves_on
    poll_once(held, operations)
    listed = sorted(pod.name for pod in held.replacements[-1])
    assert listed == [f"{APP_ID}-exec-1", f"{APP_ID}-exec-2"], "the list was read before"
    assert state(held, 3) is ExecutorState.PENDING, "the pod the watch added stays"
    assert state(held, 1) is ExecutorState.DELETED, "the pod the watch deleted stays deleted"
    assert state(held, 2) is ExecutorState.RUNNING


def test_a_poll_list_overtaken_by_the_watch_s_re_list_is_dropped(
    sim: KubeSim,
    operations: KubernetesPodOperations,
    held: HeldListStore,
    watch: WatchSource,
) -> None:
    sim.create_pod(executor_pod(1))
    sim.run_until_idle()
    assert held.wait_snapshot(lambda s: 1 in s)
    lists_before = len(held.replacements)

    def the_watch_lists_again() -> None:
        sim.create_pod(executor_pod(2))
        watch.relist()
        assert held.wait_for(lambda s: len(s.replacements) > lists_before)
        assert held.wait_snapshot(lambda s: 2 in s)

    held.meanwhile = the_watch_lists_again
    poll_once(held, operations)
    assert [p.name for p in held.replacements[-1]] == [f"{APP_ID}-exec-1"], "the poll's list"
    assert sorted(held.current_snapshot) == [1, 2], "the watch's newer list stands"
