"""Issue 32 item 4 (R9, the lifecycle part): executors the driver killed, whose deletion the
watch missed, are reported as soon as a full list taken after the kill lacks them.

On `128638e` such an executor waited for `spark.kubernetes.executor.missingPodDetectDelta`
after its registration (SPARK-33711's guard against a pod that registered before any list could
show it): a kill during a watch gap reached the driver 30-60 s late although the snapshot was
right within seconds. A kill is different: the pod existed (the driver killed it) and is gone.
"""

from __future__ import annotations

from execpods.core import CoreSettings
from execpods.core.testing import running_executor

from tests.core.conftest import LifecycleRig

DELTA = CoreSettings().missing_pod_detect_delta


def test_a_killed_executor_a_later_full_list_lacks_is_reported_at_once(
    life: LifecycleRig,
) -> None:
    life.clock.advance(100.0)
    life.driver.known = {1, 2}
    life.driver.registered_at = {1: 100.0, 2: 100.0}
    life.store.replace_snapshot([running_executor(1), running_executor(2)])
    life.store.notify_subscribers()
    life.clock.advance(1.0)
    life.manager.executors_killed([1])
    life.clock.advance(1.0)  # the watch missed the deletions; the next full list lacks both
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    ((executor_id, reason),) = life.driver.removed
    assert executor_id == 1, "2 was not killed: it may not be listed yet (SPARK-33711)"
    assert reason.killed_by_driver
    assert (reason.exit_code, reason.exit_caused_by_app) == (-1, False)
    assert "killed by the driver" in reason.message
    assert "removed at once" in reason.message
    assert life.manager.failures.failed_executors == 0
    life.clock.advance(DELTA)
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    assert [i for i, _ in life.driver.removed] == [1, 2], "2 after the delta, as before"


def test_a_list_taken_before_the_kill_does_not_report_it(life: LifecycleRig) -> None:
    life.clock.advance(100.0)
    life.driver.known = {1}
    life.driver.registered_at = {1: 100.0}
    life.store.replace_snapshot([])  # a list from before the pod showed up
    life.clock.advance(1.0)
    life.manager.executors_killed([1])
    life.store.notify_subscribers()
    assert life.driver.removed == []
