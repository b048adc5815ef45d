"""Watches requested as WebSocket upgrades, as Java's fabric8 client (Spark's) makes them.

The client here is ``websocket-client`` (the library the official Python client uses for its
own WebSocket calls): a real RFC 6455 client, so the handshake, framing, ping and close are
checked against an implementation other than kubesim's.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import websocket
from execpods.kubesim import ClusterConfig, KubeSim

from tests.kubesim.conftest import NS, core_for, pod_body
from tests.kubesim.support import eventually

WATCH = f"/api/v1/namespaces/{NS}/pods?watch=true&labelSelector=app%3Dspark"


@pytest.fixture
def live() -> Iterator[KubeSim]:
    cfg = ClusterConfig(nodes=1, pods_per_node=10, start_latency=0.05, start_jitter=0.0)
    with KubeSim(cluster=cfg) as sim:
        yield sim


def connect(sim: KubeSim, path: str = WATCH) -> Any:
    ws_url = sim.url.replace("http://", "ws://") + path
    factory: Any = websocket.create_connection
    return factory(ws_url, timeout=10)


def recv_event(conn: Any) -> dict[str, Any]:
    opcode, data = conn.recv_data()
    assert opcode == websocket.ABNF.OPCODE_TEXT
    event: dict[str, Any] = json.loads(data)
    return event


def test_websocket_watch_streams_initial_state_then_changes(live: KubeSim) -> None:
    live.create_pod(pod_body("first", labels={"app": "spark"}))
    live.create_pod(pod_body("unrelated", labels={"app": "other"}))
    conn = connect(live)
    try:
        first = recv_event(conn)
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "first")
        live.create_pod(pod_body("second", labels={"app": "spark"}))
        names = set()
        while "second" not in names:
            event = recv_event(conn)
            names.add(event["object"]["metadata"]["name"])
        assert "unrelated" not in names
        conn.ping(b"are you there")
        opcode, payload = conn.recv_data(control_frame=True)
        while opcode != websocket.ABNF.OPCODE_PONG:  # events may come before the pong
            opcode, payload = conn.recv_data(control_frame=True)
        assert payload == b"are you there"
    finally:
        conn.close()
    records = [r for r in live.requests() if r.verb == "watch"]
    assert [r.status for r in records] == [101]


def test_client_close_ends_the_watch_on_the_server(live: KubeSim) -> None:
    conn = connect(live)
    assert live.wait_for_watchers(1, timeout=10)
    conn.close()
    assert eventually(lambda: live.watch_count() == 0), "the server kept a closed watch"


def test_timeout_seconds_ends_with_a_close_frame(live: KubeSim) -> None:
    conn = connect(live, WATCH + "&timeoutSeconds=1")
    opcode, data = conn.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    assert int.from_bytes(data[:2], "big") == 1000
    conn.close()


def test_a_too_old_version_arrives_as_an_error_message(live: KubeSim) -> None:
    live.create_pod(pod_body("p", labels={"app": "spark"}))
    live.compact()
    conn = connect(live, WATCH + "&resourceVersion=1")
    event = recv_event(conn)
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    conn.close()


def test_refusal_mode_answers_503_and_http_watches_still_work() -> None:
    """With WebSockets off the upgrade gets the 503 fabric8 falls back from; the official
    client's ordinary HTTP watch is unaffected."""
    with KubeSim(websocket_watch=False) as sim:
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            connect(sim)
        assert refused.value.status_code == 503
        sim.create_pod(pod_body("p", labels={"app": "spark"}))
        with core_for(sim) as core:
            resp = core.list_namespaced_pod(
                NS,
                watch=True,
                label_selector="app=spark",
                timeout_seconds=1,
                _preload_content=False,
                _request_timeout=(5, 10),
            )
            lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
        assert (lines[0]["type"], lines[0]["object"]["metadata"]["name"]) == ("ADDED", "p")


def test_an_upgrade_without_a_key_is_a_bad_request(live: KubeSim) -> None:
    with socket.create_connection((live.host, live.port), timeout=10) as sock:
        sock.sendall(
            f"GET {WATCH} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        answer = sock.recv(65536).decode("latin-1")
    assert answer.startswith("HTTP/1.1 400")
