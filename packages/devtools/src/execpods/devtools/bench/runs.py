"""What one time-to-target run is, and the cluster it runs on: shared by the benchmark
(`time_to_target`, which runs the peers) and its real-Spark peers (`spark_peers`), so the peers
need not import the benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field

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

    @property
    def ratio(self) -> float | None:
        return None if self.seconds is None else self.seconds / self.bound
