"""The backend under failure (issue 11): a failed start deletes nothing, kills go in bounded
chunks, stopping retries deletion within its grace period and says what is left, and totals are
capped. Deterministic: a ManualClock that the backend's waits advance."""

from __future__ import annotations

import pytest
from execpods.core import (
    ApiUnavailable,
    CoreSettings,
    ExecutorPod,
    ExecutorPodsBackend,
    Machinery,
    ManualClock,
    PodSelector,
    Ports,
    compose_backend,
)
from execpods.core.kills import KILL_CHUNK
from execpods.core.testing import (
    TEST_APP_ID,
    DeterministicSnapshotsStore,
    InMemoryPodOperations,
    RecordingDriver,
    SimpleExecutorPodBuilder,
)
from hypothesis import given
from hypothesis import strategies as st

from tests.core.test_backend import make_backend


class FlakyPods(InMemoryPodOperations):
    """Deletes by selector fail while `failures` lasts; lists fail when `list_fails`."""

    def __init__(self, failures: int, *, list_fails: bool = False) -> None:
        super().__init__()
        self.failures = failures
        self.list_fails = list_fails
        self.attempts = 0

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        self.attempts += 1
        if self.failures > 0:
            self.failures -= 1
            raise ApiUnavailable("delete pods failed: 503 the API is down")
        return super().delete_by_selector(selector, grace_period_seconds=grace_period_seconds)

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        if self.list_fails:
            raise ApiUnavailable("list pods failed: 503 the API is down")
        return super().list(selector)


def _backend(pods: InMemoryPodOperations, clock: ManualClock, **props: str) -> ExecutorPodsBackend:
    settings = CoreSettings.from_properties({"spark.executor.instances": "0", **props})
    return compose_backend(
        app_id=TEST_APP_ID,
        settings=settings,
        ports=Ports(
            pod_operations=pods, pod_builder=SimpleExecutorPodBuilder(), driver=RecordingDriver()
        ),
        machinery=Machinery(clock=clock, store=DeterministicSnapshotsStore),
    )


def _add_executor_pods(pods: InMemoryPodOperations, count: int) -> None:
    builder = SimpleExecutorPodBuilder()
    for executor_id in range(1, count + 1):
        pods.create(builder.build(executor_id=executor_id, app_id=TEST_APP_ID))


def test_a_backend_that_never_started_deletes_nothing_when_stopped() -> None:
    rig = make_backend()
    _add_executor_pods(rig.pods, 3)  # e.g. another, live sidecar's executors
    report = rig.backend.stop()
    assert report.complete
    assert rig.pods.deletes == []
    assert len(rig.pods.pods) == 3


@given(count=st.integers(min_value=1, max_value=3 * KILL_CHUNK + 7))
def test_kills_go_in_chunks_of_at_most_kill_chunk_ids(count: int) -> None:
    rig = make_backend()
    future = rig.backend.kill_executors(range(1, count + 1))
    rig.requests.run_until_idle()
    future.result()
    chunks = [call.selector for call in rig.pods.deletes if call.selector is not None]
    sizes = [len(s.label_in["spark-exec-id"]) for s in chunks]
    assert all(size <= KILL_CHUNK for size in sizes)
    assert sum(sizes) == count
    named = set().union(*(s.label_in["spark-exec-id"] for s in chunks))
    assert named == {str(i) for i in range(1, count + 1)}
    assert all(len(s.describe()) < 200 for s in chunks)  # what errors and logs say


def test_stopping_retries_the_deletion_until_the_api_answers() -> None:
    clock = ManualClock()
    pods = FlakyPods(failures=4)
    backend = _backend(pods, clock, **{"execpods.shutdown.deleteGrace": "30s"})
    backend.start()
    _add_executor_pods(pods, 3)
    report = backend.stop(wait=clock.advance)
    assert report.complete
    assert (report.deleted, report.attempts) == (3, 5)
    assert pods.pods == {}
    assert 0 < clock.monotonic() < 30  # backed off, within the grace period


@pytest.mark.parametrize("list_fails", [False, True], ids=["listed", "list-fails-too"])
def test_stopping_gives_up_after_the_grace_period_and_says_what_is_left(list_fails: bool) -> None:
    clock = ManualClock()
    pods = FlakyPods(failures=10**6, list_fails=list_fails)
    backend = _backend(pods, clock, **{"execpods.shutdown.deleteGrace": "10s"})
    backend.start()
    _add_executor_pods(pods, 3)
    report = backend.stop(wait=clock.advance)
    assert not report.complete
    assert clock.monotonic() == pytest.approx(10)
    assert 3 < report.attempts < 20  # backed off: not a busy loop
    text = report.describe(TEST_APP_ID)
    assert "503 the API is down" in text
    if list_fails:
        assert report.left is None
        assert "unknown number" in text
    else:
        assert report.left is not None
        assert len(report.left) == 3
        assert "3 executor pods" in text


def test_a_grace_of_zero_makes_one_attempt() -> None:
    clock = ManualClock()
    pods = FlakyPods(failures=1)
    backend = _backend(pods, clock, **{"execpods.shutdown.deleteGrace": "0s"})
    backend.start()
    report = backend.stop(wait=clock.advance)
    assert (report.complete, report.attempts) == (False, 1)


def test_a_total_beyond_the_maximum_is_refused_before_anything_runs() -> None:
    settings = CoreSettings.from_properties({"execpods.allocation.maxTotal": "100"})
    rig = make_backend(settings=settings)
    with pytest.raises(ValueError, match=r"total=101 .*execpods\.allocation\.maxTotal=100"):
        rig.backend.request_total(101)
    with pytest.raises(ValueError, match=r"maxTotal"):
        rig.backend.request_total(2**31 - 1)
    future = rig.backend.request_total(100)
    rig.requests.run_until_idle()
    future.result()
    assert rig.backend.counts().total == 100


def test_stopping_makes_one_attempt_when_retrying_is_hopeless() -> None:
    """The sidecar's case of a server that never answered: one delete, no wait, no list, the
    reason in the report; a hopeless reason that comes only after a success changes nothing."""
    clock = ManualClock()
    pods = FlakyPods(failures=10**6)
    backend = _backend(pods, clock, **{"execpods.shutdown.deleteGrace": "30s"})
    backend.start()
    never = "the Kubernetes API server at http://127.0.0.1:9 never answered"
    report = backend.stop(wait=clock.advance, hopeless=lambda: never)
    assert (report.complete, report.attempts, report.left) == (False, 1, None)
    assert clock.monotonic() == 0  # no back-off
    assert never in report.describe(TEST_APP_ID)
    answering = FlakyPods(failures=0)
    other = _backend(answering, ManualClock(), **{"execpods.shutdown.deleteGrace": "30s"})
    other.start()
    _add_executor_pods(answering, 2)
    assert other.stop(hopeless=lambda: never).complete
    assert answering.pods == {}
