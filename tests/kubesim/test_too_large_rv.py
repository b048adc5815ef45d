"""Reads from a resourceVersion the server has not reached, answered as kube-apiserver does.

kube-apiserver's watch cache waits up to 3 s to reach a version a list asks for ("not older
than"), then answers 504 ``Timeout`` with the cause ``ResourceVersionTooLarge`` (client-go's
reflector re-lists from scratch on it); a plain watch from such a version is accepted and streams
only later events; a streaming list (``sendInitialEvents``) ends with the same Status as an ERROR
event. The official client against the simulator, with a short freshness wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from execpods.kubesim import ClusterConfig, KubeSim
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import (
    NS,
    CoreApi,
    core_for,
    new_watch,
    open_watch,
    pod_body,
    read_events,
)
from tests.kubesim.support import raw, status_of

WAIT = 0.3


@pytest.fixture
def fresh_sim() -> Iterator[KubeSim]:
    with KubeSim(cluster=ClusterConfig(seed=2), deterministic=True, fresh_timeout=WAIT) as s:
        yield s


@pytest.fixture
def fresh_core(fresh_sim: KubeSim) -> Iterator[CoreApi]:
    with core_for(fresh_sim) as core:
        yield core


def _assert_too_large(status: dict[str, Any], requested: int, current: int) -> None:
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 504, "Timeout")
    assert status["message"] == (
        f"Timeout: Too large resource version: {requested}, current: {current}"
    )
    assert status["details"]["causes"] == [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    ]
    assert status["details"]["retryAfterSeconds"] == 1


@pytest.mark.parametrize("match", [None, "NotOlderThan"])
def test_a_list_not_older_than_a_future_version_times_out_as_too_large(
    fresh_sim: KubeSim, fresh_core: CoreApi, match: str | None
) -> None:
    fresh_core.create_namespaced_pod(NS, pod_body("p"))
    current = int(fresh_sim.resource_version)
    started = time.monotonic()
    with pytest.raises(ApiException) as exc:
        fresh_core.list_namespaced_pod(
            NS, resource_version=str(current + 50), resource_version_match=match
        )
    assert time.monotonic() - started >= WAIT  # it waited for the store to catch up first
    assert exc.value.status == 504
    assert exc.value.headers is not None
    assert exc.value.headers["Retry-After"] == "1"
    _assert_too_large(status_of(exc.value), current + 50, current)


def test_a_list_waits_for_a_version_the_store_reaches_in_time(fresh_sim: KubeSim) -> None:
    fresh_sim.api.fresh_timeout = 10.0
    wanted = int(fresh_sim.resource_version) + 2

    def write_once_the_list_waits() -> None:
        deadline = time.monotonic() + 10
        while fresh_sim.state()["waitingForFreshness"] == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        fresh_sim.create_pod(pod_body("a"))
        fresh_sim.create_pod(pod_body("b"))

    writer = threading.Thread(target=write_once_the_list_waits)
    writer.start()
    with core_for(fresh_sim) as core:
        pods = core.list_namespaced_pod(NS, resource_version=str(wanted))
    writer.join(10)
    assert int(pods.metadata.resource_version) >= wanted
    assert sorted(p.metadata.name for p in pods.items) == ["a", "b"]


def test_an_exact_list_of_a_future_version_is_too_large_at_once(
    fresh_sim: KubeSim, fresh_core: CoreApi
) -> None:
    current = int(fresh_sim.resource_version)
    with pytest.raises(ApiException) as exc:
        fresh_core.list_namespaced_pod(
            NS, resource_version=str(current + 5), resource_version_match="Exact"
        )
    _assert_too_large(status_of(exc.value), current + 5, current)


def test_a_plain_watch_from_a_future_version_streams_only_what_comes_after_it(
    fresh_sim: KubeSim, fresh_core: CoreApi
) -> None:
    future = int(fresh_sim.resource_version) + 3
    resp = open_watch(fresh_core, timeout=3, resource_version=str(future))
    for i in range(5):  # one ADDED event each: the first three are at or before `future`
        fresh_core.create_namespaced_pod(NS, pod_body(f"p{i}"))
    events = read_events(resp, limit=2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "p3"),
        ("ADDED", "p4"),
    ]
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) == future + 1


def _streaming_list(core: CoreApi, rv: str, **extra: Any) -> Any:
    return open_watch(
        core,
        timeout=2,
        resource_version=rv,
        resource_version_match="NotOlderThan",
        send_initial_events=True,
        allow_watch_bookmarks=True,
        **extra,
    )


def test_a_streaming_list_from_a_future_version_ends_with_too_large(
    fresh_sim: KubeSim, fresh_core: CoreApi
) -> None:
    current = int(fresh_sim.resource_version)
    events = read_events(_streaming_list(fresh_core, str(current + 9)))
    assert [e["type"] for e in events] == ["ERROR"]
    _assert_too_large(events[0]["object"], current + 9, current)
    # The official client's watch raises it, with the message client-go also matches on.
    with pytest.raises(ApiException) as exc:
        for _ in new_watch().stream(
            fresh_core.list_namespaced_pod,
            NS,
            resource_version=str(current + 9),
            resource_version_match="NotOlderThan",
            send_initial_events=True,
            allow_watch_bookmarks=True,
            timeout_seconds=2,
            _request_timeout=(5, 12),
        ):
            pass
    assert exc.value.status == 504
    assert "Too large resource version" in str(exc.value.reason)


def test_a_streaming_list_sends_the_state_then_a_bookmark_then_live_events(
    fresh_sim: KubeSim, fresh_core: CoreApi
) -> None:
    fresh_core.create_namespaced_pod(NS, pod_body("a"))
    fresh_core.create_namespaced_pod(NS, pod_body("b"))
    rv = fresh_sim.resource_version
    resp = _streaming_list(fresh_core, "")
    fresh_core.create_namespaced_pod(NS, pod_body("c"))
    events = read_events(resp, limit=4)
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("BOOKMARK", None),
        ("ADDED", "c"),
    ]
    bookmark = events[2]["object"]["metadata"]
    assert bookmark["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert bookmark["resourceVersion"] == rv


def test_watch_options_the_api_server_forbids_are_422(fresh_sim: KubeSim) -> None:
    base = f"/api/v1/namespaces/{NS}/pods?watch=true&timeoutSeconds=1"
    code, status = raw(fresh_sim, "GET", base + "&resourceVersionMatch=NotOlderThan")
    assert (code, status["reason"]) == (422, "Invalid")
    assert "resourceVersionMatch is forbidden for watch" in status["message"]
    code, status = raw(fresh_sim, "GET", base + "&sendInitialEvents=true&allowWatchBookmarks=1")
    assert code == 422
    assert "requires setting resourceVersionMatch to NotOlderThan" in status["message"]
    code, status = raw(
        fresh_sim, "GET", base + "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    )
    assert code == 422
    assert "requires setting allowWatchBookmarks to true" in status["message"]
