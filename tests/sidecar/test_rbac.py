"""Least privilege, enforced: the sidecar under exactly deploy/rbac.yaml's Role on a simulator
that enforces RBAC, and a Role missing verbs failing at start-up with a message naming them.

The simulator authenticates the sidecar by the service account's bearer token (in the kubeconfig
the test writes) and answers anything the Role does not grant with kube-apiserver's 403.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from execpods.client import AllocatorClient, ExecutorState
from execpods.kubesim import KubeSim
from execpods.sidecar.cli import main
from execpods.sidecar.config.settings import Settings
from execpods.sidecar.embedded import EmbeddedSidecar
from execpods.sidecar.guard.permissions import VERBS, MissingPermissions
from execpods.sidecar.wiring import connect

from tests.sidecar.conftest import FAST_CLUSTER, running_ids, wait_for

ROOT = Path(__file__).resolve().parents[2]
RBAC = [d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if d]
NAMESPACE = "spark"
ACCOUNT = "execpods-sidecar"
APP = "rbac-app"
DRIVER: dict[str, Any] = {
    "metadata": {"name": "spark-driver"},
    "spec": {"containers": [{"name": "driver", "image": "apache/spark:4.0.1"}]},
}


def role_without(*verbs: str) -> list[dict[str, Any]]:
    """deploy/rbac.yaml with `verbs` taken out of the Role's pod rule."""
    manifests = copy.deepcopy(RBAC)
    (role,) = [d for d in manifests if d["kind"] == "Role"]
    for rule in role["rules"]:
        rule["verbs"] = [v for v in rule["verbs"] if v not in verbs]
    return manifests


def granted_verbs() -> set[str]:
    (role,) = [d for d in RBAC if d["kind"] == "Role"]
    return {verb for rule in role["rules"] if "pods" in rule["resources"] for verb in rule["verbs"]}


def start_simulator(manifests: list[dict[str, Any]], tmp_path: Path) -> tuple[KubeSim, Path]:
    sim = KubeSim(cluster=FAST_CLUSTER, rbac=manifests, namespaces=[NAMESPACE]).start()
    sim.create_pod(copy.deepcopy(DRIVER), namespace=NAMESPACE)
    token = sim.token_for(ACCOUNT, NAMESPACE)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE, token=token)
    return sim, kubeconfig


@pytest.fixture
def enforced(tmp_path: Path) -> Iterator[tuple[KubeSim, Path]]:
    sim, kubeconfig = start_simulator(RBAC, tmp_path)
    try:
        yield sim, kubeconfig
    finally:
        sim.close()


def properties(kubeconfig: Path) -> dict[str, str]:
    return {
        "spark.app.id": APP,
        "execpods.kubernetes.kubeconfig": str(kubeconfig),
        "spark.kubernetes.namespace": NAMESPACE,
        "spark.kubernetes.driver.pod.name": "spark-driver",
        "spark.kubernetes.container.image": "execpods/executor:rbac",
        "execpods.sidecar.listen": "127.0.0.1:0",
        "execpods.sidecar.checkPermissions": "true",
        "spark.executor.instances": "0",
        "spark.kubernetes.allocation.batch.delay": "150ms",
        "spark.kubernetes.executor.eventProcessingInterval": "100ms",
    }


def app_pods(sim: KubeSim) -> list[Any]:
    return [
        p
        for p in sim.pods(NAMESPACE)
        if p["metadata"].get("labels", {}).get("spark-app-selector") == APP
    ]


def test_the_roles_verbs_are_the_ones_the_sidecar_checks() -> None:
    assert granted_verbs() == set(VERBS)


def test_the_whole_lifecycle_runs_under_exactly_the_deployed_role(
    enforced: tuple[KubeSim, Path],
) -> None:
    sim, kubeconfig = enforced
    with (
        EmbeddedSidecar(properties(kubeconfig)) as sidecar,
        AllocatorClient(sidecar.address) as client,
    ):
        client.request_total(3)
        with client.stream_snapshots(batch_interval_ms=50) as stream:
            for update in stream:
                if update.latest is not None and update.latest.count(ExecutorState.RUNNING) == 3:
                    break
            assert client.kill_executors([1]) == 1
            for update in stream:
                if any(r.executor_id == 1 for r in update.removed):
                    break
        wait_for(lambda: len(running_ids(sim, APP)) == 3, what="a replacement")
        assert client.update_driver_executors(registered=[2, 3]) >= {2, 3}
    # Stopped: every executor pod deleted by the sidecar itself, with the Role's deletecollection.
    wait_for(lambda: not app_pods(sim), what="no executor pods left")
    records = sim.requests()
    refused = [(r.method, r.path, r.status) for r in records if r.status in (401, 403)]
    assert refused == []
    used = {r.verb for r in records}
    assert {"get", "list", "watch", "create", "delete", "deletecollection"} <= used
    # The owner reference needed the driver pod (get), and nothing else was read or written.
    assert {r.verb for r in records} <= granted_verbs() | {"discovery"}


@pytest.mark.parametrize("verb", VERBS)
def test_each_missing_verb_stops_the_start_naming_it(verb: str, tmp_path: Path) -> None:
    sim, kubeconfig = start_simulator(role_without(verb), tmp_path)
    try:
        settings = Settings.from_properties(properties(kubeconfig))
        with pytest.raises(MissingPermissions) as caught:
            connect(settings)
        assert caught.value.missing == (verb,)
        assert f"refused {verb} on resource pods in namespace 'spark'" in str(caught.value)
        assert app_pods(sim) == []
    finally:
        sim.close()


def test_a_role_missing_verbs_fails_serve_at_start_up_with_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim, kubeconfig = start_simulator(role_without("watch", "deletecollection"), tmp_path)
    try:
        argv = ["serve", "--app-id", APP, "--kubeconfig", str(kubeconfig)]
        argv += ["--namespace", NAMESPACE, "--image", "x", "--listen", "127.0.0.1:0"]
        assert main(argv, environ={}) == 1
        err = capsys.readouterr().err
        assert "execpods-sidecar: error: the Kubernetes API refused watch, deletecollection" in err
        assert "on resource pods in namespace 'spark'" in err
        assert "deploy/rbac.yaml" in err
        assert 'cannot watch resource "pods"' in err  # the API's own words follow
        # The probes changed nothing: every write was a dry run, and no pod was made.
        writes = [r for r in sim.requests() if r.verb in ("create", "patch", "delete")]
        writes += [r for r in sim.requests() if r.verb == "deletecollection"]
        assert writes
        assert all(r.query.get("dryRun") == "All" for r in writes)
        assert [p["metadata"]["name"] for p in sim.pods(NAMESPACE)] == ["spark-driver"]
    finally:
        sim.close()
