"""The kubelet half of the node simulation: starting pods, image pulls, exits and restarts,
and every way containers end (terminations, OOM kills, evictions, graceful stops).

Split out of :mod:`execpods.kubesim.nodes` when that module had grown to 735 lines; the
scheduler stays there and :class:`~execpods.kubesim.nodes.NodeSimulation` inherits this class.
Its behaviour is described in :mod:`execpods.kubesim.nodes`'s docstring.
"""

from __future__ import annotations

from execpods.kubesim.limits import sample_latency
from execpods.kubesim.nodestate import (
    ANNOTATION_PREFIX,
    KUBELET,
    Key,
    NodeState,
    go_duration,
    restart_backoff,
)
from execpods.kubesim.pods import TERMINAL_PHASES
from execpods.kubesim.podstatus import (
    Termination,
    condition,
    container_creating,
    image_pull_backoff,
    image_pull_failed,
    running,
    terminated,
)
from execpods.kubesim.store import Obj

__all__ = ["RESIZE_LATENCY", "Kubelet"]

RESIZE_LATENCY = 0.1
"""Seconds the kubelet takes to actuate an in-place resize (pods/resize)."""


class Kubelet(NodeState):
    """The kubelets of every simulated node: what happens to a pod once it is bound."""

    def _on_deleting(self, key: Key, uid: str, pod: Obj) -> None:
        """A graceful delete reached the kubelet: stop the containers after the grace period
        (capped by ``stop_latency``); a shorter grace on a second delete stops them sooner."""
        meta = pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if not meta.get("deletionTimestamp") or grace is None or not pod["spec"].get("nodeName"):
            return
        if pod.get("status", {}).get("phase") in TERMINAL_PHASES:
            return
        with self._lock:
            seen = self._stopping.get(key)
            if seen is not None and seen <= grace:
                return
            self._stopping[key] = int(grace)
        stop = min(float(grace), self.config.stop_latency)
        killed = self.config.stop_latency > grace
        self._kubelet_later(stop, lambda: self._finish_graceful(key, uid, killed=killed))

    # -- kubelet -------------------------------------------------------------------------------

    def _plan_start(self, key: Key, uid: str, delay: float | None = None) -> None:
        if delay is None:
            c = self.config
            delay = sample_latency(self.rng, c.start_distribution, c.start_latency, c.start_jitter)
        self._kubelet_later(delay, lambda: self._start(key, uid))

    def _container_id(self) -> str:
        return f"containerd://{self.rng.getrandbits(64):016x}"

    def _node_up(self, pod: Obj) -> bool:
        node = pod["spec"].get("nodeName")
        return bool(node) and self._nodes.get(node, False)

    def _pull_fails(self, pod: Obj) -> list[str]:
        annotations = pod["metadata"].get("annotations") or {}
        images = [c.get("image") or "" for c in pod["spec"]["containers"]]
        if annotations.get(ANNOTATION_PREFIX + "image-pull-failure") == "true":
            return images
        return [i for i in images if i in self.config.image_pull_failures]

    def _start(self, key: Key, uid: str, pulls: int = 0) -> None:
        pod = self.port.find(*key)
        if pod is None or pod["metadata"].get("uid") != uid or not self._node_up(pod):
            return
        if pod["metadata"].get("deletionTimestamp"):
            return
        if pod.get("status", {}).get("phase") in TERMINAL_PHASES:
            return
        retry = next(filter(None, (check(pod) for check in self.start_checks)), None)
        if retry is not None:
            if not pod.get("status", {}).get("containerStatuses"):
                self._update(key, uid, lambda p: container_creating(p, self._now()))
            self._plan_start(key, uid, delay=retry)
            return
        if failed := self._pull_fails(pod):
            self._image_pull_failed(key, uid, pod, failed, pulls + 1)
            return
        if pod["spec"].get("nodeName") in self.crashing_nodes:
            message = "the node's kubelet fails every pod (kubesim bad node)"
            self.terminate(*key, exit_code=1, reason="Error", message=message, uid=uid)
            return
        with self._lock:
            self._ip += 1
            ip = f"10.244.{(self._ip >> 8) & 255}.{self._ip & 255}"
        if (
            self._update(key, uid, lambda p: running(p, self._now(), ip, self._container_id))
            is None
        ):
            return
        self._plan_exit(key, uid, pod["metadata"].get("annotations") or {})

    def _image_pull_failed(
        self, key: Key, uid: str, pod: Obj, images: list[str], attempt: int
    ) -> None:
        """ErrImagePull now; ImagePullBackOff a moment later; a new pull after the back-off."""
        if self._update(key, uid, lambda p: image_pull_failed(p, self._now(), images)) is None:
            return
        for image in images:
            self.port.record_event(
                pod,
                type_="Warning",
                reason="Failed",
                message=f'Failed to pull image "{image}": not found',
                component=KUBELET,
            )

        def back_off() -> None:
            if self._update(key, uid, lambda p: image_pull_backoff(p, images)) is None:
                return
            for image in images:
                self.port.record_event(
                    pod,
                    type_="Normal",
                    reason="BackOff",
                    message=f'Back-off pulling image "{image}"',
                    component=KUBELET,
                )

        self._kubelet_later(1.0, back_off)
        self._kubelet_later(restart_backoff(attempt), lambda: self._start(key, uid, pulls=attempt))

    def _plan_exit(self, key: Key, uid: str, annotations: dict[str, str]) -> None:
        def number(name: str) -> float | None:
            try:
                return float(annotations[ANNOTATION_PREFIX + name])
            except (KeyError, ValueError):
                return None

        oom_after = number("oom-after")
        exit_after = number("exit-after")
        if oom_after is not None:
            self._kubelet_later(oom_after, lambda: self.oom_kill(*key, uid=uid))
        elif exit_after is not None:
            code = int(number("exit-code") or 0)
            reason = "Completed" if code == 0 else "Error"
            self._kubelet_later(
                exit_after, lambda: self.terminate(*key, exit_code=code, reason=reason, uid=uid)
            )
        elif self.config.failure_rate > 0 and self.rng.random() < self.config.failure_rate:
            mean = self.config.failure_after
            after = self.rng.expovariate(1.0 / mean) if mean > 0 else 0.0  # 0: as they start
            self._kubelet_later(
                after,
                lambda: self.terminate(
                    *key, exit_code=1, reason="Error", message="random failure", uid=uid
                ),
            )

    # -- terminations (also the control API) ---------------------------------------------------

    def terminate(
        self,
        namespace: str,
        name: str,
        *,
        exit_code: int,
        reason: str,
        message: str = "",
        uid: str | None = None,
        pod_reason: str | None = None,
        pod_message: str | None = None,
        force_phase: str | None = None,
        disruption: tuple[str, str] | None = None,
    ) -> Obj | None:
        """End the pod's containers with ``exit_code``; the restart policy decides what follows.

        With ``force_phase`` (eviction, node loss, graceful deletion) no restart happens;
        ``disruption`` (reason, message) also sets the ``DisruptionTarget`` condition.
        """
        pod = self.port.find(namespace, name)
        if pod is None or (uid is not None and pod["metadata"].get("uid") != uid):
            return None
        if pod.get("status", {}).get("phase") in TERMINAL_PHASES:
            return pod
        policy = pod["spec"].get("restartPolicy", "Always")
        restart = force_phase is None and (
            policy == "Always" or (policy == "OnFailure" and exit_code != 0)
        )
        if pod["metadata"].get("deletionTimestamp"):
            restart = False
        key: Key = (namespace, name)
        puid: str = pod["metadata"]["uid"]
        restarts = 1 + max(
            (
                c.get("restartCount", 0)
                for c in pod.get("status", {}).get("containerStatuses") or []
            ),
            default=0,
        )
        end = Termination(
            exit_code=exit_code,
            reason=reason,
            message=message,
            restart=restart,
            force_phase=force_phase,
            pod_reason=pod_reason,
            pod_message=pod_message,
            backoff_message=(
                f"back-off {go_duration(restart_backoff(restarts))} restarting failed "
                f"container={{container}} pod={name}_{namespace}({puid})"
            ),
        )

        def mutate(p: Obj) -> Obj:
            if disruption is not None:
                condition(
                    p.setdefault("status", {}),
                    "DisruptionTarget",
                    "True",
                    self._now(),
                    reason=disruption[0],
                    message=disruption[1],
                )
            return terminated(p, self._now(), end)

        result = self._update(key, puid, mutate)
        if result is not None and restart:
            self._plan_start(key, puid, delay=restart_backoff(restarts))
        return result

    def oom_kill(self, namespace: str, name: str, *, uid: str | None = None) -> Obj | None:
        return self.terminate(namespace, name, exit_code=137, reason="OOMKilled", uid=uid)

    def evict(self, namespace: str, name: str, message: str = "") -> Obj | None:
        """The kubelet's node-pressure eviction: DisruptionTarget (TerminationByKubelet), the
        containers killed (137), phase Failed with reason Evicted."""
        text = message or "The node was low on resource: memory."
        return self.terminate(
            namespace,
            name,
            exit_code=137,
            reason="Error",
            pod_reason="Evicted",
            pod_message=text,
            force_phase="Failed",
            disruption=("TerminationByKubelet", text),
        )

    def _finish_graceful(self, key: Key, uid: str, *, killed: bool = False) -> None:
        """The containers stop: on SIGTERM (exit 143) within the grace period, or, when they
        would outlive it (``stop_latency`` > grace), by the kubelet's SIGKILL at its end (137)."""
        self.terminate(
            *key,
            exit_code=137 if killed else 143,
            reason="Error",
            message=(
                "killed by the kubelet at the end of the grace period"
                if killed
                else "terminated by the kubelet for graceful deletion"
            ),
            uid=uid,
            force_phase="Failed",
        )
