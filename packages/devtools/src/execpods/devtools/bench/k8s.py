"""Benchmark: watch ingest (API event -> store update), raw-JSON path vs the client's model path,
side by side in one run on the simulator; and the conversion of a 10,000-pod list.

    .venv/bin/python -m execpods.devtools.bench.k8s [--events 10000] [--pods 10000]
        [--model-pods 2000]

The raw path is the adapter's `WatchSource`, started as in production (list, then watch): its
store holds the first event back while the events are made (pods created and started in the
simulator), so they queue up on the open watch, and the clock runs from releasing it to the store
holding the last update. The model path is what the client offers: `kubernetes.watch.Watch` from
the version before the same events (the simulator keeps them in its event window), deserialising
each event into a `V1Pod`, then converted to the core's pod; its clock runs from opening the
watch to the last update.

It lives in the dev-only `execpods-devtools`, so the adapter itself never imports the simulator.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
from collections.abc import Iterable
from typing import Any

import kubernetes.client
import kubernetes.watch
import orjson
from execpods import kubesim
from execpods.core import (
    SPARK_LABELS,
    DeterministicScheduler,
    ExecutorPod,
    PodSelector,
)
from execpods.core.compose import scheduled_store
from execpods.core.ports import ListMark
from execpods.core.testing import composed_store
from execpods.k8s.builder import ExecutorPodTemplateBuilder
from execpods.k8s.cluster import connect
from execpods.k8s.convert import pod_from_dict, pods_from_list_json
from execpods.k8s.gateway import ApiGateway
from execpods.k8s.operations import KubernetesPodOperations
from execpods.k8s.settings import KubernetesSettings
from execpods.k8s.watch import WatchSource

APP_ID = "bench-app"


def pod_from_model(model: object, api_client: Any) -> ExecutorPod | None:
    """The client-model path (`V1Pod` -> ExecutorPod) the adapter replaced, kept here only for
    the benchmark's comparison with the raw path."""
    raw: object = api_client.sanitize_for_serialization(model)
    return pod_from_dict(raw)


SELECTOR = PodSelector.executors_of(SPARK_LABELS, APP_ID).label_selector()


class CountingStore:
    """The write side of a real store (a backend's, composed and not started) that signals when it
    has taken `target` updates.

    With `hold`, the first update waits for `release()`: the watch that delivers it stops reading,
    so later events queue up on the open watch instead of trickling in as they are made.
    """

    def __init__(self, target: int, *, hold: bool = False) -> None:
        self._store = composed_store(scheduled_store(DeterministicScheduler()))
        self.count = 0
        self.target = target
        self.done = threading.Event()
        self.listed = threading.Event()
        self._released = threading.Event()
        if not hold:
            self._released.set()

    def release(self) -> None:
        self._released.set()

    def begin_list(self) -> ListMark:
        return self._store.begin_list()

    def replace_snapshot(
        self, pods: Iterable[ExecutorPod], *, since: ListMark | None = None
    ) -> None:
        self._store.replace_snapshot(pods, since=since)
        self.listed.set()

    def update_pod(self, pod: ExecutorPod) -> None:
        self._released.wait()
        self._store.update_pod(pod)
        self.count += 1
        if self.count >= self.target:
            self.done.set()


# The shape of a real Spark executor pod (what Spark's KubernetesExecutorBuilder makes, plus the
# defaults the API server adds): the model path's cost grows with every field, the raw path's
# barely, so a one-container toy pod would understate the difference users see.
SPARK_EXECUTOR_TEMPLATE: dict[str, Any] = {
    "metadata": {
        "annotations": {"spark.executor.memory": "4g", "prometheus.io/scrape": "true"},
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": f"{APP_ID}-driver",
                "uid": "5f1c3c9e-6a0e-4d47-9a37-7b2f1f0e9d11",
                "controller": True,
            }
        ],
    },
    "spec": {
        "restartPolicy": "Never",
        "hostname": "executor",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "spark",
        "nodeSelector": {"workload": "spark"},
        "tolerations": [
            {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ],
        "securityContext": {"fsGroup": 185},
        "volumes": [
            {"name": "spark-local-dir-1", "emptyDir": {}},
            {"name": "spark-conf-volume-exec", "configMap": {"name": "spark-exec-conf"}},
        ],
        "containers": [
            {
                "name": "spark-kubernetes-executor",
                "image": "apache/spark:3.5.1",
                "imagePullPolicy": "IfNotPresent",
                "args": ["executor"],
                "ports": [{"name": "blockmanager", "containerPort": 7079, "protocol": "TCP"}],
                "env": [
                    {"name": "SPARK_USER", "value": "spark"},
                    {"name": "SPARK_DRIVER_URL", "value": "spark://CoarseGrainedScheduler@d:7078"},
                    {"name": "SPARK_EXECUTOR_CORES", "value": "4"},
                    {"name": "SPARK_EXECUTOR_MEMORY", "value": "4g"},
                    {"name": "SPARK_RESOURCE_PROFILE_ID", "value": "0"},
                    {"name": "SPARK_CONF_DIR", "value": "/opt/spark/conf"},
                    {"name": "SPARK_LOCAL_DIRS", "value": "/var/data/spark-local-dir-1"},
                    {"name": "SPARK_JAVA_OPT_0", "value": "-Dspark.driver.port=7078"},
                    {"name": "SPARK_JAVA_OPT_1", "value": "-Dspark.driver.blockManager.port=7079"},
                    {
                        "name": "SPARK_EXECUTOR_POD_IP",
                        "valueFrom": {
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}
                        },
                    },
                    {
                        "name": "SPARK_EXECUTOR_POD_NAME",
                        "valueFrom": {
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}
                        },
                    },
                ],
                "resources": {
                    "requests": {"cpu": "4", "memory": "4505Mi"},
                    "limits": {"cpu": "4", "memory": "4505Mi"},
                },
                "volumeMounts": [
                    {"name": "spark-local-dir-1", "mountPath": "/var/data/spark-local-dir-1"},
                    {"name": "spark-conf-volume-exec", "mountPath": "/opt/spark/conf"},
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        ],
    },
}


