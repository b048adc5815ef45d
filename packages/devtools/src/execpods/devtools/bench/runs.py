"""What one time-to-target run is, and the cluster it runs on: shared by the benchmark
(`time_to_target`, which runs the peers) and its real-Spark peers (`spark_peers`), so the peers
need not import the benchmark."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from execpods.kubesim import KubeSim

START_LATENCY = 1.0
START_JITTER = 0.5
SERVER_CREATE_RATE = 250.0
"""kubesim's create-rate cap (creates/s; 429 beyond it). Above the client's default limit, so the
client's own rate limit is what binds, as it should on a cluster shared with others."""


@dataclass(slots=True)
class Run:
    """One policy at one size: what the benchmark prints and plots."""

    policy: str
    executors: int
    seconds: float | None
    """Virtual seconds to 100% Running (None: not reached within MAX_VIRTUAL)."""
    bound: float
    peak_rate: int
    rate_limit: float
    curve: list[tuple[float, int]] = field(default_factory=list)
    creates: int = 0
    throttled: int = 0
    wall: float = 0.0
    pod_bytes: int = 0
    """Bytes of one executor pod's JSON as created (no status): what each create sends and each
    watch event and list item carries (Spark's pods are several times the sidecar's own)."""

    @property
    def ratio(self) -> float | None:
        return None if self.seconds is None else self.seconds / self.bound


_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def body_bytes(pod: Mapping[str, Any]) -> int:
    """The JSON size of a pod as its creator sent it: without status and server-set metadata."""
    meta = {k: v for k, v in (pod.get("metadata") or {}).items() if k not in _SERVER_SET}
    sent = {**{k: v for k, v in pod.items() if k != "status"}, "metadata": meta}
    return len(json.dumps(sent, separators=(",", ":")))


class FirstPodBody:
    """The body size of the first pod added to a kubesim (`body_bytes`)."""

    def __init__(self, sim: KubeSim) -> None:
        self.bytes = 0
        sim.store.add_listener(self._on_event)

    def _on_event(self, event: Any) -> None:
        if not self.bytes and event.type == "ADDED":
            self.bytes = body_bytes(event.new)
