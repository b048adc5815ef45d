"""Issue 32 item 4 (R8): status that tells the truth when allocation cannot make progress.

An id ledger the sidecar may not read (a Role without configmaps, the start-up permission check
off) stalled allocation with nothing on the stream and health SERVING on `128638e`. Now health is
NOT_SERVING and every stream hears why (`KIND_ALLOCATION_STALLED`, reason `IdLedgerUnreadable`),
a stream opened later included, and the metric says it; nothing is created meanwhile.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from execpods.client import AllocatorClient, StreamUpdate
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.sidecar.conftest import SidecarFactory, wait_for
from tests.sidecar.test_id_ledger_permissions import role_without_on_configmaps, without_driver
from tests.sidecar.test_observability import NOT_SERVING, SERVING, health_status
from tests.sidecar.test_rbac import app_pods, start_simulator


def stalls(updates: list[StreamUpdate]) -> list[tuple[str, str]]:
    return [(n.kind, n.reason) for u in updates for n in u.notices if "allocation_" in n.kind]


def read_until_a_stall(client: AllocatorClient) -> list[StreamUpdate]:
    """A new stream's updates, up to the first that carries a stall or resume notice."""
    updates: list[StreamUpdate] = []
    with client.stream_snapshots(batch_interval_ms=50) as stream:
        for update in stream:
            updates.append(update)
            if stalls(updates):
                break
    return updates


def test_an_unreadable_ledger_is_not_serving_and_told_on_the_stream(tmp_path: Path) -> None:
    sim, kubeconfig = start_simulator(
        role_without_on_configmaps("get", "create", "patch"), tmp_path
    )
    props = {
        **without_driver(kubeconfig),
        "execpods.sidecar.checkPermissions": "false",
        "execpods.sidecar.metrics.enabled": "true",
        "execpods.sidecar.metrics.host": "127.0.0.1",
        "execpods.sidecar.metrics.port": "0",
    }
    try:
        with (
            EmbeddedSidecar(props) as sidecar,
            AllocatorClient(sidecar.address) as client,
        ):
            client.request_total(2)
            first = read_until_a_stall(client)
            assert stalls(first) == [("allocation_stalled", "IdLedgerUnreadable")]
            (notice,) = [n for u in first for n in u.notices if n.kind == "allocation_stalled"]
            assert "configmap" in notice.message
            assert "403" in notice.message
            wait_for(lambda: health_status(sidecar.address) == NOT_SERVING, what="NOT_SERVING")
            assert health_status(sidecar.address, "execpods.v1.ExecutorAllocator") == NOT_SERVING
            metrics_url = f"http://{sidecar.server.ops.metrics_address}/metrics"
            with urllib.request.urlopen(metrics_url, timeout=5) as answer:
                text = answer.read().decode()
            assert 'execpods_allocation_stalled{reason="IdLedgerUnreadable"} 1.0' in text
            # A stream opened later hears it first.
            assert stalls(read_until_a_stall(client)) == [
                ("allocation_stalled", "IdLedgerUnreadable")
            ]
            assert app_pods(sim) == []
    finally:
        sim.close()


def test_health_serves_while_allocation_progresses(make_sidecar: SidecarFactory) -> None:
    sidecar = make_sidecar("progressing")
    with AllocatorClient(sidecar.address) as client:
        client.request_total(1)
    assert health_status(sidecar.address) == SERVING
    assert sidecar.runtime.backend.progress.progressing
