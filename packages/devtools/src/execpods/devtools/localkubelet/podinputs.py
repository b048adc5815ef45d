"""What a pod's containers are given: its volumes as folders (Secrets and ConfigMaps read
through the API, projected tokens, the service account's token, CA and namespace), the downward
API's fields, environment variables as the kubelet resolves them, and the /etc/hosts that names
the pod, the `kubernetes` Service and the Services selecting the pod (cluster DNS)."""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

from execpods.devtools.localkubelet.apiclient import Api, ApiFailed
from execpods.devtools.localkubelet.container import expand

__all__ = ["POD_IP", "PodInputs"]

_log = logging.getLogger(__name__)
Obj = dict[str, Any]
POD_IP = "127.0.0.1"


class PodInputs:
    """The inputs of one pod's containers (pod.py runs them)."""

    def __init__(
        self,
        *,
        api: Api,
        pod: Obj,
        folder: Path,
        ca_file: Path,
        token: str,
        stopped: threading.Event,
    ) -> None:
        self.api = api
        self.pod = pod
        self.namespace: str = pod["metadata"]["namespace"]
        self.name: str = pod["metadata"]["name"]
        self.folder = folder
        self._ca_file = ca_file
        self._token = token
        self._deleted = stopped

    def _read(self, kind: str, name: str) -> Obj:
        got: Obj = self.api.get(f"/api/v1/namespaces/{self.namespace}/{kind}/{name}")
        return got

    @staticmethod
    def _object_files(obj: Obj, items: list[Obj] | None, *, secret: bool) -> dict[str, bytes]:
        data = {
            k: (base64.b64decode(v) if secret else str(v).encode())
            for k, v in (obj.get("data") or {}).items()
        }
        data |= {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
        if items:
            return {i["path"]: data[i["key"]] for i in items if i["key"] in data}
        return data

    def _source_files(self, source: Obj) -> dict[str, bytes]:
        if "secret" in source:
            ref = source["secret"]
            secret = self._read("secrets", ref.get("secretName") or ref["name"])
            return self._object_files(secret, ref.get("items"), secret=True)
        if "configMap" in source:
            ref = source["configMap"]
            return self._object_files(
                self._read("configmaps", ref["name"]), ref.get("items"), secret=False
            )
        if "serviceAccountToken" in source:
            return {source["serviceAccountToken"].get("path", "token"): self._token.encode()}
        if "downwardAPI" in source:
            return {
                item["path"]: self.field(item["fieldRef"]["fieldPath"]).encode()
                for item in source["downwardAPI"].get("items") or []
                if "fieldRef" in item
            }
        return {}

    def _volume(self, volume: Obj) -> Path:
        where: Path = self.folder / "volumes" / str(volume["name"])
        where.mkdir(parents=True, exist_ok=True)
        files: dict[str, bytes] = {}
        if "projected" in volume:
            for source in volume["projected"].get("sources") or []:
                files |= self._source_files(source)
        elif not ("emptyDir" in volume or "hostPath" in volume):
            files = self._source_files(volume)
        for path, content in files.items():
            target = where / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return where

    def volumes(self) -> dict[str, Path]:
        """Every volume's folder; a missing Secret or ConfigMap is waited for (FailedMount)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return {v["name"]: self._volume(v) for v in self.pod["spec"].get("volumes") or []}
            except ApiFailed as exc:
                if exc.status != 404 or time.monotonic() > deadline or self._deleted.is_set():
                    raise
                _log.info(
                    "pod %s/%s: a volume's source is missing (%s)", self.namespace, self.name, exc
                )
                self._deleted.wait(1.0)

    def service_account(self) -> Path:
        where = self.folder / "volumes" / "kube-api-access"
        where.mkdir(parents=True, exist_ok=True)
        (where / "token").write_text(self._token)
        (where / "ca.crt").write_bytes(self._ca_file.read_bytes())
        (where / "namespace").write_text(self.namespace)
        return where

    def field(self, path: str) -> str:
        meta = self.pod["metadata"]
        if path.startswith(("metadata.labels['", "metadata.annotations['")):
            which, key = path.split("['", 1)
            return str((meta.get(which.split(".")[1]) or {}).get(key.rstrip("']"), ""))
        values = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta.get("uid", ""),
            "spec.nodeName": self.pod["spec"].get("nodeName", ""),
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": POD_IP,
            "status.podIPs": POD_IP,
            "status.hostIP": POD_IP,
            "status.hostIPs": POD_IP,
        }
        return str(values.get(path, ""))

    def env(self, container: Obj, image_env: dict[str, str]) -> dict[str, str]:
        env: dict[str, str] = {"HOSTNAME": self.name, "HOME": "/root", **image_env}
        env |= {"KUBERNETES_SERVICE_HOST": POD_IP, "KUBERNETES_SERVICE_PORT": "443"}
        env |= {"KUBERNETES_SERVICE_PORT_HTTPS": "443"}
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if ref := source.get("configMapRef"):
                data = self._read("configmaps", ref["name"]).get("data") or {}
                env |= {prefix + k: str(v) for k, v in data.items()}
            elif ref := source.get("secretRef"):
                data = self._read("secrets", ref["name"]).get("data") or {}
                env |= {prefix + k: base64.b64decode(v).decode() for k, v in data.items()}
        for var in container.get("env") or []:
            name = var["name"]
            if "value" in var:
                env[name] = expand(str(var["value"]), env)
                continue
            source = var.get("valueFrom") or {}
            if ref := source.get("fieldRef"):
                env[name] = self.field(ref["fieldPath"])
            elif ref := source.get("secretKeyRef"):
                data = self._read("secrets", ref["name"]).get("data") or {}
                env[name] = base64.b64decode(data.get(ref["key"], "")).decode()
            elif ref := source.get("configMapKeyRef"):
                env[name] = str(
                    (self._read("configmaps", ref["name"]).get("data") or {}).get(ref["key"], "")
                )
            elif ref := source.get("resourceFieldRef"):
                limits = (container.get("resources") or {}).get("limits") or {}
                env[name] = str(limits.get(ref["resource"].split(".", 1)[-1], "0"))
        return env

    def hosts(self) -> str:
        names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"]
        names.append("kubernetes.default.svc.cluster.local")
        lines = ["127.0.0.1 localhost", f"{POD_IP} {self.name}", f"{POD_IP} {' '.join(names)}"]
        labels = self.pod["metadata"].get("labels") or {}
        # Cluster DNS for the Services that select this pod (Spark's driver Service).
        with contextlib.suppress(ApiFailed):
            services = self.api.get(f"/api/v1/namespaces/{self.namespace}/services")["items"]
            for svc in services:
                selector = (svc.get("spec") or {}).get("selector") or {}
                if selector and all(labels.get(k) == v for k, v in selector.items()):
                    n, ns = svc["metadata"]["name"], self.namespace
                    lines.append(f"{POD_IP} {n} {n}.{ns} {n}.{ns}.svc {n}.{ns}.svc.cluster.local")
        return "\n".join(lines) + "\n"
