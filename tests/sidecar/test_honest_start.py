"""Issue 31 item 4: honest start-up and errors, with real processes over real HTTP.

At `128638e` a refused credential looked healthy: the start-up permission check read a 401 as
"granted", every call then failed 401 for ever while health said SERVING. A wrong API URL gave a
dozen warnings from three places, none naming `--api-url`, and SIGTERM then retried deletes for
20 s against a server that never answered. Now:

- a 401 at start-up fails it, as a 403 does, naming where the credential came from;
- a 401 while running is NOT_SERVING, with a notice on every stream (`CredentialsRefused`, the
  one mechanism of `execpods.core.progress`), until the API accepts the credential;
- a server that never answered gets one line naming `--api-url`, and stopping gives up at once;
- a namespace that does not exist fails start-up, naming it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from execpods.client import AllocatorClient, StreamUpdate
from execpods.kubesim import KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.sidecar.conftest import FAST_CLUSTER, wait_for
from tests.sidecar.serve_process import SIDECAR, announced
from tests.sidecar.test_id_ledger_permissions import without_driver
from tests.sidecar.test_observability import NOT_SERVING, SERVING, health_status
from tests.sidecar.test_rbac import ACCOUNT, NAMESPACE, RBAC, app_pods, start_simulator

BAD_TOKEN = "not-a-token-this-cluster-issued"


def with_token_file(kubeconfig: Path, token: str, token_file: Path) -> Path:
    """The kubeconfig with its user's credential moved to a token file (ending in a newline, as
    `echo token > file` writes it)."""
    config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    (user,) = config["users"]
    del user["user"]["token"]
    user["user"]["tokenFile"] = str(token_file)
    token_file.write_text(token + "\n", encoding="utf-8")
    kubeconfig.write_text(yaml.safe_dump(config), encoding="utf-8")
    return kubeconfig


def serve_command(*args: str) -> list[str]:
    return [str(SIDECAR), "serve", "--image", "x", "--listen", "127.0.0.1:0", *args]


def run_to_first_line(command: list[str]) -> tuple[str, int, str]:
    """Run the sidecar until it prints its first stdout line (the listening line) or exits:
    (that line, its exit code or -1 while running, stderr once it ended)."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None
        first = process.stdout.readline()  # "" once the process has exited
        if first:
            process.kill()
        _, err = process.communicate(timeout=60)
        return announced(first) if first else "", -1 if first else process.returncode, err


@pytest.mark.parametrize("credential", ["token", "tokenFile"])
def test_a_401_at_start_up_fails_naming_where_the_credential_came_from(
    tmp_path: Path, credential: str
) -> None:
    sim, _ = start_simulator(RBAC, tmp_path)
    try:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kc", namespace=NAMESPACE, token=BAD_TOKEN)
        token_file = tmp_path / "token"
        if credential == "tokenFile":
            with_token_file(kubeconfig, BAD_TOKEN, token_file)
        args = ("--app-id", "refused", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE)
        line, code, err = run_to_first_line(serve_command(*args))
        assert (line, code) == ("", 1), err  # never listened; exit 1 as for a 403
        assert f"the Kubernetes API server at {sim.url} refuses the credential (401" in err
        named = f"the token file {token_file}" if credential == "tokenFile" else "a bearer token"
        assert f"kubeconfig user 'kubesim' (context 'kubesim', file {kubeconfig}): {named}" in err
        assert "Unauthorized" in err  # the API's own words follow
        assert app_pods(sim) == []
    finally:
        sim.close()


def test_a_403_still_names_the_verbs_and_a_good_token_file_serves(tmp_path: Path) -> None:
    """The other side of the 401: the service account's own token, read from a file ending in a
    newline (trimmed, as client-go does), passes the check and the sidecar listens."""
    sim, _ = start_simulator(RBAC, tmp_path)
    try:
        token = sim.token_for(ACCOUNT, NAMESPACE)
        kubeconfig = sim.write_kubeconfig(tmp_path / "kc", namespace=NAMESPACE, token=token)
        with_token_file(kubeconfig, token, tmp_path / "token")
        args = ("--app-id", "served", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE)
        line, code, err = run_to_first_line(serve_command(*args))
        assert line.startswith("execpods-sidecar: listening on 127.0.0.1:"), err
        assert code == -1
    finally:
        sim.close()


def stall_notices(updates: list[StreamUpdate]) -> list[tuple[str, str, str]]:
    return [
        (n.kind, n.reason, n.message)
        for u in updates
        for n in u.notices
        if n.reason == "CredentialsRefused"
    ]


