"""The watch source over HTTP against the simulator: Spark's suite (SPARK-24248), then failures."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from execpods.core import (
    Clock,
    CoreSettings,
    ExecutorLabels,
    ExecutorPod,
    ExecutorPodsSnapshot,
    ExecutorState,
    PodClassifier,
)
from execpods.core.testing import composed_store
from execpods.k8s import (
    ApiGateway,
    EventWaiter,
    KubernetesPodOperations,
    KubernetesSettings,
    Waiter,
    WatchSource,
    connect,
)
from execpods.kubesim import KubeSim

from tests.k8s.conftest import (
    APP_ID,
    FAST,
    WAIT,
    RecordingStore,
    eventually,
    executor_pod,
    mislabelled_executor_pods,
)


class SimClock:
    """The watch source's clock reads the simulator's (virtual) clock."""

    def __init__(self, sim: KubeSim) -> None:
        self._sim = sim

    def monotonic(self) -> float:
        return self._sim.now()

    def time(self) -> float:
        return self._sim.now()


class VirtualWaiter:
    """Backoff waits move the simulator's virtual clock instead of sleeping.

    `on_wait` hooks run at the start of a wait: "while the watch is down".
    """

    def __init__(self, sim: KubeSim) -> None:
        self._sim = sim
        self._event = threading.Event()
        self._cond = threading.Condition()
        self.waits: list[float] = []
        self.wakes = 0
        self.on_wait: list[Callable[[], None]] = []

    def wait(self, seconds: float) -> bool:
        if self._event.is_set():
            return True
        while self.on_wait:
            self.on_wait.pop(0)()
        self._sim.advance(seconds)
        with self._cond:
            self.waits.append(seconds)
            self._cond.notify_all()
        return self._event.is_set()

    def wait_for_waits(self, count: int, timeout: float = 10.0) -> bool:
        """Block until the source has backed off `count` times in all."""
        return self.wait_until(lambda: len(self.waits) >= count, timeout)

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Block until `predicate()` holds after a wait (the only thing that moves virtual time)."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def wake(self) -> None:
        self.wakes += 1

    def stop(self) -> None:
        self._event.set()

    @property
    def stopped(self) -> bool:
        return self._event.is_set()


class SignallingWaiter(EventWaiter):
    """The real-time waiter, which also tells the test that a wait (a backoff) has begun."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, seconds: float) -> bool:
        self.waiting.set()
        return super().wait(seconds)


def state_of(snapshot: ExecutorPodsSnapshot, executor_id: int) -> ExecutorState | None:
    observed = snapshot.get(executor_id)
    return None if observed is None else observed.state


def name(executor_id: int) -> str:
    return f"{APP_ID}-exec-{executor_id}"


_RUNNING: list[WatchSource] = []


@pytest.fixture(autouse=True)
def _stop_sources() -> Iterator[None]:
    """A failed test must not leave its watch thread retrying against a closed simulator."""
    yield
    while _RUNNING:
        _RUNNING.pop().stop()


def start_watch(
    sim: KubeSim,
    operations: KubernetesPodOperations,
    store: RecordingStore,
    *,
    waiter: Waiter | None = None,
    settings: KubernetesSettings = FAST,
) -> WatchSource:
    source = WatchSource(
        store,
        operations,
        settings=settings,
        clock=SimClock(sim),
        waiter=waiter,
        rng=random.Random(7),
    )
    _RUNNING.append(source)
    source.start(APP_ID)
    assert sim.wait_for_watchers(1, 10)
    return source


