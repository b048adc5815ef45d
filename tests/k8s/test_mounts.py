"""Secrets and volumes from Spark's properties, on the executor container."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from execpods.core import SettingsError
from execpods.k8s import (
    KubernetesPodOperations,
    load_template,
)
from execpods.kubesim import KubeSim

from tests.k8s.conftest import built_executor_pod

VOLUMES = "spark.kubernetes.executor.volumes."
PROPERTIES = {
    "spark.kubernetes.executor.secrets.creds": "/etc/creds",
    "spark.kubernetes.executor.secretKeyRef.DB_PASSWORD": "creds:password",
    f"{VOLUMES}emptyDir.scratch.mount.path": "/scratch",
    f"{VOLUMES}emptyDir.scratch.options.medium": "Memory",
    f"{VOLUMES}emptyDir.scratch.options.sizeLimit": "1Gi",
    f"{VOLUMES}hostPath.logs.mount.path": "/logs",
    f"{VOLUMES}hostPath.logs.mount.readOnly": "true",
    f"{VOLUMES}hostPath.logs.options.path": "/var/log/spark",
    f"{VOLUMES}nfs.shared.mount.path": "/shared",
    f"{VOLUMES}nfs.shared.mount.subPath": "team",
    f"{VOLUMES}nfs.shared.options.path": "/exports",
    f"{VOLUMES}nfs.shared.options.server": "nfs.example.com",
    f"{VOLUMES}persistentVolumeClaim.data.mount.path": "/data",
    f"{VOLUMES}persistentVolumeClaim.data.options.claimName": "spark-data",
}


def build(properties: dict[str, str], template: dict[str, Any] | None = None) -> dict[str, Any]:
    return built_executor_pod(properties, template, executor_id=1)


def test_secrets_and_volumes_are_mounted_into_the_executor_container() -> None:
    pod = build(PROPERTIES)
    (container,) = pod["spec"]["containers"]
    assert {
        v["name"]: {k: x for k, x in v.items() if k != "name"} for v in pod["spec"]["volumes"]
    } == {
        "creds-volume": {"secret": {"secretName": "creds"}},
        "scratch": {"emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        "logs": {"hostPath": {"path": "/var/log/spark"}},
        "shared": {"nfs": {"path": "/exports", "server": "nfs.example.com"}},
        "data": {"persistentVolumeClaim": {"claimName": "spark-data", "readOnly": False}},
    }
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["creds-volume"] == {"name": "creds-volume", "mountPath": "/etc/creds"}
    assert mounts["logs"] == {"name": "logs", "mountPath": "/logs", "readOnly": True}
    assert mounts["shared"] == {
        "name": "shared",
        "mountPath": "/shared",
        "readOnly": False,
        "subPath": "team",
    }
    env = {e["name"]: e for e in container["env"]}
    assert env["DB_PASSWORD"] == {
        "name": "DB_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}},
    }
    assert env["SPARK_EXECUTOR_ID"]["value"] == "1"  # the builder's own env is still there


def test_a_template_keeps_its_own_volumes_and_the_executor_container_gets_the_mounts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(
        "spec:\n"
        "  volumes: [{name: own, emptyDir: {}}]\n"
        "  containers:\n"
        "  - {name: sidecar, image: side:1}\n"
        "  - name: spark-kubernetes-executor\n"
        "    volumeMounts: [{name: own, mountPath: /own}]\n",
        encoding="utf-8",
    )
    template = load_template(path)
    pod = build({"spark.kubernetes.executor.secrets.creds": "/etc/creds"}, template)
    sidecar, executor = pod["spec"]["containers"]
    assert "volumeMounts" not in sidecar
    assert [m["name"] for m in executor["volumeMounts"]] == ["own", "creds-volume"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["own", "creds-volume"]
    assert template["spec"]["volumes"] == [{"name": "own", "emptyDir": {}}]  # the file's, untouched


@pytest.mark.parametrize(
    ("properties", "words"),
    [
        ({f"{VOLUMES}emptyDir.x.options.medium": "Memory"}, "emptyDir.x.mount.path is required"),
        ({f"{VOLUMES}nfs.x.mount.path": "/x"}, "nfs.x.options.path is required"),
        ({f"{VOLUMES}Bad_Name.x.mount.path": "/x"}, "volume type 'Bad_Name'"),
        ({f"{VOLUMES}emptyDir.x.mount.where": "/x"}, "emptyDir volumes take mount.path"),
        ({f"{VOLUMES}emptyDir.x": "/x"}, "TYPE.NAME.mount.KEY"),
        ({f"{VOLUMES}emptyDir.X_1.mount.path": "/x"}, "DNS-1123 label"),
        ({"spark.kubernetes.executor.secretKeyRef.PW": "no-key"}, "use secret:key"),
        ({"spark.kubernetes.executor.secretKeyRef.1PW": "s:k"}, "environment variable name"),
        ({"spark.kubernetes.executor.secrets.Bad_Secret": "/x"}, "secret name"),
    ],
)
def test_a_mistake_is_refused_at_start_naming_the_property(
    properties: dict[str, str], words: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        build(properties)
    assert "spark.kubernetes.executor." in str(raised.value)
    assert words in str(raised.value)


def test_the_api_accepts_and_keeps_the_mounts(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    operations.create(build(PROPERTIES))
    created = sim.pod("app-exec-1")
    assert created is not None
    assert {v["name"] for v in created["spec"]["volumes"]} >= {"creds-volume", "data"}
    (container,) = created["spec"]["containers"]
    # volumeMounts is kept by the simulator, though not part of its typed Container.
    mounts = cast(list[dict[str, str]], dict(container).get("volumeMounts"))
    assert {m["mountPath"] for m in mounts} >= {"/etc/creds", "/data"}
