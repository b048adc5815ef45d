"""Driver readiness: `spark.kubernetes.allocation.driver.readinessTimeout`, as Spark.

Spark's `ExecutorPodsAllocator.start` waits, once, for the driver pod to be Ready before it
creates the first executors (executors that start before the driver can take their connection
fail and are replaced, which costs a round of pods); when the wait times out it logs and creates
them anyway. Only a configured driver pod (`spark.kubernetes.driver.pod.name`) is waited for.
The wait is here, over an injected probe, clock and sleep, so it is tested in virtual time; the
sidecar runs it before starting the backend.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from execpods.core.errors import PodOperationError
from execpods.core.ports import Clock

logger = logging.getLogger(__name__)

POLL_INTERVAL = 0.1
"""Seconds between two looks at the driver pod while waiting."""


def wait_for_driver_ready(
    is_ready: Callable[[], bool],
    *,
    timeout: float,
    clock: Clock,
    sleep: Callable[[float], None],
    driver: str = "the driver pod",
    interval: float = POLL_INTERVAL,
) -> bool:
    """Wait until `is_ready()` or `timeout` seconds passed; returns whether the driver is ready.

    A probe that fails (`PodOperationError`) counts as not ready yet, as a timeout would: the
    executors are created either way.
    """
    deadline = clock.monotonic() + timeout
    while True:
        try:
            if is_ready():
                return True
        except PodOperationError as error:
            logger.debug("Could not read %s's readiness: %s", driver, error)
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            logger.warning(
                "%s was not ready within spark.kubernetes.allocation.driver.readinessTimeout "
                "(%gs); creating executors anyway.",
                driver[:1].upper() + driver[1:],
                timeout,
            )
            return False
        sleep(min(interval, remaining))
