"""A small simulated cluster for the model-based test: `PodOperations` with the faults it needs.

It is a real implementation of the port (the same `PodSelector` semantics as the API), plus what
a kubelet, a webhook and a watch do, each under the test's control:
- creates answer by a queue of outcomes: made, refused (403), throttled (429, no pod), lost (5xx
  after the pod was made) or lost before it was made;
- deletes can be denied (a webhook); a pod with a finalizer only gets a deletion timestamp until
  the finalizer is released; a Running pod deleted with grace keeps running (Terminating) until
  the kubelet stops it;
- every change is sent to the watch (a `SnapshotsWriter`) unless the watch is down; `relist()`
  is a full poll;
- it records every create sent (by executor id) and every scale-down delete, so the test can
  check the invariants against what really reached the API.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from execpods.core import (
    SPARK_LABELS,
    ApiThrottled,
    ApiUnavailable,
    ExecutorPod,
    PodConflict,
    PodForbidden,
    PodSelector,
)
from execpods.core.pods import EXECUTOR_CONTAINER_NAME, ContainerStatus, ContainerTerminated
from execpods.core.ports import SnapshotsWriter

CREATE_OUTCOMES = ("made", "refused", "throttled", "lost", "lost-unmade")


@dataclass
class Sent:
    """One create that reached the API."""

    executor_id: int
    life: int
    outcome: str


@dataclass
class SimCluster:
    clock_time: Callable[[], float]
    pods: dict[str, ExecutorPod] = field(default_factory=dict)
    finalizers: set[str] = field(default_factory=set)
    create_outcomes: list[str] = field(default_factory=list)
    deny_deletes: bool = False
    watch: SnapshotsWriter | None = None
    watch_up: bool = True
    life: int = 0
    sent: list[Sent] = field(default_factory=list)
    ever_running: set[str] = field(default_factory=set)
    ever_failed: set[int] = field(default_factory=set)
    scale_down_check: Callable[[PodSelector, list[ExecutorPod]], None] | None = None
    create_check: Callable[[int], None] | None = None

    # What the watch and the poll see.

    def _emit(self, pod: ExecutorPod) -> None:
        if self.watch is not None and self.watch_up:
            self.watch.update_pod(pod)

    def relist(self) -> None:
        """A full poll: the snapshot becomes the cluster as it is; the watch is re-established."""
        self.watch_up = True
        if self.watch is not None:
            self.watch.replace_snapshot(list(self.pods.values()))

    def _put(self, pod: ExecutorPod) -> None:
        self.pods[pod.name] = pod
        if (pod.phase or "").lower() == "running":
            self.ever_running.add(pod.name)
        self._emit(pod)

    def _remove(self, name: str) -> None:
        pod = self.pods.pop(name)
        self.finalizers.discard(name)
        self._emit(dataclasses.replace(pod, gone=True))

    # PodOperations.

    def create(self, manifest: Mapping[str, object]) -> None:
        metadata = manifest["metadata"]
        assert isinstance(metadata, Mapping)
        name = str(metadata["name"])
        labels = dict(metadata["labels"])
        executor_id = int(labels[SPARK_LABELS.executor_id])
        outcome = self.create_outcomes.pop(0) if self.create_outcomes else "made"
        if self.create_check is not None:
            self.create_check(executor_id)
        if outcome == "throttled":
            raise ApiThrottled("too many requests", retry_after=1.0)
        self.sent.append(Sent(executor_id, self.life, outcome))
        if outcome == "refused":
            raise PodForbidden("exceeded quota")
        if outcome == "lost-unmade":
            raise ApiUnavailable("connection reset before the request was read")
        if name in self.pods:
            raise PodConflict(f'pods "{name}" already exists')
        pod = ExecutorPod(
            name=name,
            labels=labels,
            phase="Pending",
            restart_policy="Never",
            creation_timestamp=datetime.fromtimestamp(self.clock_time(), UTC),
        )
        self._put(pod)
        if outcome == "lost":
            raise ApiUnavailable("503: the answer was lost after the pod was made")

    def delete(self, name: str) -> None:
        if self.deny_deletes:
            raise PodForbidden("admission webhook denied the delete")
        if name in self.pods:
            self._delete_one(name, grace=True)

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        if self.deny_deletes:
            raise PodForbidden("admission webhook denied the delete")
        matching = [pod for pod in self.pods.values() if selector.matches(pod)]
        if selector.phase == "Pending" and self.scale_down_check is not None:
            self.scale_down_check(selector, matching)
        for pod in matching:
            self._delete_one(pod.name, grace=grace_period_seconds != 0)
        return len(matching)

    def _delete_one(self, name: str, *, grace: bool) -> None:
        pod = self.pods[name]
        running = (pod.phase or "").lower() == "running"
        if name not in self.finalizers and not (grace and running):
            self._remove(name)
        elif pod.deletion_timestamp is None:
            stamp = datetime.fromtimestamp(self.clock_time(), UTC)
            self._put(dataclasses.replace(pod, deletion_timestamp=stamp))

    def patch_labels(self, name: str, labels: Mapping[str, str]) -> None:
        pod = self.pods.get(name)
        if pod is not None:
            self._put(dataclasses.replace(pod, labels={**pod.labels, **labels}))

    def patch_annotations(self, name: str, annotations: Mapping[str, str]) -> None:
        pod = self.pods.get(name)
        if pod is not None:  # nothing the core reads: only the resource version would change
            self._put(pod)

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        return [pod for pod in self.pods.values() if selector.matches(pod)]

    # The kubelet, the scheduler, users.

    def start(self, name: str) -> None:
        pod = self.pods[name]
        if pod.phase == "Pending" and pod.deletion_timestamp is None:
            self._put(dataclasses.replace(pod, phase="Running"))

    def fail(self, name: str, *, disruption: str | None = None) -> None:
        pod = self.pods[name]
        if pod.phase not in ("Pending", "Running"):
            return
        executor_id = SPARK_LABELS.executor_id_of(name, pod.labels)
        if executor_id is not None:
            self.ever_failed.add(executor_id)
        terminated = ContainerStatus(
            name=EXECUTOR_CONTAINER_NAME,
            state=ContainerTerminated(exit_code=137 if disruption else 1),
        )
        self._put(
            dataclasses.replace(
                pod,
                phase="Failed",
                reason="Evicted" if disruption else "Error",
                disruption=disruption,
                container_statuses=(terminated,),
            )
        )

    def stop_terminating(self) -> None:
        """The kubelet stops every pod being deleted; those without finalizers are then gone."""
        for name, pod in list(self.pods.items()):
            if pod.deletion_timestamp is None:
                continue
            if name in self.finalizers:
                if pod.phase == "Running":
                    self._put(dataclasses.replace(pod, phase="Failed"))
            else:
                self._remove(name)

    def release_finalizers(self) -> None:
        self.finalizers.clear()
        self.stop_terminating()

    def vanish(self, name: str) -> None:
        """The pod is gone and the watch missed it: only a full poll tells."""
        self.pods.pop(name)
        self.finalizers.discard(name)

    def add(self, pod: ExecutorPod) -> None:
        """A pod made by someone else (by hand)."""
        self._put(pod)
