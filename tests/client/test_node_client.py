"""A driver in another language: the Node.js test (tests/node) against a real sidecar process.

The sidecar runs as `execpods-sidecar serve` in a subprocess, in front of the Kubernetes simulator
(in process, real clock, quick latencies). Node talks to it over the contract alone, loading the
.proto at run time. Afterwards SIGTERM must stop the sidecar cleanly with no executor pods left.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / "node"
APP_ID = "node-test"
LISTENING_PREFIX = "execpods-sidecar: listening on "
START_TIMEOUT_S = 30.0
NODE_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
# What npm prints when it cannot reach the registry (as opposed to a broken lock file).
_OFFLINE_SIGNS = (
    "ENOTFOUND",
    "EAI_AGAIN",
    "ECONNREFUSED",
    "ECONNRESET",
    "ETIMEDOUT",
    "ENETUNREACH",
)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed; the Node.js client test needs node and npm")
    return found


def _install_node_modules() -> None:
    """`npm ci` from the committed lock file, once (node_modules is not committed)."""
    npm = _tool("npm")
    if (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        return
    result = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-2000:]
        if any(sign in output for sign in _OFFLINE_SIGNS):
            pytest.skip(f"npm ci could not reach the registry (no network?):\n{output}")
        pytest.fail(f"npm ci failed in {NODE_DIR}:\n{output}")


def _sidecar_command() -> str:
    local = Path(sys.executable).parent / "execpods-sidecar"
    return str(local) if local.exists() else _tool("execpods-sidecar")


class SidecarProcess:
    """`execpods-sidecar serve` as a child process; `address` once it printed its listening line."""

    def __init__(self, api_url: str, log: IO[str], *, conf: tuple[str, ...] = ()) -> None:
        command = [
            _sidecar_command(),
            "serve",
            "--app-id",
            APP_ID,
            "--api-url",
            api_url,
            "--listen",
            "127.0.0.1:0",
            "--image",
            "execpods/executor:node-test",
            "--initial-executors",
            "0",
            "--conf",
            "spark.kubernetes.allocation.batch.delay=150ms",
            "--conf",
            "spark.kubernetes.executor.eventProcessingInterval=100ms",
            *(arg for pair in conf for arg in ("--conf", pair)),
        ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def address(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"the sidecar printed no listening line within {START_TIMEOUT_S} s")
            if line is None:
                pytest.fail(f"the sidecar exited ({self.process.wait()}) before listening")
            if line.startswith(LISTENING_PREFIX):
                return line.removeprefix(LISTENING_PREFIX).strip()

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(STOP_TIMEOUT_S)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)


@pytest.fixture
def sidecar_log() -> Iterator[IO[str]]:
    with tempfile.TemporaryFile("w+", prefix="execpods-sidecar-") as log:
        yield log


@pytest.mark.slow
@pytest.mark.timeout(360)  # npm ci on a fresh checkout; the test itself takes a few seconds
def test_a_node_driver_uses_every_main_rpc_over_tls_with_a_token(
    sidecar_log: IO[str], tmp_path: Path
) -> None:
    """The sidecar serves TLS and wants a bearer token; Node trusts the test's CA, reads the
    token from a file, and also checks that a call without the token is UNAUTHENTICATED."""
    node = _tool("node")
    _install_node_modules()
    # Imported here: the rest of tests/client needs only the client package.
    import trustme
    from execpods.kubesim import KubeSim

    from tests.sidecar.conftest import FAST_CLUSTER, app_pods, wait_for

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    for index, blob in enumerate(issued.cert_chain_pems):
        blob.write_to_path(str(cert_file), append=index > 0)
    issued.private_key_pem.write_to_path(str(key_file))
    token_file = tmp_path / "token"
    token_file.write_text("node-test-token-5f2c9a\n", encoding="utf-8")
    conf = (
        f"execpods.sidecar.tls.certFile={cert_file}",
        f"execpods.sidecar.tls.keyFile={key_file}",
        f"execpods.sidecar.auth.tokenFile={token_file}",
    )
    with KubeSim(cluster=FAST_CLUSTER) as sim:
        sidecar = SidecarProcess(sim.url, sidecar_log, conf=conf)
        try:
            address = sidecar.address()
            node_run = subprocess.run(
                [node, "client.test.mjs", address],
                env={
                    **os.environ,
                    "EXECPODS_CA_FILE": str(ca_file),
                    "EXECPODS_TOKEN_FILE": str(token_file),
                },
                cwd=NODE_DIR,
                capture_output=True,
                text=True,
                timeout=NODE_TIMEOUT_S,
                check=False,
            )
            print(node_run.stdout, node_run.stderr, sep="\n")
            assert node_run.returncode == 0, _explain(node_run, sidecar_log)
            assert "all " in node_run.stdout
            assert "over TLS" in node_run.stdout
            assert "without the bearer token is UNAUTHENTICATED" in node_run.stdout
            assert sidecar.terminate() == 0, _explain(None, sidecar_log)
        finally:
            sidecar.kill()
        wait_for(lambda: not app_pods(sim, APP_ID), timeout=10.0, what="no executor pods left")


def _explain(run: subprocess.CompletedProcess[str] | None, log: IO[str]) -> str:
    log.seek(0)
    parts = [] if run is None else [f"node exited {run.returncode}:\n{run.stdout}{run.stderr}"]
    return "\n".join([*parts, f"sidecar log (tail):\n{log.read()[-4000:]}"])
