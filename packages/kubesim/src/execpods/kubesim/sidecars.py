"""Init containers, and Kubernetes' native sidecars (an init container with
`restartPolicy: Always`, stable since 1.29), as the kubelet reports them.

Ordinary init containers ran to completion before the main containers started: they show as
terminated, exit code 0. Native sidecars start before the main containers and keep running
beside them; they do not keep the pod alive: when the main containers end (the pod completes,
Succeeded or Failed by the main containers alone), the kubelet stops the sidecars, which then show
as terminated too. This is what lets a Spark driver pod with execpods as a native sidecar finish
in cluster mode, where a sidecar among `containers` would keep it Running forever.
"""

from __future__ import annotations

from collections.abc import Callable

from execpods.kubesim.store import Obj

__all__ = ["is_native_sidecar", "init_statuses_running", "init_statuses_stopped"]

SIDECAR_STOP_EXIT_CODE = 0
"""A sidecar that handles SIGTERM (as execpods-sidecar does) exits 0 when the kubelet stops it."""


def is_native_sidecar(container: Obj) -> bool:
    return container.get("restartPolicy") == "Always"


def _init_containers(pod: Obj) -> list[Obj]:
    found = pod.get("spec", {}).get("initContainers") or []
    return [c for c in found if isinstance(c, dict) and c.get("name")]


def _terminated(container: Obj, previous: Obj, now: str, reason: str) -> Obj:
    running = (previous.get("state") or {}).get("running") or {}
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": previous.get("imageID", f"docker-pullable://{container.get('image', '')}"),
        "containerID": previous.get("containerID", ""),
        "ready": False,
        "started": False,
        "restartCount": previous.get("restartCount", 0),
        "state": {
            "terminated": {
                "exitCode": SIDECAR_STOP_EXIT_CODE,
                "reason": reason,
                "startedAt": running.get("startedAt", now),
                "finishedAt": now,
                "containerID": previous.get("containerID", ""),
            }
        },
    }


def init_statuses_running(pod: Obj, now: str, container_id: Callable[[], str]) -> list[Obj]:
    """The pod runs: init containers completed, native sidecars running and ready."""
    statuses = []
    for container in _init_containers(pod):
        if is_native_sidecar(container):
            statuses.append(
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "imageID": f"docker-pullable://{container.get('image', '')}",
                    "containerID": container_id(),
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
            )
        else:
            statuses.append(_terminated(container, {}, now, "Completed"))
    return statuses


def init_statuses_stopped(pod: Obj, now: str) -> list[Obj]:
    """The main containers ended: the kubelet stops the native sidecars."""
    previous = {c.get("name"): c for c in pod.get("status", {}).get("initContainerStatuses") or []}
    return [
        _terminated(container, previous.get(container["name"], {}), now, "Completed")
        for container in _init_containers(pod)
    ]