def executor_manifest(executor_id: int) -> dict[str, Any]:
    return ExecutorPodTemplateBuilder(
        settings=KubernetesSettings(), namespace="default", template=SPARK_EXECUTOR_TEMPLATE
    ).build(executor_id=executor_id, app_id=APP_ID)


def make_events(sim: Any, count: int, first_id: int) -> tuple[str, int]:
    """Create and start pods until about `count` events exist; (version before, events made)."""
    before = int(sim.resource_version)
    executor_id = first_id
    while int(sim.resource_version) - before < count:
        sim.create_pod(executor_manifest(executor_id))
        executor_id += 1
        if executor_id % 500 == 0:
            sim.run_until_idle()
    sim.run_until_idle()
    return str(before), int(sim.resource_version) - before


def raw_ingest(sim: Any, operations: KubernetesPodOperations, count: int) -> tuple[str, int, float]:
    """(version before the events, events made, events/s through a started `WatchSource`)."""
    store = CountingStore(2**62, hold=True)
    source = WatchSource(store, operations)
    source.start(APP_ID)
    try:
        if not (store.listed.wait(60) and sim.wait_for_watchers(1, timeout=60)):
            raise TimeoutError("the watch source did not list and watch within 60 s")
        version, events = make_events(sim, count, 0)
        store.target = events
        started = time.perf_counter()
        store.release()
        if not store.done.wait(600):
            raise TimeoutError(f"the watch took only {store.count} of {events} events in 600 s")
        elapsed = time.perf_counter() - started
    finally:
        store.release()
        source.stop()
    return version, events, store.count / elapsed


def model_ingest(api_client: Any, version: str, events: int) -> float:
    store = CountingStore(events)
    core = kubernetes.client.CoreV1Api(api_client)
    watch_module: Any = kubernetes.watch  # untyped: keep Any from spreading
    watcher: Any = watch_module.Watch()
    started = time.perf_counter()
    for event in watcher.stream(
        core.list_namespaced_pod,
        "default",
        label_selector=SELECTOR,
        resource_version=version,
        timeout_seconds=600,
    ):
        pod = pod_from_model(event["object"], api_client)
        if pod is not None:
            store.update_pod(pod)
        if store.count >= events:
            break
    elapsed = time.perf_counter() - started
    watcher.stop()
    return store.count / elapsed


def list_conversion(
    operations: KubernetesPodOperations, api_client: Any, model_pods: int
) -> dict[str, float]:
    response = operations.gateway.list_pods_raw(SELECTOR)
    convert = end_to_end = float("inf")
    for _ in range(3):  # best of three: the least disturbed run on a shared machine
        gc.collect()
        started = time.perf_counter()
        pods, _ = pods_from_list_json(response)
        convert = min(convert, time.perf_counter() - started)
        gc.collect()
        started = time.perf_counter()
        operations.list_with_version(SELECTOR)
        end_to_end = min(end_to_end, time.perf_counter() - started)
    items = orjson.loads(response)["items"][:model_pods]
    text = [orjson.dumps(item).decode() for item in items]
    started = time.perf_counter()
    for item in text:
        pod_from_model(api_client.deserialize(item, "V1Pod", "application/json"), api_client)
    model_per_pod = (time.perf_counter() - started) / max(1, len(text))
    return {
        "pods": float(len(pods)),
        "convert_s": convert,
        "list_s": end_to_end,
        "model_per_pod_ms": model_per_pod * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--model-pods", type=int, default=2_000)
    args = parser.parse_args()

    window = max(args.events, args.pods) * 4
    with kubesim.KubeSim(deterministic=True, event_window=window) as sim:
        api_client = connect(api_url=sim.url)
        # The ConfigMap the executors mount (Spark's driver makes it): without it they would
        # wait in ContainerCreating, as on a cluster, and the events measured would differ.
        core: Any = kubernetes.client.CoreV1Api(api_client)
        core.create_namespaced_config_map("default", {"metadata": {"name": "spark-exec-conf"}})
        operations = KubernetesPodOperations(ApiGateway(api_client, namespace="default"))
        version, events, raw = raw_ingest(sim, operations, args.events)
        model = model_ingest(api_client, version, events)
        print(f"watch ingest, {events} events (API event -> store update, one run):")
        print(f"  raw JSON path : {raw:10,.0f} events/s")
        print(f"  model path    : {model:10,.0f} events/s")
        print(f"  speed-up      : {raw / model:10.1f}x")
        existing = len(sim.pods())
        for executor_id in range(1_000_000, 1_000_000 + args.pods - existing):
            sim.create_pod(executor_manifest(executor_id))
        figures = list_conversion(operations, api_client, args.model_pods)
        print(f"list of {figures['pods']:,.0f} pods:")
        print(f"  raw JSON -> ExecutorPod conversion : {figures['convert_s']:.3f} s")
        print(f"  list over HTTP + conversion        : {figures['list_s']:.3f} s")
        print(f"  model path per pod                 : {figures['model_per_pod_ms']:.3f} ms")
        api_client.close()


if __name__ == "__main__":
    main()
