"""`execpods-sidecar serve` as a subprocess: SIGTERM and SIGINT end it cleanly.

Streams end normally (status OK), the process exits 0, and the application's executor pods are
deleted, unless spark.kubernetes.executor.deleteOnTermination is false (here set through a
properties file), in which case they are left running.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from execpods.client import AllocatorClient, ExecutorState
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import app_pods, running_ids, wait_for
from tests.sidecar.serve_process import serve


@pytest.mark.parametrize(
    ("signum", "delete_on_termination"),
    [(signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["SIGTERM", "SIGINT", "SIGTERM-keep-pods"],
)
def test_a_signal_ends_streams_and_deletes_the_executor_pods_unless_told_to_keep_them(
    sim: KubeSim, tmp_path: Path, signum: signal.Signals, delete_on_termination: bool
) -> None:
    app_id = f"signal-{signum.name.lower()}"
    properties = tmp_path / "sidecar.conf"
    properties.write_text(
        "spark.kubernetes.allocation.batch.delay 150ms\n"
        f"spark.kubernetes.executor.deleteOnTermination {str(delete_on_termination).lower()}\n",
        encoding="utf-8",
    )
    env = {"EXECPODS_INITIAL_EXECUTORS": "3", "EXECPODS_IMAGE": "spark:test"}
    with serve(sim, app_id, "--properties-file", str(properties), env=env) as (process, address):
        assert process.stdout is not None
        with AllocatorClient(address) as client, client.stream_snapshots() as stream:
            for update in stream:
                if update.latest is not None and update.latest.count(ExecutorState.RUNNING) == 3:
                    break
            process.send_signal(signum)
            rest = list(stream)  # ends normally: no RpcError
            assert process.wait(30) == 0
        assert len(rest) <= 3
        assert process.stdout.read() == ""
    if delete_on_termination:
        assert all(p["metadata"].get("deletionTimestamp") for p in app_pods(sim, app_id))
        wait_for(lambda: not app_pods(sim, app_id), what="the executor pods to be gone")
    else:
        assert running_ids(sim, app_id) == {1, 2, 3}
        # The start-up permission check's deletes are dry runs: they delete nothing.
        assert not any(
            r.method == "DELETE" and r.query.get("dryRun") != "All" for r in sim.requests()
        )


def test_concurrent_stops_stop_the_backend_once() -> None:
    """A signal arriving while the process is already stopping must not run the stop twice."""
    import asyncio

    from execpods.core import no_sources
    from execpods.core.testing import InMemoryPodOperations, SimpleExecutorPodBuilder
    from execpods.sidecar.config.settings import Settings
    from execpods.sidecar.server import SidecarServer
    from execpods.sidecar.wiring import assemble

    closes: list[str] = []
    settings = Settings.from_properties(
        {"spark.app.id": "twice", "execpods.sidecar.listen": "127.0.0.1:0"}
    )
    runtime = assemble(
        settings,
        pod_operations=InMemoryPodOperations(),
        pod_builder=SimpleExecutorPodBuilder(),
        sources=no_sources,
        close_client=lambda: closes.append("closed"),
    )

    async def scenario() -> None:
        server = SidecarServer(runtime)
        await server.start()
        server.request_stop()
        await asyncio.gather(server.stop(), server.stop())
        await server.wait_stopped()

    asyncio.run(scenario())
    assert closes == ["closed"]
