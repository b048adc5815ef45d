"""A loaded API server: API Priority and Fairness (APF), modelled closely enough to test against.

kube-apiserver gives each priority level a number of concurrency *seats*. A request holds a seat
while it is served; one that finds none free waits in its *flow's* queue (a flow is a client
identity: a user or service account), and seats are handed out fairly across flows, so a client
that sends faster than its share only lengthens its own queue. A request is rejected with 429 and
a Retry-After when its queue is full (queueLengthLimit, 50 by default) or when it waited too long.
A client therefore learns it is too fast first from latency (its queue), then from 429s.

`FairQueues` models one priority level for kubesim's API requests (watches and discovery are
exempt, as a watch holds no seat once it streams):

- ``seats`` seats, each request holding one for ``service_time`` seconds, longer as seats fill
  (``slowdown``: the service time grows by that factor times the share of seats in use, as an
  etcd under load answers later), so an idle server is fast and a full one slower;
- one queue per flow (the bearer token, else the User-Agent) of at most ``queue_length``
  requests; a freed seat goes to the flow holding the fewest seats, and among those to the one
  served longest ago (round robin, as fair queuing gives backlogged flows equal shares);
- 429 with ``Retry-After: retry_after`` when the flow's queue is full or after ``max_wait``;
- *other tenants*: a share of the seats taken by load kubesim does not see (``other_share``),
  set at runtime, or varying over time by a repeating ``schedule`` of (seconds, share) steps.

Real time (the model sleeps while a seat is held): it serves benchmarks and end-to-end tests over
HTTP, and is off (``seats == 0``) unless configured.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from execpods.kubesim.errors import ApiError

__all__ = ["ApfConfig", "FairQueues"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApfConfig:
    """One priority level's seats, queues and timing (``seats == 0``: no APF)."""

    seats: int = 0
    service_time: float = 0.02
    slowdown: float = 1.0
    queue_length: int = 50
    max_wait: float = 2.0
    retry_after: int = 1
    other_share: float = 0.0
    schedule: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if self.seats < 0 or self.queue_length < 0 or self.retry_after < 1:
            raise ValueError("seats and queueLength must be >= 0, retryAfter >= 1")
        for name in ("service_time", "slowdown", "max_wait"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
        shares = [self.other_share, *(share for _, share in self.schedule)]
        if any(not 0 <= share < 1 for share in shares):
            raise ValueError("other tenants' share must be at least 0 and below 1")
        if any(seconds <= 0 for seconds, _ in self.schedule):
            raise ValueError("each step of the other tenants' schedule needs seconds > 0")

    @property
    def capacity(self) -> float:
        """Requests a second the level serves when every seat is busy and free to the clients."""
        loaded = self.service_time * (1.0 + self.slowdown)
        return 0.0 if loaded <= 0 else self.seats / loaded

    def to_json(self) -> dict[str, object]:
        return {
            "seats": self.seats,
            "serviceTime": self.service_time,
            "slowdown": self.slowdown,
            "queueLength": self.queue_length,
            "maxWait": self.max_wait,
            "retryAfter": self.retry_after,
            "otherTenants": self.other_share,
            "schedule": [list(step) for step in self.schedule],
        }


_JSON_NAMES = {
    "seats": "seats",
    "serviceTime": "service_time",
    "slowdown": "slowdown",
    "queueLength": "queue_length",
    "maxWait": "max_wait",
    "retryAfter": "retry_after",
    "otherTenants": "other_share",
}


def config_from_json(base: ApfConfig, data: dict[str, object]) -> ApfConfig:
    """`base` with the fields a control request names (camelCase, as `to_json`)."""
    changes: dict[str, object] = {}
    for key, value in data.items():
        if key == "schedule":
            if not isinstance(value, list):
                raise ValueError("schedule must be a list of [seconds, share] steps")
            changes["schedule"] = tuple((float(s), float(share)) for s, share in value)
        elif key in _JSON_NAMES:
            name = _JSON_NAMES[key]
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ValueError(f"{key!r} must be a number, not {value!r}")
            integer = name in ("seats", "queue_length", "retry_after")
            changes[name] = int(value) if integer else float(value)
        else:
            raise ValueError(f"unknown APF setting {key!r}; one of {sorted(_JSON_NAMES)}")
    return replace(base, **changes)  # type: ignore[arg-type]


@dataclass(slots=True)
class _Waiter:
    flow: str
    arrived: float
    granted: bool = False


@dataclass(slots=True)
class _Flow:
    queue: deque[_Waiter] = field(default_factory=deque)
    executing: int = 0
    served: int = 0
    rejected: int = 0
    last_grant: int = -1
    """The dispatch number of this flow's last seat (round robin among backlogged flows)."""


class FairQueues:
    """Seats, per-flow queues and fair dispatch for kubesim's API requests (see the module)."""

    def __init__(
        self,
        config: ApfConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._cond = threading.Condition()
        self._flows: dict[str, _Flow] = {}
        self._executing = 0
        self._grants = 0
        self._started = clock()
        self.config = config or ApfConfig()

    @property
    def enabled(self) -> bool:
        return self.config.seats > 0

    def configure(self, config: ApfConfig) -> None:
        """Replace the level's settings; the schedule restarts now; waiters are re-dispatched."""
        with self._cond:
            self.config = config
            self._started = self._clock()
            self._dispatch()
            self._cond.notify_all()

    def other_share(self, now: float | None = None) -> float:
        """The share of seats other tenants hold now (the schedule's step, else the fixed one)."""
        config = self.config
        if not config.schedule:
            return config.other_share
        period = sum(seconds for seconds, _ in config.schedule)
        at = ((self._clock() if now is None else now) - self._started) % period
        for seconds, share in config.schedule:
            if at < seconds:
                return share
            at -= seconds
        return config.schedule[-1][1]

    def free_seats(self) -> int:
        """Seats the clients may use now: the level's, less the other tenants' share."""
        seats = self.config.seats
        return seats - min(seats - 1, round(seats * self.other_share()))

    def capacity(self) -> float:
        """Requests a second the clients can get now, every seat free to them busy."""
        loaded = self.config.service_time * (1.0 + self.config.slowdown)
        return 0.0 if loaded <= 0 else self.free_seats() / loaded

    @contextlib.contextmanager
    def seat(self, flow: str) -> Iterator[float]:
        """Hold a seat for one request of `flow` (yields the seconds it queued); raises 429."""
        if not self.enabled:
            yield 0.0
            return
        waited = self._admit(flow)
        try:
            self._sleep(self._service_time())
            yield waited
        finally:
            self._release(flow)

    def _admit(self, flow: str) -> float:
        with self._cond:
            state = self._flows.setdefault(flow, _Flow())
            now = self._clock()
            if len(state.queue) >= self.config.queue_length:
                state.rejected += 1
                raise self._too_many("queue full")
            waiter = _Waiter(flow=flow, arrived=now)
            state.queue.append(waiter)
            self._dispatch()
            deadline = now + self.config.max_wait
            while not waiter.granted:
                left = deadline - self._clock()
                if left <= 0:
                    state.queue.remove(waiter)
                    state.rejected += 1
                    raise self._too_many("waited too long in its queue")
                self._cond.wait(left)
            return self._clock() - now

    def _grant(self, state: _Flow) -> None:
        state.executing += 1
        state.served += 1
        self._executing += 1
        self._grants += 1
        state.last_grant = self._grants

    def _release(self, flow: str) -> None:
        with self._cond:
            self._flows[flow].executing -= 1
            self._executing -= 1
            self._dispatch()
            self._cond.notify_all()

    def _dispatch(self) -> None:
        """Give free seats to queued requests: the flow holding fewest seats, and among those
        the one served longest ago (round robin: equal shares for backlogged flows)."""
        while self._executing < self.free_seats():
            waiting = [f for f in self._flows.values() if f.queue]
            if not waiting:
                return
            state = min(waiting, key=lambda f: (f.executing, f.last_grant))
            state.queue.popleft().granted = True
            self._grant(state)

    def _service_time(self) -> float:
        with self._cond:
            busy = self._executing / max(1, self.free_seats())
        config = self.config
        return config.service_time * (1.0 + config.slowdown * min(1.0, busy))

    def _too_many(self, why: str) -> ApiError:
        return ApiError(
            429,
            "TooManyRequests",
            f"Too many requests, please try again later ({why}).",
            retry_after=self.config.retry_after,
        )

    def state(self) -> dict[str, object]:
        """The level's settings, capacity now, and each flow's served/rejected counts."""
        with self._cond:
            flows = {
                name: {
                    "served": f.served,
                    "rejected": f.rejected,
                    "queued": len(f.queue),
                    "executing": f.executing,
                }
                for name, f in self._flows.items()
            }
            return {
                **self.config.to_json(),
                "freeSeats": self.free_seats(),
                "capacity": self.capacity(),
                "executing": self._executing,
                "flows": flows,
            }

    def counts(self) -> tuple[int, int]:
        """(served, rejected) over every flow."""
        with self._cond:
            flows: Sequence[_Flow] = list(self._flows.values())
            return sum(f.served for f in flows), sum(f.rejected for f in flows)

    def reset_counts(self) -> None:
        with self._cond:
            for state in self._flows.values():
                state.served = state.rejected = 0