def read_until(client: AllocatorClient, kind: str) -> list[tuple[str, str, str]]:
    """A new stream's CredentialsRefused notices, up to the first of `kind`."""
    updates: list[StreamUpdate] = []
    with client.stream_snapshots(batch_interval_ms=50) as stream:
        for update in stream:
            updates.append(update)
            if any(notice[0] == kind for notice in stall_notices(updates)):
                break
    return stall_notices(updates)


def test_health_is_not_serving_while_the_api_refuses_the_credential(tmp_path: Path) -> None:
    """The start-up check off (so nothing stops the start), a token nobody issued: every call
    is a 401. Health is NOT_SERVING and the stream says why, naming the credential; once the
    cluster accepts the token (issued now, as a renewed Secret would be), it all resumes and
    the executor comes."""
    sim, _ = start_simulator(RBAC, tmp_path)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc", namespace=NAMESPACE, token=BAD_TOKEN)
    props = {**without_driver(kubeconfig), "execpods.sidecar.checkPermissions": "false"}
    try:
        with (
            EmbeddedSidecar(props) as sidecar,
            AllocatorClient(sidecar.address) as client,
        ):
            client.request_total(1)
            ((kind, _, message),) = read_until(client, "allocation_stalled")
            assert kind == "allocation_stalled"
            assert "refuses the credential (401 Unauthorized)" in message
            assert f"kubeconfig user 'kubesim' (context 'kubesim', file {kubeconfig})" in message
            wait_for(lambda: health_status(sidecar.address) == NOT_SERVING, what="NOT_SERVING")
            assert health_status(sidecar.address, "execpods.v1.ExecutorAllocator") == NOT_SERVING
            assert app_pods(sim) == []
            sim.token_for(ACCOUNT, NAMESPACE, token=BAD_TOKEN)  # now the cluster accepts it
            assert read_until(client, "allocation_resumed")[-1][0] == "allocation_resumed"
            wait_for(lambda: health_status(sidecar.address) == SERVING, what="SERVING")
            wait_for(lambda: len(app_pods(sim)) == 1, what="the executor")
    finally:
        sim.close()


def test_a_namespace_that_does_not_exist_fails_start_up_naming_it(tmp_path: Path) -> None:
    with KubeSim(cluster=FAST_CLUSTER) as sim:
        args = ("--app-id", "nowhere", "--api-url", sim.url, "--namespace", "team-x")
        line, code, err = run_to_first_line(serve_command(*args))
        assert (line, code) == ("", 1), err
        assert "namespace 'team-x' does not exist" in err
        assert "spark.kubernetes.namespace (--namespace)" in err
        assert 'namespaces "team-x" not found' in err


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port where nothing listens (held bound, so no one else takes it meanwhile):
    every connection is refused, as at a wrong --api-url."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def test_a_wrong_api_url_logs_one_line_naming_it_and_stops_at_once(refused_port: int) -> None:
    command = serve_command("--app-id", "lost", "--api-url", f"http://127.0.0.1:{refused_port}")
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            assert announced(process.stdout.readline()).startswith("execpods-sidecar: listening")
            seen: list[str] = []
            for line in process.stderr:  # until the line that says what to check
                seen.append(line)
                if "has not answered" in line:
                    break
            else:
                pytest.fail("no line said the API server has not answered:\n" + "".join(seen))
            process.send_signal(signal.SIGTERM)
            asked = time.monotonic()
            _, errors = process.communicate(timeout=60)
            stopped_after = time.monotonic() - asked
        finally:
            if process.poll() is None:
                process.kill()
    lines = seen + errors.splitlines(keepends=True)
    naming = [line for line in lines if "--api-url" in line]
    assert len(naming) == 1, "".join(lines)
    (line,) = naming
    assert f"The Kubernetes API server at http://127.0.0.1:{refused_port} has not answered" in line
    assert "Connection refused" in line
    assert "check --api-url (execpods.kubernetes.apiUrl)" in line
    # Stopping does not retry deletes against a server that never answered: one attempt, where
    # it retried for execpods.shutdown.deleteGrace (20 s). Under 1 s on a quiet machine; the
    # bound leaves room for a loaded one and still fails the retrying.
    assert stopped_after < 10.0, f"{stopped_after:.1f} s\n{''.join(lines)}"
    assert process.returncode == 1
    assert "never answered" in errors
    assert "an unknown number of executor pods" in errors
