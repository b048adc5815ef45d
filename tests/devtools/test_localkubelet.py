"""The local kubelet on kubesim: a pod naming its scheduler is bound to its node and its
containers run as processes, in the pod's own network, with its volumes, environment and the
in-cluster API (`https://kubernetes.default.svc`, the service account's token and CA).

kubesim leaves such a pod to it, as kube-scheduler leaves another scheduler's pods. The real
cluster-mode run is tests/spark/test_spark_cluster_mode.py; these are the kubelet's own rules,
with small Python containers (about 3 s).
"""

from __future__ import annotations

import base64
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from execpods.devtools.localkubelet import SCHEDULER_NAME, LocalKubelet, missing_tools
from execpods.devtools.localkubelet.apiclient import Api
from execpods.devtools.localkubelet.container import ContainerSpec, command_line, expand
from execpods.devtools.localkubelet.images import ImageCatalogue
from execpods.kubesim import KubeSim

from tests.kubesim.support import raw
from tests.sidecar.conftest import FAST_CLUSTER, wait_for

NS = "apps"
IMAGE = "execpods/sidecar:0.2.0"
needs_namespaces = pytest.mark.skipif(
    bool(missing_tools()), reason=f"the local kubelet needs {missing_tools()}"
)

# The main container: checks what the kubelet gave it, then asks the API about its own pod.
CHECK = textwrap.dedent(
    """
    import json, os, socket, ssl, urllib.request
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert open("/opt/shared/init").read() == "from init\\n"
    assert open("/run/conf/token").read() == "s3cret"
    assert os.environ["POD"] == socket.gethostname() == "worker"
    assert os.environ["APP"] == "demo" and os.environ["FROM_CM"] == "blue"
    assert open(f"{sa}/namespace").read() == "apps"
    socket.create_connection(("127.0.0.1", 8081)).close()  # the sidecar, in the pod's network
    request = urllib.request.Request(
        "https://kubernetes.default.svc/api/v1/namespaces/apps/pods/worker",
        headers={"Authorization": "Bearer " + open(f"{sa}/token").read()},
    )
    context = ssl.create_default_context(cafile=f"{sa}/ca.crt")
    with urllib.request.urlopen(request, context=context) as answer:
        pod = json.load(answer)
    print("node", pod["spec"]["nodeName"], "phase", pod["status"]["phase"])
    """
)
SIDECAR = "import socket; s = socket.create_server(('127.0.0.1', 8081))\nwhile True: s.accept()"


def pod(image: str = IMAGE) -> dict[str, Any]:
    return {
        "metadata": {"name": "worker", "labels": {"app": "demo"}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "restartPolicy": "Never",
            "initContainers": [
                {
                    "name": "prepare",
                    "image": image,
                    "command": ["sh", "-c", "echo 'from init' > /opt/shared/init"],
                    "volumeMounts": [{"name": "shared", "mountPath": "/opt/shared"}],
                },
                {
                    "name": "sidecar",
                    "image": image,
                    "restartPolicy": "Always",
                    "command": ["python3", "-c", SIDECAR],
                    "startupProbe": {"tcpSocket": {"port": 8081}, "periodSeconds": 1},
                },
            ],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": ["python3", "-c", CHECK],
                    "env": [
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {
                            "name": "APP",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}},
                        },
                        {
                            "name": "FROM_CM",
                            "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "colour"}},
                        },
                    ],
                    "volumeMounts": [
                        {"name": "shared", "mountPath": "/opt/shared"},
                        {"name": "conf", "mountPath": "/var/run/conf", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "shared", "emptyDir": {}},
                {"name": "conf", "secret": {"secretName": "creds"}},
            ],
        },
    }


def _phase(sim: KubeSim) -> str | None:
    found = sim.pod("worker", NS)
    return None if found is None else found["status"].get("phase")


def _objects(sim: KubeSim) -> None:
    """The Secret and ConfigMap the pod reads."""
    secret = {"token": base64.b64encode(b"s3cret").decode()}
    sim.object_apis["secrets"].create(NS, {"metadata": {"name": "creds"}, "data": secret})
    settings = {"metadata": {"name": "settings"}, "data": {"colour": "blue"}}
    sim.object_apis["configmaps"].create(NS, settings)


@needs_namespaces
def test_a_pod_naming_the_local_scheduler_runs_as_processes_in_its_own_network() -> None:
    with KubeSim(cluster=FAST_CLUSTER, namespaces=[NS]) as sim:
        _objects(sim)
        with LocalKubelet(Api(api_url=sim.url), images=ImageCatalogue()) as kubelet:
            sim.create_pod(pod(), namespace=NS)
            phase = wait_for(
                lambda: _phase(sim) in ("Succeeded", "Failed") and _phase(sim), timeout=60
            )
            folder = kubelet.pod_folder(NS, "worker")
            assert folder is not None
            log = (folder / "logs" / "main.log").read_text()
            assert phase == "Succeeded", log
            assert log.strip() == f"node {SCHEDULER_NAME} phase Running"
            done = sim.pod("worker", NS)
            assert done is not None
            init, sidecar = done["status"]["initContainerStatuses"]
            assert init["state"]["terminated"]["exitCode"] == 0
            # The native sidecar was stopped (SIGTERM) once the main container had exited.
            assert sidecar["state"]["terminated"]["exitCode"] == 128 + 15
            (main,) = done["status"]["containerStatuses"]
            assert set(main["state"]) == {"terminated"}
            assert main["state"]["terminated"]["reason"] == "Completed"


