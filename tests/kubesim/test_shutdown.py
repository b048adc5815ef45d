"""Shutdown leaves no thread, listening port or socket behind, even with open watches."""

from __future__ import annotations

import http.client
import os
import socket
import threading

import pytest
from execpods.kubesim import ClusterConfig, KubeSim

from tests.kubesim.conftest import NS, core_api, new_client, pod_body


def open_sockets() -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


@pytest.mark.parametrize("deterministic", [True, False])
def test_shutdown_leaves_nothing_behind(deterministic: bool) -> None:
    threads_before = set(threading.enumerate())
    sockets_before = open_sockets()
    sim = KubeSim(cluster=ClusterConfig(start_latency=0.0), deterministic=deterministic)
    with sim:
        port = sim.port
        api = new_client(sim.url)
        core = core_api(api)
        core.create_namespaced_pod(NS, pod_body("p"))
        # An open watch and an idle keep-alive connection, both still open at shutdown.
        watch_resp = core.list_namespaced_pod(
            NS, watch=True, timeout_seconds=60, _preload_content=False, _request_timeout=(5, 70)
        )
        assert sim.wait_for_watchers(1, timeout=10)
        idle = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        idle.request("GET", "/version")
        assert idle.getresponse().read()
        assert sim.connection_count() == 2
        server_threads = [t for t in threading.enumerate() if t.name.startswith("kubesim")]
        assert server_threads
    watch_resp.close()
    api.close()
    idle.close()
    leftover = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    assert leftover == []
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 2):
        pass
    assert open_sockets() - sockets_before == set()
    with pytest.raises(RuntimeError):
        _ = sim.url
