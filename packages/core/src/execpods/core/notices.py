"""Notices: what the allocation tells the driver besides pod states, through one hub.

Every part that has something to say (the creates, the id ledger, a feature) is handed the
backend's one `NoticeHub` when it is made, and calls `notify`; every stream, the metrics and
tests listen with `add_listener`. Nobody wires a notify callback after construction, so a part
that was built can always speak, and there is one place to read who hears what.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["AllocatorNotice", "NoticeHub", "NoticeKind", "NoticeListener"]

logger = logging.getLogger(__name__)


class NoticeKind(enum.Enum):
    """What the allocator tells the driver about, besides pod states."""

    CREATE_REFUSED = "create_refused"
    CREATE_THROTTLED = "create_throttled"
    CREATE_FAILED = "create_failed"
    ALLOCATION_MAXIMUM_REACHED = "allocation_maximum_reached"
    ID_RESERVATION_FAILED = "id_reservation_failed"
    """The id ledger could not be written: no id above its mark is issued until it is."""
    RECOVERY_MODE = "recovery_mode"
    """An executor was lost to OOM: executors created from now on are recovery-mode ones."""
    NODE_BLOCKED = "node_blocked"
    NODE_UNBLOCKED = "node_unblocked"
    QUOTA_EXCEEDED = "quota_exceeded"
    """The namespace's quota refused creates: the profile's effective target is capped."""
    QUOTA_CAP_LIFTED = "quota_cap_lifted"
    ADMISSION_POLICY_REFUSED = "admission_policy_refused"
    """A LimitRange or a quota's constraint refused creates: not counted, backed off."""
    PENDING_TIMEOUT = "pending_timeout"
    """Executors pending longer than execpods.executor.pendingTimeout: kept, replaced, or the
    effective target lowered."""
    CRASH_LOOP_PAUSED = "crash_loop_paused"
    CRASH_LOOP_RESUMED = "crash_loop_resumed"
    FAILURE_RULE = "failure_rule"
    """A failure rule decided a failed executor's failure (FailApplication or Ignore)."""
    ALLOCATION_STALLED = "allocation_stalled"
    """Allocation cannot make progress (`progress.py`); `reason` says why, until RESUMED."""
    ALLOCATION_RESUMED = "allocation_resumed"
    """The stall of the same `reason` is over."""
    ID_LEDGER_DISTRUSTED = "id_ledger_distrusted"
    """The id ledger's mark was not believed (no executor id, below the pods) or was found
    gone, lowered or raised; `reason` says which, and the mark was written again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocatorNotice:
    """One thing the driver should hear about; `count` is how many creates it stands for."""

    kind: NoticeKind
    message: str
    resource_profile_id: int
    count: int = 1
    retry_in: float = 0.0
    """Seconds until the allocator tries again (0 when it does not wait)."""
    reason: str = ""
    """A CamelCase reason, as Kubernetes' (stalls: `progress.py`); empty when the kind says it."""


NoticeListener = Callable[[AllocatorNotice], None]


class NoticeHub:
    """Hands every notice to every listener registered when it is sent (any thread).

    A listener that raises is logged and skipped: a broken stream never silences the others,
    nor fails the round that spoke.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: tuple[NoticeListener, ...] = ()

    def add_listener(self, listener: NoticeListener) -> Callable[[], None]:
        """Call `listener` with every later notice; returns a function that unregisters it."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def unregister() -> None:
            with self._lock:
                self._listeners = tuple(x for x in self._listeners if x is not listener)

        return unregister

    def notify(self, notice: AllocatorNotice) -> None:
        for listener in self._listeners:
            try:
                listener(notice)
            except Exception:
                logger.exception("An allocator notice listener failed")
