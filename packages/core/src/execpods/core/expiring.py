"""A set whose members expire a fixed time after they were added (Guava's expireAfterWrite)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from execpods.core.clock import Clock


class ExpiringSet:
    """Remembers ints for `ttl` seconds of `clock` time; memory stays bounded by what is live."""

    def __init__(self, *, ttl: float, clock: Clock) -> None:
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, not {ttl}")
        self._ttl = ttl
        self._clock = clock
        self._added: OrderedDict[int, float] = OrderedDict()
        self._lock = threading.Lock()

    def _evict(self, now: float) -> None:
        while self._added:
            key, added = next(iter(self._added.items()))
            if now - added < self._ttl:
                return
            del self._added[key]

    def add(self, key: int) -> None:
        with self._lock:
            now = self._clock.monotonic()
            self._evict(now)
            self._added.pop(key, None)
            self._added[key] = now

    def __contains__(self, key: object) -> bool:
        with self._lock:
            self._evict(self._clock.monotonic())
            return key in self._added

    def __len__(self) -> int:
        with self._lock:
            self._evict(self._clock.monotonic())
            return len(self._added)
