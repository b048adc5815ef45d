"""A set of executor ids kept for the life of a backend, as runs of consecutive ids.

The lifecycle manager must remember every executor it reported removed for as long as it runs:
a pod that lingers (a finalizer, a denied delete) must never be reported, or counted as a
failure, twice. Spark forgets after `deletedExecutorsCacheTimeout`; a set of ints would grow by
about 60 bytes an executor forever. Ids are issued in order and mostly leave in runs, so this
keeps sorted, disjoint runs [start, end]: memory is two ints per run of consecutive ids, at
most one run per id held (the worst case, every other id), and an application whose executors
have all gone holds a single run however many there were.
"""

from __future__ import annotations

import threading
from bisect import bisect_right


class IdRuns:
    """Ints added for good; membership and adds cost O(log runs)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._lock = threading.Lock()

    def add(self, value: int) -> None:
        with self._lock:
            starts, ends = self._starts, self._ends
            i = bisect_right(starts, value)  # runs[i-1] starts at or before value
            if i > 0 and value <= ends[i - 1] + 1:
                if value <= ends[i - 1]:
                    return
                ends[i - 1] = value  # extends the run before it
                if i < len(starts) and starts[i] == value + 1:  # and now touches the next
                    ends[i - 1] = ends[i]
                    del starts[i], ends[i]
                return
            if i < len(starts) and starts[i] == value + 1:
                starts[i] = value  # extends the run after it downwards
                return
            starts.insert(i, value)
            ends.insert(i, value)

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        with self._lock:
            i = bisect_right(self._starts, value)
            return i > 0 and value <= self._ends[i - 1]

    @property
    def runs(self) -> int:
        """How many runs are held: what the memory is proportional to."""
        return len(self._starts)

    def __len__(self) -> int:
        with self._lock:
            return sum(e - s + 1 for s, e in zip(self._starts, self._ends, strict=True))
