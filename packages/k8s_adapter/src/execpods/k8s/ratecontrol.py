"""Congestion control of API calls: as fast as the API server allows, never faster.

A static client rate (client-go's QPS and burst, execpods' old token bucket) is wrong both ways: it
is too slow for an idle API server and too fast for one that is busy with other tenants, which it
learns only from 429s after the fact. The API server already says how it is doing. API Priority
and Fairness (APF, on by default) gives each flow (a client identity) a fair share of its
concurrency seats and queues what does not fit: as a flow sends faster than its share, its queue
fills and its answers come later; when the queue is full, or a request waited too long in it, the
answer is 429 with a Retry-After. A 5xx means the server, or what is behind it, is failing.

`RateController` turns those answers into the rate the client may send at, as TCP turns acks into
a window (additive increase, multiplicative decrease, which is what makes independent flows
converge to fair shares without coordinating; Jacobson 1988, Chiu and Jain 1989):

- **slow start**: until the first sign of congestion the rate grows by one call a second per clean
  answer, so it doubles every second the client is busy, from `initial` towards `ceiling`;
- **additive increase**: after that, each clean answer adds `increase / rate`, i.e. `increase`
  calls a second per second of full use;
- only a client that uses its rate earns more (`demand`: the limiter tells whether calls came
  at least at `DEMAND` of the rate in the last second), as TCP grows no window an application
  does not fill (RFC 7661): a client held back by something else (its creates in flight, its own
  CPU) would otherwise raise a rate it never tests against the server;
- on latency well above its recent floor (TCP Vegas' and BBR's signal: a queue is building),
  when the client also sends faster than the server delivers (the rate above `QUEUE_GROWING`
  times the answers of the last second) and is past slow start: the rate comes down to what the
  server delivered, by `latency_decrease` at most, never below it. Latency measured by a client
  includes the client's own waits (its CPU, its GIL, a server process starved of CPU on the same
  machine): on a machine that Spark's JVM keeps busy, a fixed cut on latency read the busy machine
  as a congested server, again and again (issue 34: the plugin run took 10 to 13 s against 8 s
  with the static bucket, and the sidecar alone was held at 400 creates a second by an idle
  kubesim; holding the rate on latency alone held it at its start). A client whose answers come
  as fast as it sends keeps growing: its creates in flight are bounded
  (`execpods.allocation.batch.concurrency`), so a server that is merely slow never holds more than
  those of it; slow start ends only on a 429 or a 5xx;
- **multiplicative decrease** on a 429, a 5xx (or no answer at all), by `decrease`; but never
  below `DELIVERED` of the rate the
  server delivered (clean answers a second, over the last second: BBR's delivery rate). A server
  that caps its rate, or whose seats are full, delivers its capacity however fast it is asked:
  halving from there ran a rate-capped server at about 0.75 of its cap (the rate saws between
  half the cap and the cap), where the delivery rate puts the client just under the cap at once.
  A burst of 5xx does not empty what the server delivered in the second before it, so a short
  burst costs a tenth of the rate, not half. Latency is smoothed per verb (a list of 500 pods
  is slower than a create without anything being wrong) and compared with the least latency of
  that verb in the last `floor_window` seconds: slow means above both `latency_factor` x the floor
  and the floor + `latency_margin` (100 ms: a millisecond floor does not make a hiccup of a
  CPU-starved client, tens of milliseconds, congestion; measured: with 50 ms this sidecar ran at
  half its idle-server rate on a loaded machine, with no fewer 429s on a capped one). The window
  is short (10 s): a machine that stays busy (Spark's JVM beside the sidecar on two cores) raises
  every latency for good, and after one window that is the new floor, not a congested server,
  while a queue at the server keeps growing past any floor until it answers 429;
- one decrease per `holdoff` (at least twice the latency of the answer that caused it): the
  answers to calls already in flight when the server pushed back say nothing new, as TCP reduces
  its window once per window of losses;
- **Retry-After** belongs to the request it refused: the gateway sends that request again after
  it, as client-go does, and the other calls go on at the rate (a 429 is one signal here, not a
  pause of every call);
- the rate never leaves [`floor`, `ceiling`].

The controller is pure: no I/O, no threads, time from an injected monotonic clock, so each rule is
proved with a manual clock (tests/k8s/test_rate_controller.py). `congestion.AdaptiveRateLimiter`
paces calls at `rate` and feeds every answer back. Only the adapter uses it, so it lives here and
not in core: core decides what to create, the adapter how fast it may ask the API server.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["CongestionConfig", "RateController", "Signal"]

DEMAND = 0.7
"""The share of its rate a client must use to earn a higher one."""
SMOOTHING = 0.25
"""Weight of a new latency in its verb's moving average (a few answers to notice a queue)."""
MIN_SAMPLES = 8
"""Answers of a verb before its latency counts as a signal (a floor of one sample is no floor)."""
DELIVERED = 0.9
"""A decrease never goes below this share of the rate the server delivered in the last second."""
QUEUE_GROWING = 1.2
"""A rate this much above what the server delivered, with late answers: a queue is growing."""
DELIVERY_WINDOW = 1.0
"""Seconds of clean answers the delivery rate counts."""


