"""The inverse of the rebuilder, for tests: full snapshots in, the stream's wire messages out.

It encodes as the contract allows a server to: the first snapshot in full, later ones as deltas of
the executors that changed, and in full whenever asked to or when an executor disappeared (a delta
never removes executors).
"""

from __future__ import annotations

from collections.abc import Sequence

from execpods.client import Snapshot
from execpods.client.convert import snapshot_to_proto
from execpods.v1 import allocator_pb2 as pb


def encode(
    snapshots: Sequence[Snapshot], *, force_full: Sequence[bool] = ()
) -> tuple[list[pb.ExecutorPodsSnapshot], list[bool]]:
    """The wire snapshots, and which of them were sent full."""
    messages: list[pb.ExecutorPodsSnapshot] = []
    fulls: list[bool] = []
    previous: Snapshot | None = None
    for index, snapshot in enumerate(snapshots):
        forced = index < len(force_full) and force_full[index]
        if previous is None or forced or previous.executors.keys() - snapshot.executors.keys():
            messages.append(snapshot_to_proto(snapshot, full=True))
            fulls.append(True)
        else:
            before = previous.executors
            changed = [i for i, v in snapshot.executors.items() if before.get(i) != v]
            messages.append(snapshot_to_proto(snapshot, full=False, only=changed))
            fulls.append(False)
        previous = snapshot
    return messages, fulls