def test_watch_events_are_pushed_to_the_store_as_updates(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    source = start_watch(sim, operations, store)
    sim.create_pod(executor_pod(1))
    sim.create_pod(executor_pod(2))
    sim.run_until_idle()  # both scheduled and running: ADDED, then MODIFIED events
    assert store.wait_snapshot(
        lambda s: (
            {i: p.state for i, p in s.items()}
            == {1: ExecutorState.RUNNING, 2: ExecutorState.RUNNING}
        )
    )
    assert {p.name for p in store.updates} == {name(1), name(2)}
    assert store.replacements == [[]]  # the initial list
    source.stop()


def test_starting_twice_is_an_error(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    source = start_watch(sim, operations, store)
    with pytest.raises(RuntimeError, match=r"Cannot start the watcher twice\."):
        source.start(APP_ID)
    source.stop()


def test_the_watch_can_be_disabled(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    source = WatchSource(store, operations, core_settings=CoreSettings(enable_api_watcher=False))
    source.start(APP_ID)
    source.stop()
    assert sim.requests() == []


def test_the_watch_starts_from_the_list_version_with_bookmarks(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    sim.create_pod(executor_pod(1))
    source = start_watch(sim, operations, store)
    assert [p.name for p in store.replacements[0]] == [name(1)]
    version = source.resource_version
    source.stop()
    sim.drop_watches(abrupt=False)  # kubesim logs a watch only once its stream ends
    assert eventually(lambda: any(r.verb == "watch" for r in sim.requests()))
    watch = next(r for r in sim.requests() if r.verb == "watch")
    assert watch.query["resourceVersion"] == version
    assert watch.query["allowWatchBookmarks"].lower() == "true"
    assert watch.query["timeoutSeconds"] == "300"


def test_a_410_mid_stream_relists_without_losing_an_update(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    sim.create_pod(executor_pod(1))
    sim.run_until_idle()
    waiter = VirtualWaiter(sim)
    source = start_watch(sim, operations, store, waiter=waiter)
    sim.clear_requests()
    sim.expire_next(1)  # the resumed watch is refused too: the loop must re-list
    sim.expire_watches()  # ERROR 410 on the open stream
    sim.fail_pod(name(1), exit_code=3)  # an update that no watch stream carries
    assert store.wait_snapshot(lambda s: state_of(s, 1) is ExecutorState.FAILED)
    assert sim.wait_for_watchers(1, 10)
    assert source.stats.expired >= 1
    assert source.stats.lists >= 2
    pod = store.current_snapshot.get(1)
    assert pod is not None
    assert pod.pod.terminated_exit_code() == 3
    source.stop()


def test_a_pod_deleted_while_the_watch_was_down_is_gone_after_the_relist(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    sim.create_pod(executor_pod(1))
    sim.create_pod(executor_pod(2))
    sim.run_until_idle()
    waiter = VirtualWaiter(sim)
    source = start_watch(sim, operations, store, waiter=waiter)
    assert set(store.current_snapshot) == {1, 2}

    def while_down() -> None:
        sim.delete_pod(name(2), grace_period=0)
        sim.compact()  # the resume version is now too old: 410, then a re-list

    waiter.on_wait.append(while_down)
    sim.fail_requests(503, count=1)  # the watch's reconnect fails once: it backs off
    sim.drop_watches(abrupt=True)
    assert store.wait_snapshot(lambda s: set(s) == {1} and len(store.replacements) >= 2)
    assert source.stats.expired >= 1
    source.stop()


def test_500s_and_429s_back_off_and_recover(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    waiter = VirtualWaiter(sim)
    source = start_watch(sim, operations, store, waiter=waiter)
    sim.fail_requests(500, count=3)
    sim.drop_watches(abrupt=True)
    assert waiter.wait_for_waits(4)  # the cut stream, then three 500s
    assert sim.wait_for_watchers(1, 10)
    sim.create_pod(executor_pod(1))
    assert store.wait_snapshot(lambda s: 1 in s)
    assert source.stats.failures == 4
    assert source.stats.lists == 1  # resumed from its version: no re-list needed
    sim.throttle(2, retry_after=5)
    waits_before = len(waiter.waits)
    sim.drop_watches(abrupt=True)
    assert waiter.wait_for_waits(waits_before + 3)
    assert sim.wait_for_watchers(1, 10)
    throttled_waits = waiter.waits[waits_before + 1 : waits_before + 3]
    assert len(throttled_waits) == 2
    assert min(throttled_waits) >= 5, waiter.waits  # Retry-After honoured
    sim.create_pod(executor_pod(2))
    assert store.wait_snapshot(lambda s: 2 in s)
    source.stop()


def test_request_rate_stays_bounded_during_a_30_second_outage(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    waiter = VirtualWaiter(sim)
    settings = KubernetesSettings(backoff_initial=0.5, backoff_max=30)
    source = start_watch(sim, operations, store, waiter=waiter, settings=settings)
    sim.clear_requests()
    outage_start = sim.now()
    sim.fail_requests(503, seconds=30)
    sim.drop_watches(abrupt=True)
    assert waiter.wait_until(lambda: sim.now() - outage_start >= 30)
    assert sim.wait_for_watchers(1, 10)
    recovered_at = sim.now()
    failed = [r for r in sim.requests() if r.status == 503]
    assert 3 <= len(failed) <= 12, len(failed)  # ~log2(30/0.5) retries, not thousands
    assert recovered_at - outage_start >= 30
    assert recovered_at - outage_start <= 30 + 30  # back within one capped delay
    sim.create_pod(executor_pod(1))
    assert store.wait_snapshot(lambda s: 1 in s)
    source.stop()


def test_a_server_that_ends_every_watch_at_once_is_not_hammered(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    waiter = VirtualWaiter(sim)
    source = start_watch(sim, operations, store, waiter=waiter)
    for round_ in range(1, 4):  # each stream ends cleanly, at once, with nothing delivered
        sim.drop_watches(abrupt=False)
        assert waiter.wait_for_waits(round_)  # a backoff, not an immediate reconnect
        assert sim.wait_for_watchers(1, 10)
    floor = FAST.backoff_initial * 0.1
    assert len(waiter.waits) == 3
    assert all(wait >= floor for wait in waiter.waits), waiter.waits  # real delays, never zero
    assert source.stats.watches == 4  # one reconnect per backoff, nothing in between
    assert source.stats.failures == 0
    source.stop()


def test_stop_interrupts_a_blocked_watch_within_a_second(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    source = start_watch(sim, operations, store)
    thread = next(t for t in threading.enumerate() if t.name == f"execpods-watch-{APP_ID}")
    started = time.monotonic()
    stopper = threading.Thread(target=source.stop)
    stopper.start()
    stopper.join(2)
    assert time.monotonic() - started < 1.0
    assert not thread.is_alive()


def test_stop_during_a_long_backoff_returns_at_once(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    settings = KubernetesSettings(backoff_initial=60, backoff_max=60)
    waiter = SignallingWaiter()
    source = start_watch(sim, operations, store, waiter=waiter, settings=settings)
    sim.fail_requests(503)
    sim.drop_watches(abrupt=True)
    assert waiter.waiting.wait(WAIT)  # backing off: a failure, then a 6-60 s wait
    assert source.stats.failures >= 1
    started = time.monotonic()
    source.stop()
    assert time.monotonic() - started < 1.0


def test_pods_with_missing_or_malformed_labels_are_skipped_with_a_warning(
    sim: KubeSim,
    operations: KubernetesPodOperations,
    store: RecordingStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = start_watch(sim, operations, store)
    with caplog.at_level(logging.WARNING):
        for pod in mislabelled_executor_pods():
            sim.create_pod(pod)
        sim.create_pod(executor_pod(3))
        assert store.wait_snapshot(lambda s: 3 in s)
        assert store.wait_for(lambda s: len(s.updates) >= 3)
    assert set(store.current_snapshot) == {3}
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "no-id" in messages
    assert "bad-id" in messages
    assert source.stats.failures == 0
    source.stop()


def test_deleted_events_mark_the_executor_deleted(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    sim.create_pod(executor_pod(1))  # pending, unscheduled: deleted at once, no grace
    source = start_watch(sim, operations, store)
    sim.delete_pod(name(1))
    assert store.wait_snapshot(lambda s: state_of(s, 1) is ExecutorState.DELETED)
    source.stop()


def test_spark_31125_a_pod_deleted_gracefully_is_terminating_then_deleted(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    sim.create_pod(executor_pod(1))
    sim.run_until_idle()
    source = start_watch(sim, operations, store)
    assert store.wait_snapshot(lambda s: state_of(s, 1) is ExecutorState.RUNNING)
    sim.delete_pod(name(1))  # graceful: marked, still Running while it stops
    assert store.wait_snapshot(lambda s: state_of(s, 1) is ExecutorState.TERMINATING)
    # Force-deleted while still reading Running: the DELETED event says it is gone.
    sim.delete_pod(name(1), grace_period=0)
    assert store.wait_snapshot(lambda s: state_of(s, 1) is ExecutorState.DELETED)
    source.stop()


def test_inactive_pods_leave_the_watch(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    sim.create_pod(executor_pod(1))
    sim.create_pod(executor_pod(2))
    sim.run_until_idle()
    source = start_watch(sim, operations, store)
    assert store.wait_snapshot(lambda s: len(s) == 2)
    operations.patch_labels(name(2), {"spark-exec-inactive": "true"})
    # The pod left the watch's selection: it arrives as a deletion carrying the pod as it last
    # matched (kube-apiserver's watch cache sends the previous object at the event's version;
    # seen on a real server, tests/kubesim/test_conformance_watch.py), so without the label.
    assert store.wait_snapshot(lambda s: state_of(s, 2) is ExecutorState.DELETED)
    last = store.current_snapshot.executor_pods[2].pod
    assert "spark-exec-inactive" not in last.labels
    watches = [r for r in sim.requests() if r.verb in ("list", "watch")]
    assert all("spark-exec-inactive!=true" in r.query["labelSelector"] for r in watches)
    source.stop()


def test_the_watch_keeps_the_latest_version_from_bookmarks(store: RecordingStore) -> None:
    with KubeSim(deterministic=True, bookmark_interval=0.05) as sim:
        client = connect(api_url=sim.url)
        operations = KubernetesPodOperations(
            ApiGateway(client, namespace="default", request_timeout=5)
        )
        source = start_watch(sim, operations, store)
        listed = source.resource_version
        sim.create_pod(executor_pod(1, app_id="another-app"))  # outside the selection: no event
        latest = str(sim.resource_version)
        assert latest != listed
        assert eventually(lambda: source.resource_version == latest)  # carried by a BOOKMARK
        assert source.stats.bookmarks >= 1
        assert store.updates == []
        sim.clear_requests()
        sim.drop_watches(abrupt=True)
        assert eventually(lambda: any(r.verb == "watch" for r in sim.requests()))
        resumed = next(r for r in sim.requests() if r.verb == "watch")
        assert resumed.query["resourceVersion"] == latest  # resumed from the bookmark's version
        assert source.stats.lists == 1
        source.stop()
        client.close()


class CannedApiServer:
    """A real HTTP server replaying a fixed list and watch stream, for what no conformant API
    server (the simulator included) would send: a malformed pod in a watch stream.

    The first watch gets `events`, one JSON line each, then the stream ends; later watches stay
    open, empty, until the server closes. The official client talks to it over real HTTP.
    """

    def __init__(self, pod_list: dict[str, object], events: list[dict[str, object]]) -> None:
        closing = threading.Event()
        watches: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                watching = query.get("watch", ["false"])[0].lower() in ("1", "true")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if not watching:
                    body = orjson.dumps(pod_list)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_header("Connection", "close")
                self.end_headers()
                watches.append(query.get("resourceVersion", [""])[0])
                if len(watches) == 1:
                    self.wfile.write(b"".join(orjson.dumps(e) + b"\n" for e in events))
                else:
                    closing.wait(WAIT)
                self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:
                return

        self.watches = watches
        self._closing = closing
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )  # `close` waits up to one poll interval for the server loop to notice
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(WAIT)


def api_pod(executor_id: int, phase: object) -> dict[str, object]:
    pod = executor_pod(executor_id)
    pod["metadata"]["resourceVersion"] = str(10 + executor_id)
    pod["status"] = {"phase": phase}
    return pod


def test_a_malformed_pod_in_the_stream_is_skipped_and_the_stream_continues(
    store: RecordingStore, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[dict[str, object]] = [
        {"type": "MODIFIED", "object": api_pod(1, phase=3)},  # a phase of the wrong type
        {"type": "MODIFIED", "object": {"metadata": {"labels": {}}}},  # no name at all
        {"type": "MODIFIED", "object": api_pod(2, phase="Failed")},
    ]
    pod_list: dict[str, object] = {
        "kind": "PodList",
        "metadata": {"resourceVersion": "10"},
        "items": [api_pod(1, "Running"), api_pod(2, "Running")],
    }
    server = CannedApiServer(pod_list, events)
    client = connect(api_url=server.url)
    operations = KubernetesPodOperations(ApiGateway(client, namespace="default", request_timeout=5))
    source = WatchSource(store, operations, settings=FAST, rng=random.Random(7))
    _RUNNING.append(source)
    try:
        with caplog.at_level(logging.WARNING, logger="execpods.k8s"):
            source.start(APP_ID)
            assert store.wait_snapshot(lambda s: state_of(s, 2) is ExecutorState.FAILED)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(name(1) in m and "status.phase" in m for m in warnings), warnings
        assert any("metadata.name" in m for m in warnings), warnings
        assert source.stats.failures == 0  # skipped, not a broken stream
        assert source.stats.events == 1
        assert state_of(store.current_snapshot, 1) is ExecutorState.RUNNING  # its last good state
        assert server.watches[0] == "10"
        assert source.resource_version == "12"  # the version of the last good event
    finally:
        source.stop()
        client.close()
        server.close()


class FlakyStore(RecordingStore):
    """A store whose next `update_pod` fails: a bug downstream, not an API failure."""

    def __init__(self, *, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock) -> None:
        super().__init__(labels=labels, classifier=classifier, clock=clock)
        self.fail_next = False

    def update_pod(self, pod: ExecutorPod) -> None:
        if self.fail_next:
            self.fail_next = False
            raise ValueError("a bug in a consumer")
        super().update_pod(pod)


def test_an_unexpected_error_is_logged_and_the_event_is_not_lost(
    sim: KubeSim, operations: KubernetesPodOperations, caplog: pytest.LogCaptureFixture
) -> None:
    store = composed_store(FlakyStore)
    waiter = VirtualWaiter(sim)
    source = start_watch(sim, operations, store, waiter=waiter)
    store.fail_next = True
    with caplog.at_level(logging.ERROR, logger="execpods.k8s.watch"):
        sim.create_pod(executor_pod(1))
        assert store.wait_snapshot(lambda s: 1 in s)  # resumed from before the failed event
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.exc_info is not None
    assert "a bug in a consumer" in str(record.exc_info[1])
    assert source.stats.failures == 1
    assert len(waiter.waits) == 1  # backed off once, then carried on
    source.stop()
    store.stop()
