"""kubesim stores a pod as kube-apiserver stores it: the same pods created on both, compared.

The pods are the shipped overlays' (the client-mode driver pod, the cluster-mode driver pod
template as Spark fills it in) and one using every other defaulted field (HTTP probes and hooks,
ports, downward API, limits without requests, every volume kind with a default). The reference is
the real kube-apiserver built from source (the real-server tier's `real_server` fixture); without
it the test is skipped. The one difference allowed is the service account token volume
(`kube-api-access-*`) that the ServiceAccount admission plugin mounts and kubesim does not.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import orjson
import pytest
import yaml
from execpods.kubesim import KubeSim

ROOT = Path(__file__).resolve().parents[2]
TOKEN_VOLUME = "kube-api-access-"

EVERY_DEFAULT: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "every-default"},
    "spec": {
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "ports": [{"containerPort": 80}],
                "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                "livenessProbe": {"httpGet": {"port": 80}},
                "readinessProbe": {"grpc": {"port": 81}, "periodSeconds": 2},
                "lifecycle": {"preStop": {"httpGet": {"port": 80}}},
            }
        ],
        "volumes": [
            {"name": "e"},
            {"name": "cm", "configMap": {"name": "x"}},
            {
                "name": "p",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "t"}},
                        {
                            "downwardAPI": {
                                "items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]
                            }
                        },
                    ]
                },
            },
            {"name": "h", "hostPath": {"path": "/tmp"}},
            {
                "name": "eph",
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                        }
                    }
                },
            },
        ],
    },
}


def pods() -> list[dict[str, Any]]:
    client_mode = ROOT / "deploy" / "overlays" / "client-mode" / "driver-pod.yaml"
    driver = next(d for d in yaml.safe_load_all(client_mode.read_text(encoding="utf-8")) if d)
    driver["metadata"].pop("namespace", None)
    template = ROOT / "deploy" / "overlays" / "cluster-mode" / "driver-pod-template.yaml"
    cluster_mode = yaml.safe_load(template.read_text(encoding="utf-8"))
    cluster_mode["metadata"]["name"] = "spark-pi-driver"
    cluster_mode["spec"]["containers"][0]["image"] = "apache/spark:4.3.0"
    return [driver, cluster_mode, copy.deepcopy(EVERY_DEFAULT)]


def stored(api: Any, namespace: str) -> dict[str, dict[str, Any]]:
    """Create the pods (in a namespace of their own, with the drivers' service account) and
    return the specs the server answered with."""
    api.create_namespace({"metadata": {"name": namespace}})
    api.create_namespaced_service_account(namespace, {"metadata": {"name": "spark-driver"}})
    specs = {}
    for pod in pods():
        answer = api.create_namespaced_pod(namespace, pod, _preload_content=False)
        spec = orjson.loads(answer.data)["spec"]
        spec.pop("nodeName", None)  # kubesim schedules; the real tier runs no scheduler
        specs[pod["metadata"]["name"]] = spec
    return specs


def without_token_volume(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    spec["volumes"] = [v for v in spec["volumes"] if not v["name"].startswith(TOKEN_VOLUME)]
    for field in ("initContainers", "containers"):
        for container in spec.get(field, []):
            mounts = [
                m
                for m in container.get("volumeMounts", [])
                if not m["name"].startswith(TOKEN_VOLUME)
            ]
            if mounts:
                container["volumeMounts"] = mounts
            else:
                container.pop("volumeMounts", None)
    return spec


@pytest.mark.real_server
def test_pods_are_stored_with_the_fields_kube_apiserver_fills_in(
    request: pytest.FixtureRequest,
) -> None:
    try:
        server = request.getfixturevalue("real_server")
    except pytest.FixtureLookupError:
        pytest.skip("the real-server tier (fixture real_server) is not in this checkout")
    configuration = k8s.Configuration(host=server.url)
    configuration.ssl_ca_cert = str(server.ca_path)
    configuration.api_key = {"BearerToken": f"Bearer {server.token}"}
    with k8s.ApiClient(configuration) as real_client, KubeSim() as sim:
        namespace = f"defaults-{uuid.uuid4().hex[:8]}"  # the real server is the session's
        real = stored(k8s.CoreV1Api(real_client), namespace)
        with k8s.ApiClient(k8s.Configuration(host=sim.url)) as sim_client:
            simulated = stored(k8s.CoreV1Api(sim_client), namespace)
    for name, spec in real.items():
        assert simulated[name] == without_token_volume(spec), name
