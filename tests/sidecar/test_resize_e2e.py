"""In-place resize through the sidecar (issue 33 item 4), over real HTTP to kubesim: Spark's
ExecutorResizePlugin cannot run through the execpods plugin, so the sidecar does its job, with
its settings, for any driver (here a gRPC one). The resize is a feature of the backend, over the
counted resize calls: it is in `execpods_pods_resized_total` (issue 28)."""

from __future__ import annotations

from typing import Any

from execpods.client import AllocatorClient
from execpods.k8s.resize import quantity_bytes
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import SidecarFactory, app_pods, running_ids, wait_for
from tests.sidecar.test_observability import METRICS_CONF, scrape, value

EXECUTOR = "spark-kubernetes-executor"


def _memory(pod: Any, part: str) -> int:
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == EXECUTOR]
    value = quantity_bytes(container["resources"][part]["memory"])
    assert value is not None
    return value


def test_an_executor_over_the_threshold_is_resized_in_place(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar(
        "grow",
        conf={
            "execpods.executor.resize.enabled": "true",
            "spark.kubernetes.executor.resizeInterval": "200ms",
            "spark.executor.memory": "1g",
            **METRICS_CONF,
        },
    )
    with AllocatorClient(sidecar.address) as client:
        client.request_total(2)
        wait_for(lambda: len(running_ids(sim, "grow")) == 2, what="two running")
        pods = {p["metadata"]["labels"]["spark-exec-id"]: p for p in app_pods(sim, "grow")}
        limit = _memory(pods["1"], "limits")
        sim.set_usage(pods["1"]["metadata"]["name"], memory=str(int(limit * 0.95)))
        sim.set_usage(pods["2"]["metadata"]["name"], memory=str(int(limit * 0.5)))
        grown = int(limit * 1.1)

        def resized() -> Any:
            pod: Any = sim.pod(pods["1"]["metadata"]["name"])
            statuses = pod["status"].get("containerStatuses") or []
            actual = [s.get("resources") or {} for s in statuses if s["name"] == EXECUTOR]
            limits = actual[0].get("limits", {}) if actual else {}
            return pod if quantity_bytes(limits.get("memory", "0")) == grown else None

        pod = wait_for(resized, what="executor 1 resized and actuated")
        assert _memory(pod, "requests") == grown, "limit and request together, as Spark"
        (status,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == EXECUTOR]
        assert quantity_bytes(status["resources"]["limits"]["memory"]) == grown
        assert pod["status"]["phase"] == "Running", "in place: the executor kept running"
        other: Any = sim.pod(pods["2"]["metadata"]["name"])
        assert _memory(other, "limits") == limit, "under the threshold: untouched"
        counted = value(scrape(sidecar.server.ops.metrics_address), "execpods_pods_resized_total")
        assert counted == 1, "the resize went through the counted operations"
    resizes = [r for r in sim.requests() if r.path.endswith("/resize")]
    assert len(resizes) == 1, "once: at its new limit it is under the threshold"
    assert resizes[0].verb == "patch"
