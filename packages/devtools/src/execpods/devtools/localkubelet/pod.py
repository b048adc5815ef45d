"""One pod's life on the local kubelet, as the kubelet lives it, reported through `pods/status`.

Volumes are written (Secrets and ConfigMaps read through the API; the service account's token,
CA and namespace where the pod automounts them), the sandbox starts, then the init containers in
order: a regular one must exit 0; a native sidecar (`restartPolicy: Always`) must pass its
startup probe, and keeps running. Then the main containers. When every main container has
exited, the sidecars get SIGTERM in reverse order, and the pod ends `Succeeded` (all exited 0)
or `Failed`. A deletion stops everything within the grace period, then removes the pod.
"""

from __future__ import annotations

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
    start_container,
)
from execpods.devtools.localkubelet.images import ImageCatalogue
from execpods.devtools.localkubelet.podinputs import POD_IP, PodInputs

__all__ = ["PodRunner"]

_log = logging.getLogger(__name__)
Obj = dict[str, Any]
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


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
        self._deleted = threading.Event()
        self.inputs = PodInputs(
            api=api, pod=pod, folder=folder, ca_file=ca_file, token=token, stopped=self._deleted
        )
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
                "state": {"terminated": terminated},
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
            env=self.inputs.env(container, image.env),
            mounts=mounts,
            hosts=self.inputs.hosts(),
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
        volumes = self.inputs.volumes()
        if self.pod["spec"].get("automountServiceAccountToken", True):
            volumes["kube-api-access"] = self.inputs.service_account()
        self._serve_api(self.folder / "api.sock")
        with (self.folder / "logs" / "sandbox.log").open("ab") as log:
            self._sandbox = subprocess.Popen(
                ["unshare", "--net", "--uts", sys.executable, "-m",
                 "execpods.devtools.localkubelet.sandbox", str(self.folder), self.name],
                start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
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
