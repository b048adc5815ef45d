"""Pod status transitions the kubelet makes: pure functions over a pod (a copy being written).

Kept apart from the scheduling and timing logic in ``cluster.py`` so each reads on its own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from execpods.kubesim.sidecars import init_statuses_running, init_statuses_stopped
from execpods.kubesim.store import Obj

__all__ = [
    "Termination",
    "condition",
    "container_creating",
    "image_pull_backoff",
    "image_pull_failed",
    "not_ready",
    "running",
    "terminated",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Termination:
    """How containers ended and what follows: a restart, or the pod's final phase."""

    exit_code: int
    reason: str
    message: str = ""
    restart: bool = False
    force_phase: str | None = None
    pod_reason: str | None = None
    pod_message: str | None = None
    #: The CrashLoopBackOff message; ``{container}`` is replaced by each container's name.
    backoff_message: str = "back-off restarting failed container={container}"


def condition(
    status: Obj, ctype: str, value: str, now: str, *, reason: str = "", message: str = ""
) -> None:
    """Set a pod condition by type, moving ``lastTransitionTime`` only when the value changes."""
    conds: list[Obj] = status.setdefault("conditions", [])
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") != value:
                c["lastTransitionTime"] = now
            c["status"] = value
            break
    else:
        c = {"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
        conds.append(c)
    if reason:
        c["reason"] = reason
    else:
        c.pop("reason", None)
    if message:
        c["message"] = message
    else:
        c.pop("message", None)


def not_ready(status: Obj, now: str, reason: str, message: str) -> None:
    """Ready and ContainersReady go False together whenever a container is not running."""
    condition(status, "Ready", "False", now, reason=reason, message=message)
    condition(status, "ContainersReady", "False", now, reason=reason, message=message)


def _pull_error(image: str) -> str:
    return f'failed to pull image "{image}": not found'


def image_pull_failed(pod: Obj, now: str, images: list[str] | None = None) -> Obj:
    """Containers stuck in ErrImagePull; the pod stays Pending. (``images``: the ones that
    failed, all when None; the kubelet pulls nothing else until those succeed.)"""
    return _waiting(pod, now, "ErrImagePull", _pull_error)


def image_pull_backoff(pod: Obj, images: list[str] | None = None) -> Obj | None:
    """Between pulls: ErrImagePull becomes ImagePullBackOff, its message the kubelet's
    ``Back-off pulling image "IMAGE": ErrImagePull: <the pull's error>``. None when the
    containers are no longer waiting on a pull (nothing to write)."""
    changed = False
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") != "ErrImagePull":
            continue
        image = status.get("image", "")
        message = f'Back-off pulling image "{image}": ErrImagePull: {_pull_error(image)}'
        status["state"] = {"waiting": {"reason": "ImagePullBackOff", "message": message}}
        changed = True
    return pod if changed else None


def container_creating(pod: Obj, now: str) -> Obj:
    """Containers not created yet (a volume cannot be mounted); the pod stays Pending."""
    return _waiting(pod, now, "ContainerCreating", lambda c: "")


def _waiting(pod: Obj, now: str, reason: str, message: Callable[[str], str]) -> Obj:
    st = pod["status"]
    st.setdefault("startTime", now)
    st["hostIP"] = "192.168.0.1"
    condition(st, "Initialized", "True", now)
    not_ready(st, now, "ContainersNotReady", "containers with unready status")
    st["containerStatuses"] = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"waiting": {"reason": reason, **_message(message(c["image"]))}},
            "lastState": {},
        }
        for c in pod["spec"]["containers"]
    ]
    return pod


def _message(text: str) -> dict[str, str]:
    return {"message": text} if text else {}


