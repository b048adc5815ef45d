"""Reconnecting streams: the back-off policy, and the driver's view the client re-sends.

A snapshot stream breaks when the network does, or when the sidecar is killed and restarted. The
sidecar numbers its removal decisions and every stream message carries the position reached
(`StreamUpdate.position`), so the client reopens the stream from the last position it handed to
the caller: it receives each removal it missed exactly once, and the current snapshot in full
(flagged `resync` when the sidecar could not say what was missed: a new sidecar process, or a gap
older than the sidecar's window).

Only errors that mean "the sidecar could not be reached" are retried (`Reconnect.codes`,
UNAVAILABLE by default); any other end of a call is the server's answer and is raised as before.
A stream the server ends cleanly (a sidecar shutting down) ends the iteration.

After reopening, the client re-sends the driver's view (what it told `update_driver_executors`,
less the executors the stream has since reported removed), since a restarted sidecar has lost it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import grpc
from execpods.client.model import StreamPosition
from execpods.v1 import allocator_pb2 as pb


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconnect:
    """How a stream reconnects: exponential back-off with full jitter, and when to give up."""

    initial_backoff: float = 0.1
    """Seconds before the first retry (jittered: a random share of it)."""
    max_backoff: float = 5.0
    """The longest wait between two attempts."""
    give_up_after: float = 60.0
    """Seconds of failing attempts in a row after which the last error is raised."""
    codes: frozenset[grpc.StatusCode] = field(
        default_factory=lambda: frozenset({grpc.StatusCode.UNAVAILABLE})
    )
    """The status codes that mean the sidecar was unreachable, and are retried."""

    def __post_init__(self) -> None:
        if not 0 < self.initial_backoff <= self.max_backoff:
            raise ValueError("need 0 < initial_backoff <= max_backoff")
        if self.give_up_after < 0:
            raise ValueError("give_up_after must not be negative")


class Backoff:
    """One stream's retry schedule; `reset` after every message received."""

    def __init__(
        self,
        policy: Reconnect,
        *,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._jitter = jitter
        self._attempt = 0
        self._failing_since: float | None = None

    def reset(self) -> None:
        self._attempt = 0
        self._failing_since = None

    def next_delay(self, error: grpc.RpcError) -> float | None:
        """Seconds to wait before reconnecting after `error`, or None to raise it."""
        if error.code() not in self._policy.codes:
            return None
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since >= self._policy.give_up_after:
            return None
        growth = float(2**self._attempt)
        ceiling = min(self._policy.max_backoff, self._policy.initial_backoff * growth)
        self._attempt += 1
        return ceiling * (0.5 + 0.5 * self._jitter())


class DriverViewMemory:
    """What the driver told `update_driver_executors`, to re-send after a reconnect.

    Thread-safe: the blocking client may update it from one thread while a stream reads on another.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registered: set[int] = set()
        self._released: set[int] = set()
        self._registered_at_ms: dict[int, int] = {}
        self._explicit = False
        self._used = False
        self._registration_timeout_ms: int | None = None

    def note_update(
        self,
        registered: Iterable[int],
        released: Iterable[int],
        *,
        explicit: bool,
        registered_at_ms: Mapping[int, int] | None = None,
        registration_timeout_ms: int | None = None,
    ) -> None:
        with self._lock:
            self._used = True
            if registration_timeout_ms is not None:
                self._registration_timeout_ms = registration_timeout_ms
            self._registered.update(registered)
            self._registered_at_ms.update(registered_at_ms or {})
            self._released.update(released)
            self._explicit = self._explicit or explicit

    def note_removed(self, executor_ids: Iterable[int]) -> None:
        """Executors the stream reported removed: never re-sent (they are gone for good)."""
        with self._lock:
            for executor_id in executor_ids:
                self._registered.discard(executor_id)
                self._released.discard(executor_id)
                self._registered_at_ms.pop(executor_id, None)

    def request(self) -> pb.UpdateDriverExecutorsRequest | None:
        """The update that rebuilds the sidecar's view, or None if the driver never sent one."""
        with self._lock:
            if not self._used:
                return None
            request = pb.UpdateDriverExecutorsRequest(
                registered=sorted(self._registered),
                released=sorted(self._released),
                explicit=self._explicit,
                registered_at_ms=self._registered_at_ms,
            )
            if self._registration_timeout_ms is not None:
                request.registration_timeout_ms = self._registration_timeout_ms
            return request


def stream_request(
    batch_interval_ms: int, position: pb.StreamPosition | None
) -> pb.StreamSnapshotsRequest:
    """A `StreamSnapshotsRequest`, resuming after `position` when there is one."""
    request = pb.StreamSnapshotsRequest(batch_interval_ms=batch_interval_ms)
    if position is not None:
        request.resume_from.CopyFrom(position)
    return request


def position_to_proto(position: StreamPosition) -> pb.StreamPosition:
    return pb.StreamPosition(incarnation=position.incarnation, sequence=position.sequence)
