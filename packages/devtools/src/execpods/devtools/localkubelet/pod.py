"""One pod's life on the local kubelet, as the kubelet lives it, reported through `pods/status`.

Volumes are written (Secrets and ConfigMaps read through the API; the service account's token,
CA and namespace where the pod automounts them), the sandbox starts, then the init containers in
order: a regular one must exit 0; a native sidecar (`restartPolicy: Always`) must pass its
startup probe, and keeps running. Then the main containers. When every main container has
exited, the sidecars get SIGTERM in reverse order, and the pod ends `Succeeded` (all exited 0)
or `Failed`. A deletion stops everything within the grace period, then removes the pod.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from execpods.devtools.localkubelet.apiclient import Api, ApiFailed
from execpods.devtools.localkubelet.container import (
    ContainerError,
    ContainerSpec,
    expand,
    start_container,
)
from execpods.devtools.localkubelet.images import ImageCatalogue

__all__ = ["PodRunner"]

_log = logging.getLogger(__name__)
Obj = dict[str, Any]
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
POD_IP = "127.0.0.1"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Running:
    name: str
    image: str
    process: subprocess.Popen[bytes]
    started_at: str
    sidecar: bool
    ready: bool = False
    started: bool = False


@dataclass
class _Terminated:
    name: str
    image: str
    exit_code: int
    reason: str
    message: str = ""
    started_at: str = ""
    finished_at: str = field(default_factory=_now)


class PodRunner:
    """Runs one bound pod to its end (`run`, in a thread of its own); `delete` stops it."""

    def __init__(
        self,
        *,
        api: Api,
        pod: Obj,
        folder: Path,
        images: ImageCatalogue,
        api_socket: Any,
        ca_file: Path,
        token: str,
    ) -> None:
        self.api = api
        self.pod = pod
        meta = pod["metadata"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.folder = folder
        self.images = images
        self._serve_api = api_socket
        self._ca_file = ca_file
        self._token = token
        self._deleted = threading.Event()
        self._grace = 30.0
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}
        self._done: dict[str, _Terminated] = {}
        self._sandbox: subprocess.Popen[bytes] | None = None
        self.start_time = _now()

    # -- reporting ---------------------------------------------------------------------------

    def _status_of(self, name: str, image: str) -> Obj:
        if (r := self._running.get(name)) is not None:
            return {
                "name": name,
                "image": image,
                "imageID": image,
                "containerID": f"local://{r.process.pid}",
                "ready": r.ready,
                "started": r.started,
                "restartCount": 0,
                "state": {
                    "running": {"startedAt": r.started_at},
                    "waiting": None,
                    "terminated": None,
                },
            }
        if (t := self._done.get(name)) is not None:
            terminated = {"exitCode": t.exit_code, "reason": t.reason, "finishedAt": t.finished_at}
            if t.started_at:
                terminated["startedAt"] = t.started_at
            if t.message:
                terminated["message"] = t.message
            return {
                "name": name,
                "image": image,
                "imageID": image,
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"terminated": terminated, "waiting": None, "running": None},
            }
        waiting = {"reason": "PodInitializing"}
        return {
            "name": name,
            "image": image,
            "ready": False,
            "restartCount": 0,
            "state": {"waiting": waiting},
        }

    def report(self, phase: str) -> None:
        spec = self.pod["spec"]
        inits = [self._status_of(c["name"], c["image"]) for c in spec.get("initContainers") or []]
        mains = [self._status_of(c["name"], c["image"]) for c in spec["containers"]]
        initialized = all(
            (s["state"].get("terminated") or {}).get("exitCode") == 0 or s.get("started")
            for s in inits
        )
        ready = bool(mains) and all(s["ready"] for s in mains)
        now = _now()

        def condition(kind: str, value: bool) -> Obj:
            return {"type": kind, "status": "True" if value else "False", "lastTransitionTime": now}

        status: Obj = {
            "phase": phase,
            "hostIP": POD_IP,
            "hostIPs": [{"ip": POD_IP}],
            "podIP": POD_IP,
            "podIPs": [{"ip": POD_IP}],
            "startTime": self.start_time,
            "conditions": [
                condition("PodReadyToStartContainers", self._sandbox is not None),
                condition("Initialized", initialized),
                condition("ContainersReady", ready),
                condition("Ready", ready),
                condition("PodScheduled", True),
            ],
            "containerStatuses": mains,
        }
        if inits:
            status["initContainerStatuses"] = inits
        try:
            self.api.patch_status(self.namespace, self.name, status)
        except ApiFailed as exc:
            _log.info("status of pod %s/%s not written: %s", self.namespace, self.name, exc)

    # -- volumes and environment -------------------------------------------------------------

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
                item["path"]: self._field(item["fieldRef"]["fieldPath"]).encode()
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

    def _volumes(self) -> dict[str, Path]:
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

    def _service_account(self) -> Path:
        where = self.folder / "volumes" / "kube-api-access"
        where.mkdir(parents=True, exist_ok=True)
        (where / "token").write_text(self._token)
        (where / "ca.crt").write_bytes(self._ca_file.read_bytes())
        (where / "namespace").write_text(self.namespace)
        return where

    def _field(self, path: str) -> str:
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

    def _env(self, container: Obj, image_env: dict[str, str]) -> dict[str, str]:
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
                env[name] = self._field(ref["fieldPath"])
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

    def _hosts(self) -> str:
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

    # -- containers ----------------------------------------------------------------------------

    def _start(self, container: Obj, volumes: dict[str, Path], *, sidecar: bool) -> _Running:
        name = container["name"]
        image = self.images.resolve(container["image"])
        if image is None:
            raise ContainerError(
                "ErrImagePull", f"the local kubelet has no image {container['image']!r}"
            )
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            if mount["name"] == "kube-api-access":
                mounts[mount["mountPath"]] = volumes["kube-api-access"]
                continue
            if mount["name"] not in volumes:
                raise ContainerError("CreateContainerConfigError", f"no volume {mount['name']!r}")
            source = volumes[mount["name"]]
            mounts[mount["mountPath"]] = (
                source / mount["subPath"] if mount.get("subPath") else source
            )
        if "kube-api-access" in volumes and SA_PATH not in mounts:
            mounts[SA_PATH] = volumes["kube-api-access"]
        spec = ContainerSpec(
            container=container,
            image=image,
            env=self._env(container, image.env),
            mounts=mounts,
            hosts=self._hosts(),
        )
        assert self._sandbox is not None
        process = start_container(
            spec,
            folder=self.folder / "fs" / name,
            sandbox_pid=self._sandbox.pid,
            log=self.folder / "logs" / f"{name}.log",
        )
        _log.info(
            "pod %s/%s: container %s started (pid %d)", self.namespace, self.name, name, process.pid
        )
        running = _Running(
            name=name, image=container["image"], process=process, started_at=_now(), sidecar=sidecar
        )
        with self._lock:
            self._running[name] = running
        return running

    def _probe(self, probe: Obj | None) -> bool:
        if not probe:
            return True
        if "grpc" in probe:
            line = f"grpc {probe['grpc']['port']} {probe['grpc'].get('service', '')}"
        elif "tcpSocket" in probe:
            line = f"tcp {probe['tcpSocket']['port']}"
        elif "httpGet" in probe:
            line = f"http {probe['httpGet']['port']} {probe['httpGet'].get('path', '/')}"
        else:
            return True  # exec probes: not run here
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(5)
            conn.connect(str(self.folder / "probe.sock"))
            conn.sendall(line.encode() + b"\n")
            return conn.recv(256).decode().startswith("ok")
        return False

    def _until_started(self, running: _Running, container: Obj) -> bool:
        """Wait for a sidecar's startup probe (periodSeconds x failureThreshold at most)."""
        probe = container.get("startupProbe")
        limit = float((probe or {}).get("periodSeconds", 10)) * float(
            (probe or {}).get("failureThreshold", 3)
        )
        deadline = time.monotonic() + limit
        while running.process.poll() is None and not self._deleted.is_set():
            if self._probe(probe):
                running.started = True
                running.ready = self._probe(container.get("readinessProbe"))
                return True
            if time.monotonic() > deadline:
                return False
            self._deleted.wait(0.2)
        return False

    def _finish(self, running: _Running, reason: str = "") -> None:
        code = running.process.wait()
        exit_code = code if code >= 0 else 128 - code  # killed by signal N: 128 + N
        why = reason or ("Completed" if exit_code == 0 else "Error")
        with self._lock:
            self._running.pop(running.name, None)
            self._done[running.name] = _Terminated(
                name=running.name,
                image=running.image,
                exit_code=exit_code,
                reason=why,
                started_at=running.started_at,
            )

    def _stop(self, running: _Running, grace: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running.process.pid, signal.SIGTERM)
        try:
            running.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.process.pid, signal.SIGKILL)
        self._finish(running)

    # -- the pod's life -------------------------------------------------------------------------

    def delete(self, grace: float) -> None:
        """The pod is being deleted: stop its containers within `grace` seconds."""
        self._grace = grace
        self._deleted.set()

    def run(self) -> None:
        try:
            phase = self._live()
        except (ContainerError, ApiFailed, OSError) as exc:
            _log.warning("pod %s/%s failed: %s", self.namespace, self.name, exc)
            phase = "Failed"
        finally:
            for running in reversed(list(self._running.values())):
                self._stop(running, self._grace)
            if self._sandbox is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._sandbox.pid, signal.SIGKILL)
                self._sandbox.wait()
        self.report(phase)
        if self._deleted.is_set():
            with contextlib.suppress(ApiFailed):
                self.api.request(
                    "DELETE",
                    f"/api/v1/namespaces/{self.namespace}/pods/{self.name}",
                    {
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": self.pod["metadata"]["uid"]},
                    },
                )
        _log.info("pod %s/%s: %s", self.namespace, self.name, phase)

    def _live(self) -> str:
        (self.folder / "logs").mkdir(parents=True, exist_ok=True)
        self.report("Pending")
        volumes = self._volumes()
        if self.pod["spec"].get("automountServiceAccountToken", True):
            volumes["kube-api-access"] = self._service_account()
        self._serve_api(self.folder / "api.sock")
        self._sandbox = subprocess.Popen(
            ["unshare", "--net", "--uts", sys.executable, "-m",
             "execpods.devtools.localkubelet.sandbox", str(self.folder), self.name],
            start_new_session=True,
            stdout=(self.folder / "logs" / "sandbox.log").open("ab"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        while not (self.folder / "ready").exists():
            if self._sandbox.poll() is not None:
                raise ContainerError("CreatePodSandboxError", "the pod's sandbox did not start")
            time.sleep(0.05)
        spec = self.pod["spec"]
        for container in spec.get("initContainers") or []:
            sidecar = container.get("restartPolicy") == "Always"
            try:
                running = self._start(container, volumes, sidecar=sidecar)
            except ContainerError as exc:
                self._done[container["name"]] = _Terminated(
                    name=container["name"],
                    image=container["image"],
                    exit_code=128,
                    reason=exc.reason,
                    message=str(exc),
                )
                return "Failed"
            self.report("Pending")
            if sidecar:
                if not self._until_started(running, container):
                    return "Failed"
            else:
                self._finish(running)
                if self._done[container["name"]].exit_code != 0:
                    return "Failed"
            self.report("Pending")
        mains = [self._start(c, volumes, sidecar=False) for c in spec["containers"]]
        for running in mains:
            running.started = True
            running.ready = True
        self.report("Running")
        while any(r.process.poll() is None for r in mains) and not self._deleted.is_set():
            self._deleted.wait(0.2)
        for running in mains:
            if running.process.poll() is None:
                self._stop(running, self._grace)
            else:
                self._finish(running)
        sidecars = [r for r in self._running.values() if r.sidecar]
        for running in reversed(sidecars):
            self._stop(running, self._grace)
        codes = [self._done[c["name"]].exit_code for c in spec["containers"]]
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"
