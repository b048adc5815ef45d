"""Real, in-memory implementations of the core's ports, for tests of execpods and of your code.

These are not mocks: `InMemoryPodOperations` is a tiny pod registry that honours the same
`PodSelector` semantics as the API, `RecordingDriver` is a driver that remembers what it was told,
and `DeterministicSnapshotsStore` is SPARK-24248's test store, whose deliveries happen only when
the test calls `notify_subscribers()`. `compose_deterministic` assembles a backend over them
through the one composition root, and hands a test the parts it drives round by round.

Import everything from here. The package is split only so each part stays small to read: the
deterministic store (`store`), the doubles of the other ports (`doubles`), executor pod values
(`factories`) and the composed rig (`rig`).
"""

from execpods.core.testing.doubles import (
    HOSTNAME_LABEL,
    DeleteCall,
    InMemoryIdLedger,
    InMemoryPodOperations,
    RecordingDriver,
    RecordingObserver,
    SimpleExecutorPodBuilder,
)
from execpods.core.testing.factories import (
    TEST_APP_ID,
    deleted_executor,
    executor_pod,
    failed_executor,
    pending_executor,
    running_executor,
    succeeded_executor,
    terminating_executor,
    unknown_executor,
)
from execpods.core.testing.rig import Composed, HandFed, compose_deterministic, composed_store
from execpods.core.testing.store import DeterministicSnapshotsStore

__all__ = [
    "HOSTNAME_LABEL",
    "TEST_APP_ID",
    "Composed",
    "DeleteCall",
    "DeterministicSnapshotsStore",
    "HandFed",
    "InMemoryIdLedger",
    "InMemoryPodOperations",
    "RecordingDriver",
    "RecordingObserver",
    "SimpleExecutorPodBuilder",
    "compose_deterministic",
    "composed_store",
    "deleted_executor",
    "executor_pod",
    "failed_executor",
    "pending_executor",
    "running_executor",
    "succeeded_executor",
    "terminating_executor",
    "unknown_executor",
]
