"""Helpers shared by the conformance modules (the official client against the simulator)."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
from execpods.kubesim import KubeSim
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import NS, CoreApi, pod_body


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(exc.body or "{}")
    return body


def eventually(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    """Poll `condition` until it holds, for state with nothing to wait on; False after `timeout`."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.01)
    return True


def once_watching(sim: KubeSim, action: Callable[[], object]) -> threading.Thread:
    """Run ``action`` in a helper thread as soon as a watch is open; the test reads the watch."""

    def run() -> None:
        if sim.wait_for_watchers(1, timeout=10):
            action()

    t = threading.Thread(target=run)
    t.start()
    return t


def collect(stream: Any, into: list[str]) -> None:
    """Append each event's type to ``into`` until the stream ends or raises."""
    for event in stream:
        into.append(event["type"])


class _WithToken(http.client.HTTPSConnection):
    """A TLS connection that sends the real server's token (and JSON) with every request."""

    token = ""

    def request(
        self, method: str, url: str, body: Any = None, headers: Any = None, **kwargs: Any
    ) -> None:
        sent = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        super().request(method, url, body=body, headers={**sent, **(headers or {})}, **kwargs)


def connection(sim: KubeSim) -> http.client.HTTPConnection:
    """A keep-alive connection to the server under test: plain HTTP to kubesim, TLS with the
    admin's token to the real API server."""
    if getattr(sim, "real", False):
        real: Any = sim
        conn = _WithToken(real.host, real.port, timeout=10, context=real.ssl_context())
        conn.token = real.server.token
        return conn
    return http.client.HTTPConnection(sim.host, sim.port, timeout=10)


def made(core: CoreApi, namespace: str) -> None:
    """Create the namespace unless it exists (on the real server the session keeps it)."""
    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def names(pods: Any) -> list[str]:
    return sorted(p.metadata.name for p in pods.items)


def raw(sim: KubeSim, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    """One JSON request on a fresh connection: the status and the parsed body (None if empty).
    On the real API server (``sim.real``) over TLS with its token."""
    if getattr(sim, "real", False):
        real: Any = sim
        result: tuple[int, Any] = real.request_raw(method, path, body, headers)
        return result
    return http_json(sim.host, sim.port, method, path, body, **headers)


def http_json(
    host: str, port: int, method: str, path: str, body: Any = None, **headers: str
) -> tuple[int, Any]:
    """:func:`raw` for a server known only by address (a simulator in another process)."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        data = None if body is None else orjson.dumps(body)
        hdrs = {"Content-Type": "application/json", **headers}
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        text = resp.read()
        return resp.status, orjson.loads(text) if text else None
    finally:
        conn.close()


def running_pod(sim: KubeSim, core: CoreApi, name: str = "p") -> None:
    """Create pod `name` and let the kubelet run it."""
    core.create_namespaced_pod(NS, pod_body(name, labels={"app": "a"}))
    sim.run_until_idle()