@needs_namespaces
def test_an_image_the_kubelet_cannot_run_fails_the_pod() -> None:
    with KubeSim(cluster=FAST_CLUSTER, namespaces=[NS]) as sim, LocalKubelet(Api(api_url=sim.url)):
        _objects(sim)
        sim.create_pod(pod(image="registry.example/unknown:1"), namespace=NS)
        assert wait_for(lambda: _phase(sim) == "Failed", timeout=30)
        failed = sim.pod("worker", NS)
        assert failed is not None
        first = failed["status"]["initContainerStatuses"][0]
        assert first["state"]["terminated"]["reason"] == "ErrImagePull"


def test_kubesim_leaves_another_schedulers_pod_to_it() -> None:
    with KubeSim(cluster=FAST_CLUSTER, namespaces=[NS]) as sim:
        sim.create_pod(pod(), namespace=NS)
        sim.create_pod(
            {
                **pod(),
                "metadata": {"name": "plain"},
                "spec": {**pod()["spec"], "schedulerName": "default-scheduler"},
            },
            namespace=NS,
        )
        wait_for(lambda: (p := sim.pod("plain", NS)) and p["spec"].get("nodeName"))
        waiting = sim.pod("worker", NS)
        assert waiting is not None
        assert "nodeName" not in waiting["spec"]
        assert waiting["status"]["phase"] == "Pending"
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "worker"}}
        binding["target"] = {"kind": "Node", "name": "elsewhere"}
        code, _ = raw(sim, "POST", f"/api/v1/namespaces/{NS}/pods/worker/binding", binding)
        assert code == 201
        bound = sim.pod("worker", NS)
        assert bound is not None
        assert bound["spec"]["nodeName"] == "elsewhere"
        code, again = raw(sim, "POST", f"/api/v1/namespaces/{NS}/pods/worker/binding", binding)
        assert code == 409
        assert 'already assigned to node "elsewhere"' in again["message"]


def test_command_and_args_follow_the_kubelets_rules() -> None:
    image = ImageCatalogue().resolve("apache/spark:4.3.0")
    assert image is not None
    assert image.entrypoint == ("/opt/entrypoint.sh",)

    def argv(container: dict[str, Any]) -> list[str]:
        spec = ContainerSpec(container=container, image=image, env={"X": "1"}, mounts={}, hosts="")
        return command_line(spec)

    assert argv({"args": ["driver", "$(X)"]}) == ["/opt/entrypoint.sh", "driver", "1"]
    assert argv({"command": ["sh"]}) == ["sh"]
    assert argv({"command": ["sh"], "args": ["-c", "$$(X)"]}) == ["sh", "-c", "$(X)"]
    assert expand("$(MISSING)", {}) == "$(MISSING)"
    assert ImageCatalogue().resolve("busybox:1") is None
    # A Spark image built from integrations/spark/Containerfile has the plugin in its jars.
    jar = Path("/built/execpods-spark.jar")
    with_plugin = ImageCatalogue(plugin_jar=jar).resolve(
        "registry.example.com/execpods/spark:4.3.0"
    )
    assert with_plugin is not None
    assert with_plugin.links.get("/opt/spark/jars/execpods-spark.jar") == jar
    assert "/opt/spark/jars/execpods-spark.jar" not in image.links
    assert ImageCatalogue().resolve("my.registry:5000/execpods/sidecar:0.2.0") is not None


@needs_namespaces
def test_a_deleted_pod_is_stopped_within_its_grace_period_and_removed() -> None:
    """A graceful delete reaches the local kubelet: SIGTERM to the containers, the pod's final
    status, then the delete with grace 0 that removes it (as a kubelet does)."""
    sleeper: dict[str, Any] = {
        "metadata": {"name": "sleeper"},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "600"]}],
        },
    }
    with (
        KubeSim(cluster=FAST_CLUSTER, namespaces=[NS]) as sim,
        LocalKubelet(Api(api_url=sim.url)),
    ):
        sim.create_pod(sleeper, namespace=NS)
        wait_for(lambda: (p := sim.pod("sleeper", NS)) and p["status"].get("phase") == "Running")
        started = time.monotonic()
        code, deleting = raw(sim, "DELETE", f"/api/v1/namespaces/{NS}/pods/sleeper")
        assert code == 200
        assert deleting["metadata"]["deletionTimestamp"]
        wait_for(lambda: sim.pod("sleeper", NS) is None, timeout=30)
        assert time.monotonic() - started < 5  # SIGTERM ends sleep at once: no grace to wait out
