"""The pending timeout end to end: a sidecar over real HTTP to the simulator, observed over gRPC.

One node of 2 cores, a target of 3 executors of 1 core: the third cannot be scheduled. Past
`execpods.executor.pendingTimeout` each `pendingTimeoutAction` does what it says, with a notice
that names the scheduler's reason and the action:

- `wait`: the executor keeps waiting (its pod stays, nothing is removed or counted);
- `replace`: its pod is deleted, its removal is not the application's doing, another is requested;
- `lowerTarget`: its pod is deleted and the effective target lowered to what runs (no new
  request), until the driver sets a target again.
"""

from __future__ import annotations

import re
import time

import pytest
from execpods.client import AllocatorClient, ExecutorRemoval, ExecutorState, StreamUpdate
from execpods.kubesim import ClusterConfig, KubeSim

from tests.sidecar.capacity_support import collect, notices, sidecar_on
from tests.sidecar.conftest import SidecarOnFactory, app_pods, creates, wait_for
from tests.sidecar.test_observability import METRICS_CONF, scrape_until, value

UNSCHEDULABLE = "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."


def _pod_ids(sim: KubeSim, app_id: str) -> set[int]:
    return {
        int(pod["metadata"]["labels"]["spark-exec-id"])
        for pod in app_pods(sim, app_id)
        if not pod["metadata"].get("deletionTimestamp")
    }


@pytest.mark.parametrize("action", ["wait", "replace", "lowerTarget"])
def test_each_pending_timeout_action_does_what_it_says_with_a_notice(
    make_sidecar_on: SidecarOnFactory, action: str
) -> None:
    app = f"pending-{action.lower()}"
    cluster = ClusterConfig(nodes=1, node_cpu="2", start_latency=0.1, start_jitter=0.05)
    with KubeSim(cluster=cluster) as sim:
        updates: list[StreamUpdate] = []
        conf = {
            "execpods.executor.pendingTimeout": "1s",
            "execpods.executor.pendingTimeoutAction": action,
            **METRICS_CONF,
        }
        with (
            sidecar_on(sim, make_sidecar_on, app, conf) as sidecar,
            AllocatorClient(sidecar.address) as driver,
            driver.stream_snapshots() as stream,
        ):
            collect(iter(stream), updates)
            driver.request_total(3)
            (message, *_) = wait_for(
                lambda: notices(updates, "pending_timeout"), what="the timeout's notice"
            )
            # Which of the three the scheduler leaves out is its choice: the notice names it.
            named = re.match(
                r"1 executors of resource profile 0 \((\d)\) have been pending longer than "
                r"execpods\.executor\.pendingTimeout=1s ",
                message,
            )
            assert named is not None, message
            stuck = int(named.group(1))
            running = {1, 2, 3} - {stuck}
            assert UNSCHEDULABLE in message
            assert f"execpods.executor.pendingTimeoutAction={action}: " in message
            assert ".. " not in message, "one full stop between the reason and the action"

            def removed() -> list[ExecutorRemoval]:
                return [r for u in list(updates) for r in u.removed]

            address = sidecar.server.ops.metrics_address
            if action == "wait":
                assert "still waiting for them" in message
                time.sleep(0.5)  # a few allocation rounds (100 ms): nothing is done to it
                assert _pod_ids(sim, app) == {1, 2, 3}
                assert not removed()
                assert creates(sim) == 3
            elif action == "replace":
                (removal,) = wait_for(removed, what="the timed-out executor removed")
                assert (removal.executor_id, removal.exit_caused_by_app) == (stuck, False)
                assert "pendingTimeout" in removal.message
                wait_for(lambda: _pod_ids(sim, app) == running | {4}, what="another requested")
            else:
                assert "effective target lowered to 2" in message
                (removal,) = wait_for(removed, what="the timed-out executor removed")
                assert (removal.executor_id, removal.exit_caused_by_app) == (stuck, False)
                wait_for(lambda: _pod_ids(sim, app) == running, what="its pod deleted")
                lowered = scrape_until(
                    address,
                    lambda s: (
                        value(s, "execpods_effective_target_executors", resource_profile="0") == 2
                    ),
                    "the lowered target in the metrics",
                )
                assert value(lowered, "execpods_target_executors", resource_profile="0") == 3
                time.sleep(0.5)  # a few allocation rounds: none requests it again
                assert creates(sim) == 3
                # A new target from the driver lifts the lowering (the same target again does
                # not: it is not new).
                driver.request_total(4)
                wait_for(lambda: creates(sim) == 5, what="two requested again")
            latest = next(u.latest for u in reversed(list(updates)) if u.latest)
            assert latest.count(ExecutorState.RUNNING) >= 2
            assert sidecar.runtime.backend.failed_executors == 0
            assert not any(u.application_failure for u in list(updates))
