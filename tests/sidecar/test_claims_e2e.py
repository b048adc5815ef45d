"""OnDemand claims end to end: a sidecar over real HTTP to the simulator, driven over real gRPC.

Each executor gets a claim of its own, owned by the driver pod and bound by the simulated
provisioner; a lost executor's claim goes to its replacement (Spark's reuse); stopping the sidecar
leaves no claim behind.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from execpods.client import AllocatorClient
from execpods.kubesim import KubeSim
from execpods.kubesim.claims import WAIT_FOR_FIRST_CONSUMER_CLASS

from tests.sidecar.conftest import SidecarFactory, running_ids, wait_for

VOLUME = "spark.kubernetes.executor.volumes.persistentVolumeClaim.spark-local-dir-1"
ON_DEMAND = {
    f"{VOLUME}.mount.path": "/data",
    f"{VOLUME}.options.claimName": "OnDemand",
    f"{VOLUME}.options.storageClass": "standard",
    f"{VOLUME}.options.sizeLimit": "1Gi",
    "spark.kubernetes.driver.pod.name": "driver",
    "spark.kubernetes.executor.apiPollingInterval": "100ms",
    # Spark reuses only claims older than the pod creation timeout (issue 33 M4): 1 s here.
    "spark.kubernetes.allocation.batch.delay": "150ms",
    "spark.kubernetes.allocation.executor.timeout": "1s",
}


def _driver(sim: KubeSim) -> Any:
    return sim.create_pod(
        {
            "metadata": {"name": "driver"},
            "spec": {"containers": [{"name": "driver", "image": "spark:4.3.0"}]},
        }
    )


def _claims(sim: KubeSim, app_id: str) -> dict[str, Any]:
    return {
        c["metadata"]["name"]: c
        for c in sim.objects("persistentvolumeclaims")
        if c["metadata"]["labels"].get("spark-app-selector") == app_id
    }


def _age(sim: KubeSim, claim: str) -> float:
    """Seconds since the claim was created, on the simulator's clock."""
    (found,) = [c for c in sim.objects("persistentvolumeclaims") if c["metadata"]["name"] == claim]
    created = datetime.fromisoformat(str(found["metadata"]["creationTimestamp"]))
    return sim.now() - created.timestamp()


def _claim_of(sim: KubeSim, pod_name: str) -> str:
    pod: Any = sim.pod(pod_name)
    assert pod is not None
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "spark-local-dir-1"]
    return str(volume["persistentVolumeClaim"]["claimName"])


def test_on_demand_claims_per_executor_reused_after_a_loss_and_deleted_on_stop(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    driver = _driver(sim)
    sidecar = make_sidecar("pvc", conf=ON_DEMAND)
    with AllocatorClient(sidecar.address) as client:
        client.request_total(2)
        wait_for(lambda: running_ids(sim, "pvc") == {1, 2}, what="two running executors")
        claims = _claims(sim, "pvc")
        assert sorted(claims) == ["pvc-exec-1-pvc-0", "pvc-exec-2-pvc-0"]
        for executor_id in (1, 2):
            name = _claim_of(sim, f"pvc-exec-{executor_id}")
            assert name == f"pvc-exec-{executor_id}-pvc-0"
            claim = claims[name]
            assert claim["status"]["phase"] == "Bound"
            assert claim["spec"]["storageClassName"] == "standard"
            assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
            (owner,) = claim["metadata"]["ownerReferences"]
            assert owner["uid"] == driver["metadata"]["uid"]
        # Executor 1 is lost; once its pod is gone, the executor that replaces it takes its
        # claim over instead of making one (a pod still listed, even failed, keeps its claim).
        client.request_total(1)
        assert client.kill_executors([1]) == 1
        wait_for(lambda: sim.pod("pvc-exec-1") is None, what="executor 1's pod gone")

        def seen_gone() -> bool:
            state = sidecar.runtime.backend.current_snapshot.executor_pods.get(1)
            return state is None or state.pod.gone

        wait_for(seen_gone, what="the sidecar to see executor 1's pod gone")
        wait_for(lambda: _age(sim, "pvc-exec-1-pvc-0") > 1.0, what="the claim past 1 s")
        client.request_total(2)
        wait_for(lambda: 3 in running_ids(sim, "pvc"), what="a replacement running")
        assert _claim_of(sim, "pvc-exec-3") == "pvc-exec-1-pvc-0"
        assert sorted(_claims(sim, "pvc")) == ["pvc-exec-1-pvc-0", "pvc-exec-2-pvc-0"]
        # An executor that dies while its pod is still listed: its replacement makes a claim.
        sim.oom_kill("pvc-exec-2")
        wait_for(lambda: 4 in running_ids(sim, "pvc"), what="executor 2's replacement")
        assert _claim_of(sim, "pvc-exec-4") in ("pvc-exec-2-pvc-0", "pvc-exec-4-pvc-0")
    sidecar.stop()
    assert _claims(sim, "pvc") == {}


def test_wait_for_first_consumer_claims_bind_on_their_executors_nodes(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    _driver(sim)
    conf = {**ON_DEMAND, f"{VOLUME}.options.storageClass": WAIT_FOR_FIRST_CONSUMER_CLASS}
    sidecar = make_sidecar("wffc", conf=conf)
    with AllocatorClient(sidecar.address) as client:
        client.request_total(2)
        wait_for(lambda: running_ids(sim, "wffc") == {1, 2}, what="two running executors")
        claims = _claims(sim, "wffc")
        for executor_id in (1, 2):
            pod: Any = sim.pod(f"wffc-exec-{executor_id}")
            claim = claims[_claim_of(sim, f"wffc-exec-{executor_id}")]
            assert claim["status"]["phase"] == "Bound"
            selected = claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
            assert selected == pod["spec"]["nodeName"]