def running(pod: Obj, now: str, ip: str, container_id: Callable[[], str]) -> Obj:
    """Every container running and ready."""
    st = pod["status"]
    previous = {c.get("name"): c for c in st.get("containerStatuses") or []}
    st["phase"] = "Running"
    st.setdefault("startTime", now)
    st["hostIP"] = "192.168.0.1"
    st["podIP"] = ip
    st["podIPs"] = [{"ip": ip}]
    for ctype in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
        condition(st, ctype, "True", now)
    statuses = []
    for c in pod["spec"]["containers"]:
        prev = previous.get(c["name"], {})
        resources = copy.deepcopy(c.get("resources") or {})
        statuses.append(
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": f"docker-pullable://{c['image']}",
                "containerID": container_id(),
                "ready": True,
                "started": True,
                "restartCount": prev.get("restartCount", 0),
                "state": {"running": {"startedAt": now}},
                "lastState": prev.get("lastState", {}),
                # What the kubelet (1.33+) reports of a running container: the API server takes
                # it as the node's support for in-place resize (pods/resize).
                "resources": resources,
                "allocatedResources": dict(resources.get("requests") or {}),
            }
        )
    st["containerStatuses"] = statuses
    if pod["spec"].get("initContainers"):
        st["initContainerStatuses"] = init_statuses_running(pod, now, container_id)
    return pod


def terminated(p: Obj, now: str, end: Termination) -> Obj:
    """Containers ended with ``end.exit_code``: waiting to restart, or the pod finished."""
    exit_code, reason, message, restart = end.exit_code, end.reason, end.message, end.restart
    force_phase, pod_reason, pod_message = end.force_phase, end.pod_reason, end.pod_message
    st = p["status"]
    previous = {c.get("name"): c for c in st.get("containerStatuses") or []}
    statuses = []
    for c in p["spec"]["containers"]:
        prev = previous.get(c["name"], {})
        was_running = (prev.get("state") or {}).get("running") or {}
        term: Obj = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": was_running.get("startedAt", now),
            "finishedAt": now,
            "containerID": prev.get("containerID", ""),
        }
        if message:
            term["message"] = message
        restarts = prev.get("restartCount", 0)
        entry = {
            "name": c["name"],
            "image": c["image"],
            "imageID": prev.get("imageID", ""),
            "containerID": prev.get("containerID", ""),
            "ready": False,
            "started": False,
            "restartCount": restarts + 1 if restart else restarts,
        }
        if restart:
            backoff = end.backoff_message.replace("{container}", c["name"])
            entry["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": backoff}}
            entry["lastState"] = {"terminated": term}
        else:
            entry["state"] = {"terminated": term}
            entry["lastState"] = prev.get("lastState", {})
        statuses.append(entry)
    st["containerStatuses"] = statuses
    if restart:
        not_ready(st, now, "ContainersNotReady", "containers not ready")
    else:
        st["phase"] = force_phase or ("Succeeded" if exit_code == 0 else "Failed")
        if p["spec"].get("initContainers"):  # native sidecars stop with the main containers
            st["initContainerStatuses"] = init_statuses_stopped(p, now)
        not_ready(st, now, "PodCompleted" if st["phase"] == "Succeeded" else "PodFailed", "")
        if pod_reason:
            st["reason"] = pod_reason
        if pod_message:
            st["message"] = pod_message
    return p


def resize_pending(pod: Obj) -> bool:
    """A running pod whose containers' spec resources differ from what the kubelet reports:
    a resize (pods/resize) the kubelet has yet to actuate."""
    if (pod.get("status") or {}).get("phase") != "Running":
        return False
    reported = {
        s.get("name"): s.get("resources")
        for s in (pod.get("status") or {}).get("containerStatuses") or []
        if (s.get("state") or {}).get("running") is not None
    }
    return any(
        c["name"] in reported and (c.get("resources") or {}) != reported[c["name"]]
        for c in pod["spec"]["containers"]
    )


def resize_actuated(pod: Obj) -> Obj | None:
    """The kubelet's report once it actuated a resize: each running container's status carries
    its spec resources (None when nothing is pending)."""
    if not resize_pending(pod):
        return None
    wanted = {c["name"]: copy.deepcopy(c.get("resources") or {}) for c in pod["spec"]["containers"]}
    for container_status in pod["status"].get("containerStatuses") or []:
        resources = wanted.get(container_status.get("name"))
        if resources is not None and (container_status.get("state") or {}).get("running"):
            container_status["resources"] = resources
            container_status["allocatedResources"] = dict(resources.get("requests") or {})
    return pod
