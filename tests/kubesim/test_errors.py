"""Every error is a v1 Status with details, and malformed input never costs a server thread.

Each case sends raw bytes, so the server sees exactly the malformed request; afterwards the
simulator must still serve, its cluster must still run, and nothing may have been logged as an
internal error (which is what an unhandled exception in a handler or a listener produces).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import orjson
import pytest
from execpods.kubesim import KubeSim

from tests.kubesim.conftest import NS, pod_body
from tests.kubesim.support import raw

PODS = f"/api/v1/namespaces/{NS}/pods"
POD = f"{PODS}/p"
SMP = "application/strategic-merge-patch+json"
JSONP = "application/json-patch+json"


def exchange(sim: KubeSim, head: str, body: bytes = b"") -> tuple[int, dict[str, Any]]:
    """Send one raw request (the client closes its side) and parse the status and body."""
    with socket.create_connection((sim.host, sim.port), timeout=10) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n\r\n" + body)
        sock.shutdown(socket.SHUT_WR)
        reply = sock.makefile("rb").read()
    status_line, _, rest = reply.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), orjson.loads(payload)


def req(
    method: str, path: str, body: bytes = b"", ctype: str = "application/json"
) -> tuple[str, bytes]:
    """A well-framed request with a (possibly malformed) body: head, body."""
    head = f"{method} {path} HTTP/1.1\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}"
    return head, body


MALFORMED: list[tuple[str, tuple[str, bytes], int]] = [
    ("bad content-length", (f"POST {PODS} HTTP/1.1\r\nContent-Length: abc", b""), 400),
    ("negative content-length", (f"POST {PODS} HTTP/1.1\r\nContent-Length: -5", b""), 400),
    ("bad chunk size", (f"POST {PODS} HTTP/1.1\r\nTransfer-Encoding: chunked", b"zz\r\n"), 400),
    ("body not JSON", req("POST", PODS, b"{nope"), 400),
    ("body not an object", req("POST", PODS, b"[]"), 400),
    ("name not a string", req("POST", PODS, b'{"metadata":{"name":5},"spec":{}}'), 400),
    (
        "generateName not a string",
        req("POST", PODS, b'{"metadata":{"generateName":["x"]},"spec":{}}'),
        400,
    ),
    ("bad limit", req("GET", f"{PODS}?limit=abc"), 400),
    ("bad watch timeout", req("GET", f"{PODS}?watch=1&timeoutSeconds=x"), 400),
    ("bad resourceVersion", req("GET", f"{PODS}?resourceVersion=x"), 400),
    ("bad continue token", req("GET", f"{PODS}?continue=zzz"), 400),
    ("bad match", req("GET", f"{PODS}?resourceVersion=1&resourceVersionMatch=X"), 400),
    ("bad label selector", req("GET", f"{PODS}?labelSelector=a%20in%20(b"), 400),
    ("bad field selector", req("GET", f"{PODS}?fieldSelector=spec.image%3Dx"), 400),
    (
        "too large exact version",
        req("GET", f"{PODS}?resourceVersion=999&resourceVersionMatch=Exact"),
        504,
    ),
    ("bad grace in body", req("DELETE", POD, b'{"gracePeriodSeconds":"x"}'), 400),
    ("bad grace in query", req("DELETE", f"{POD}?gracePeriodSeconds=x"), 400),
    ("bad preconditions", req("DELETE", POD, b'{"preconditions":[1]}'), 400),
    ("stale precondition", req("DELETE", POD, b'{"preconditions":{"uid":"x"}}'), 409),
    ("status not an object", req("PUT", f"{POD}/status", b'{"status":"x"}'), 422),
    (
        "conditions not a list",
        req("PATCH", f"{POD}/status", b'{"status":{"conditions":1}}', SMP),
        422,
    ),
    ("finalizers not a list", req("PATCH", POD, b'{"metadata":{"finalizers":"x"}}', SMP), 422),
    (
        "annotations not strings",
        req("PATCH", POD, b'{"metadata":{"annotations":{"a":1}}}', SMP),
        422,
    ),
    ("json patch without from", req("PATCH", POD, b'[{"op":"move","path":"/x"}]', JSONP), 400),
    ("json patch not a list", req("PATCH", POD, b'{"op":"add"}', JSONP), 400),
    ("unknown patch type", req("PATCH", POD, b"{}", "application/xml"), 415),
    ("missing pod", req("GET", f"{PODS}/missing"), 404),
    ("unknown path", req("GET", "/api/v1/replicationcontrollers"), 404),
    ("write to discovery", req("POST", "/api/v1"), 405),
    ("unknown method", req("OPTIONS", PODS), 405),
    ("malformed request line", ("NONSENSE", b""), 400),
    ("control body not JSON", req("POST", "/_kubesim/advance", b"abc"), 400),
    ("control bad argument", req("POST", "/_kubesim/advance", b'{"seconds":"x"}'), 400),
    ("unknown control route", req("POST", "/_kubesim/nope"), 404),
    ("unknown node", req("POST", "/_kubesim/nodes/zzz/lose"), 404),
]


@pytest.mark.parametrize(
    ("sent", "code"), [pytest.param(sent, code, id=name) for name, sent, code in MALFORMED]
)
def test_malformed_input_gets_a_status_and_breaks_nothing(
    sim: KubeSim, caplog: pytest.LogCaptureFixture, sent: tuple[str, bytes], code: int
) -> None:
    sim.create_pod(pod_body("p"))
    sim.run_until_idle()
    with caplog.at_level(logging.WARNING, logger="execpods.kubesim"):
        got, status = exchange(sim, *sent)
        assert got == code, status
        assert status["kind"] == "Status"
        assert status["code"] == code
        assert status["status"] == "Failure"
        assert status["reason"]
        assert status["message"]
        assert isinstance(status["details"], dict)
        # The simulator still serves and its cluster still runs the pod to the end.
        sim.succeed_pod("p")
        sim.run_until_idle()
        assert raw(sim, "GET", POD)[1]["status"]["phase"] == "Succeeded"
    assert [r.getMessage() for r in caplog.records] == []
