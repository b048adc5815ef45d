"""The local kubelet's API relay: a pod's connection still open when the kubelet stops is closed
quietly (the stop cancels it; asyncio used to log the cancelled connection as an error with a
traceback at the end of every cluster-mode run)."""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path

import pytest
from execpods.devtools.localkubelet.relay import ApiRelay


def test_a_connection_open_at_close_ends_without_an_error_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # An "API server" that accepts and never answers: the relayed connection stays open.
    upstream = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    reached = threading.Event()

    def accept() -> None:
        accepted.append(upstream.accept()[0])
        reached.set()

    threading.Thread(target=accept, daemon=True).start()
    port = upstream.getsockname()[1]
    relay = ApiRelay(f"https://127.0.0.1:{port}", tmp_path, ca_file=tmp_path / "ca.crt")
    path = tmp_path / "api.sock"
    relay.serve(path)
    pod = socket.socket(socket.AF_UNIX)
    pod.connect(str(path))
    pod.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert reached.wait(10), "the relay reached the API server"
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        relay.close()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert pod.recv(1) == b"", "the pod's connection is closed"
    pod.close()
    for conn in accepted:
        conn.close()
    upstream.close()
