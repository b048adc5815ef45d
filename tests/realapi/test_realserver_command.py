"""The documented command, as an envtest or kwok user runs it: `python3 tools/dev.py realserver
--nodes 2` prints a URL and a kubeconfig; a pod created through it is scheduled and run by the
simulated nodes to Running and Succeeded; a SIGTERM to the command's process stops the server
(nothing of it is left running, its folder is gone)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from execpods.devtools.realserver import gobuild
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def built() -> None:
    """The real server's programs are cached (as the `real_server` fixture asks, without
    starting the session's server)."""
    missing = [n for n in gobuild.REAL_SERVER if gobuild.cached(n) is None]
    if missing:
        message = f"the real API server is not built ({', '.join(missing)})"
        if os.environ.get("EXECPODS_REAL_SERVER") == "require":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def command() -> Iterator[subprocess.Popen[str]]:
    """`python3 tools/dev.py realserver --nodes 2`, in a process group of its own (killed after
    the test if anything of it is left)."""
    process = subprocess.Popen(
        ["python3", str(ROOT / "tools" / "dev.py"), "realserver", "--nodes", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def _printed(out: IO[str]) -> tuple[str, Path]:
    """The URL and the kubeconfig path the command prints (after the bootstrap's own lines)."""
    lines: list[str] = []
    for line in out:
        if not line.startswith("==>"):
            lines.append(line.strip())
        if len(lines) == 2:
            return lines[0], Path(lines[1])
    raise AssertionError(f"the command ended after printing {lines}")


def _until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow  # a server of its own (not the session's): etcd, kube-apiserver, controllers
def test_a_pod_runs_and_succeeds_then_a_sigterm_stops_the_server(
    built: None, command: subprocess.Popen[str]
) -> None:
    assert command.stdout is not None
    url, kubeconfig = _printed(command.stdout)
    assert url.startswith("https://127.0.0.1:")
    loader: Any = config.new_client_from_config
    api_client = loader(config_file=str(kubeconfig))
    try:
        core: Any = client.CoreV1Api(api_client)
        _until(
            lambda: bool(core.list_namespaced_service_account("default").items),
            "the default ServiceAccount (the controller manager's)",
        )
        _until(lambda: len(core.list_node().items) == 2, "the two simulated nodes")
        core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "hello",
                    "annotations": {"kubesim.execpods.io/exit-after": "1"},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                },
            },
        )
        phases: list[str] = []

        def phase_is(wanted: str) -> bool:
            phase = core.read_namespaced_pod("hello", "default").status.phase
            if not phases or phases[-1] != phase:
                phases.append(phase)
            return bool(phase == wanted)

        _until(lambda: phase_is("Succeeded"), "the pod to succeed")
        assert "Running" in phases, phases
        pod = core.read_namespaced_pod("hello", "default")
        assert pod.spec.node_name in {n.metadata.name for n in core.list_node().items}
        assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    finally:
        api_client.close()
    folder = kubeconfig.parent
    assert folder.is_dir()
    command.send_signal(signal.SIGTERM)  # to the command's own process, as a supervisor does
    command.wait(timeout=60)
    _until(lambda: not folder.exists(), "the server's folder to go (the server stopped)", 30)