class Signal(enum.Enum):
    """What one answer told the controller."""

    CLEAN = "clean"
    THROTTLED = "throttled"
    SERVER_ERROR = "server-error"
    SLOW = "slow"
    """Latency well above its floor while sending faster than the server delivers: down to
    what it delivered."""
    IGNORED = "ignored"
    """A congestion signal inside the holdoff of the previous decrease."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CongestionConfig:
    """The controller's bounds and gains (calls a second; seconds)."""

    floor: float
    ceiling: float
    initial: float
    increase: float = 50.0
    decrease: float = 0.5
    latency_decrease: float = 0.7
    latency_factor: float = 3.0
    latency_margin: float = 0.1
    floor_window: float = 10.0
    min_holdoff: float = 0.2

    def __post_init__(self) -> None:
        finite = (self.floor, self.ceiling, self.initial, self.increase, self.latency_margin)
        if not all(math.isfinite(v) for v in finite):
            raise ValueError("congestion control needs finite rates")
        if not 0 < self.floor <= self.ceiling:
            raise ValueError(
                f"the rate floor ({self.floor}) must be positive and not above the ceiling "
                f"({self.ceiling})"
            )
        if not 0 < self.decrease < 1 or not 0 < self.latency_decrease < 1:
            raise ValueError("decrease factors must be between 0 and 1")
        if self.latency_factor <= 1 or self.increase <= 0:
            raise ValueError("latency_factor must exceed 1 and increase must be positive")

    @property
    def start(self) -> float:
        """The first rate: `initial`, within the bounds."""
        return min(self.ceiling, max(self.floor, self.initial))


@dataclass(slots=True)
class _Latency:
    """One verb's recent latency: a moving average and the windowed minimum (a monotonic deque)."""

    average: float = 0.0
    samples: int = 0
    minima: deque[tuple[float, float]] = field(default_factory=deque)

    def add(self, now: float, seconds: float, window: float) -> None:
        self.average = (
            seconds if self.samples == 0 else (self.average + SMOOTHING * (seconds - self.average))
        )
        self.samples += 1
        while self.minima and self.minima[-1][1] >= seconds:
            self.minima.pop()
        self.minima.append((now, seconds))
        while self.minima[0][0] < now - window:
            self.minima.popleft()

    @property
    def floor(self) -> float:
        return self.minima[0][1]


class RateController:
    """AIMD on the API's answers, with a latency signal, within [floor, ceiling] (see module)."""

    def __init__(self, config: CongestionConfig, *, clock: Callable[[], float]) -> None:
        self.config = config
        self._clock = clock
        self._rate = config.start
        self._slow_start = True
        self._holdoff_until = -math.inf
        self._delivered: deque[float] = deque()
        self._latency: dict[str, _Latency] = {}
        self.signals: dict[Signal, int] = dict.fromkeys(Signal, 0)

    @property
    def rate(self) -> float:
        """Calls a second the client may make now."""
        return self._rate

    @property
    def slow_start(self) -> bool:
        """Still doubling: no sign of congestion seen yet."""
        return self._slow_start

    def delivered(self) -> float:
        """Clean answers a second over the last `DELIVERY_WINDOW`: what the server delivers."""
        self._forget(self._clock())
        return len(self._delivered) / DELIVERY_WINDOW

    def _forget(self, now: float) -> None:
        delivered = self._delivered
        while delivered and delivered[0] <= now - DELIVERY_WINDOW:
            delivered.popleft()

    def answered(
        self,
        *,
        verb: str,
        seconds: float,
        status: int,
        retry_after: float | None = None,
        demand: bool = True,
    ) -> Signal:
        """One answer (HTTP `status`, 0 when none came) to a `verb` call that took `seconds`;
        `demand`: the client used its rate lately (else a clean answer earns no increase).
        `retry_after` is the refused request's own (the gateway waits it out for that request)."""
        now = self._clock()
        self._forget(now)
        if status == 429:
            signal = self._decrease(Signal.THROTTLED, self.config.decrease, now, seconds)
        elif status >= 500 or status == 0:
            signal = self._decrease(Signal.SERVER_ERROR, self.config.decrease, now, seconds)
        elif self._slow(verb, now, seconds) and self._queue_growing():
            self._delivered.append(now)
            signal = self._decrease(
                Signal.SLOW, self.config.latency_decrease, now, seconds, share=1.0
            )
            if signal is Signal.IGNORED:
                signal = Signal.SLOW
        else:
            self._delivered.append(now)
            if demand:
                self._increase()
            signal = Signal.CLEAN
        self.signals[signal] += 1
        return signal

    def _slow(self, verb: str, now: float, seconds: float) -> bool:
        latency = self._latency.get(verb)
        if latency is None:
            latency = self._latency[verb] = _Latency()
        latency.add(now, max(0.0, seconds), self.config.floor_window)
        if latency.samples < MIN_SAMPLES:
            return False
        floor = latency.floor
        limit = max(floor * self.config.latency_factor, floor + self.config.latency_margin)
        return latency.average > limit

    def _queue_growing(self) -> bool:
        """Sending faster than the server delivers, past slow start (where the rate runs ahead
        of the answers by design): only then is a late answer a queue at the server."""
        delivered = len(self._delivered) / DELIVERY_WINDOW
        return not self._slow_start and self._rate > QUEUE_GROWING * delivered

    def _increase(self) -> None:
        step = 1.0 if self._slow_start else self.config.increase / self._rate
        self._rate = min(self.config.ceiling, self._rate + step)

    def _decrease(
        self, signal: Signal, factor: float, now: float, seconds: float, share: float = DELIVERED
    ) -> Signal:
        """Cut to `factor` of the rate, but not below `share` of what the server delivered (and
        never up); once per holdoff."""
        if now < self._holdoff_until:
            return Signal.IGNORED
        self._slow_start = False
        delivered = share * len(self._delivered) / DELIVERY_WINDOW
        cut = max(self.config.floor, min(self._rate, max(self._rate * factor, delivered)))
        if cut < self._rate:  # a signal that cut nothing starts no holdoff
            self._rate = cut
            self._holdoff_until = now + max(self.config.min_holdoff, 2.0 * seconds)
        return signal
