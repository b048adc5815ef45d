"""Which of a full list and the updates applied while it was in flight is newer, pod by pod.

The poll's list and the watch's updates run on two threads. A list is answered as of the moment
the API server read it, and the watch may apply newer events (the ADDED of a pod created just
after that read) before the list reaches the store. Applied as is, the list would drop such a
pod: the allocator has already forgotten its request (a snapshot showed the pod), the newest
snapshot lacks it, so it counts nowhere and is created again. Spark's poll replaces the snapshot
unconditionally and has this race too; at its 30 s default interval it is merely rarer.

So the store counts its writes. A source takes a mark before it asks for a list; when the list
arrives, every executor written after the mark keeps the state that write gave it (the watch's
view is at least as new as the list for that pod; a later list repairs anything else), and the
list supplies the rest. If another full list was applied after the mark (the watch listed again),
which of the two lists is newer cannot be told, so the one already applied stands and this one is
dropped: the next poll repairs whatever it missed. No resourceVersion is compared: the API makes
them opaque.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from execpods.core.idlists import summarize_ids
from execpods.core.ports import ListMark
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ObservedPod

__all__ = ["WriteLog"]

logger = logging.getLogger(__name__)


class WriteLog:
    """A store's count of writes, and the last write to touch each executor while a list is out.

    Only while a mark is out (taken and no full list applied since) does it note which executors
    each update wrote: an update before every outstanding mark is never kept, and a sidecar that
    does not poll, or between polls, holds nothing. It then holds at most one entry per executor.
    Not thread-safe: the store calls it under its own lock.
    """

    __slots__ = ("_last_list", "_listing", "_touched", "_writes")

    def __init__(self) -> None:
        self._writes = 0
        self._last_list = 0
        """The write count of the last full list applied."""
        self._listing = False
        """A mark was handed out after the last full list."""
        self._touched: dict[int, int] = {}
        """Executor id -> the write count of its last update while a mark was out."""

    def __len__(self) -> int:
        """How many executors it holds (for leak tests)."""
        return len(self._touched)

    def mark(self) -> ListMark:
        self._listing = True
        return ListMark(self._writes)

    def updated(self, executor_ids: Iterable[int]) -> None:
        """An update wrote these executors' states."""
        self._writes += 1
        if self._listing:
            for executor_id in executor_ids:
                self._touched[executor_id] = self._writes

    def full_list(
        self,
        listed: ExecutorPodsSnapshot,
        current: ExecutorPodsSnapshot,
        since: ListMark | None,
    ) -> ExecutorPodsSnapshot | None:
        """The snapshot to publish for `listed`, or None when a newer full list overtook it.

        `listed` is the list as a snapshot, `current` the store's snapshot now, `since` the mark
        taken before the list was asked for (None: the list replaces everything).
        """
        if since is not None and self._last_list > since.writes:
            logger.debug(
                "Dropping a full list of %d executor pods: another list was applied after it "
                "was asked for.",
                len(listed),
            )
            return None
        kept: dict[int, ObservedPod] = {}
        if since is not None:
            for executor_id, written in self._touched.items():
                observed = current.get(executor_id)
                if written > since.writes and observed is not None:
                    kept[executor_id] = observed
        self._writes += 1
        self._last_list = self._writes
        self._listing = False
        self._touched.clear()
        if not kept:
            return listed
        logger.debug(
            "A full list of %d executor pods is older than the updates of executors %s applied "
            "while it was in flight: keeping their updated states.",
            len(listed),
            summarize_ids(sorted(kept)),
        )
        return ExecutorPodsSnapshot(
            executor_pods=listed.executor_pods.update(kept),
            full_snapshot_ts=listed.full_snapshot_ts,
            labels=listed.labels,
            classifier=listed.classifier,
        )
