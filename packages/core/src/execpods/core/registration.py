"""Registration timeout: a Running executor that never registers with its driver is replaced.

Flink gives a TaskManager `taskmanager.registration.timeout` to register with its
ResourceManager, and KubeRay bounds how long a pod may stay in a state; Spark has no equivalent
(an executor whose process hangs before it registers holds its pod until the application ends).
Here, once a timeout is set (`execpods.executor.registrationTimeout`, or a driver's
`UpdateDriverExecutors.registration_timeout_ms`), an executor whose pod has been Running for that
long while the driver does not know it is deleted; the lifecycle manager then reports its removal
with a reason of its own, and the allocator replaces it as any lost executor.

It only makes sense for a driver that reports its registrations (`UpdateDriverExecutors`, explicit
mode): otherwise the sidecar infers that every Running executor is known, and nothing times out.
Off (0) by default.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from execpods.core.errors import PodOperationError
from execpods.core.features import ExpectRemoval, Feature, FeatureParts, RoundFacts
from execpods.core.ports import (
    UNKNOWN_EXIT_CODE,
    Clock,
    ExecutorExited,
    PodOperations,
)
from execpods.core.settingkit import SettingsBase, duration_setting
from execpods.core.states import ExecutorState

__all__ = ["REGISTRATION_TIMEOUT_KEY", "RegistrationSettings", "RegistrationTimeout", "plug"]

logger = logging.getLogger(__name__)

REGISTRATION_TIMEOUT_KEY = "execpods.executor.registrationTimeout"


def _non_negative(value: float) -> str | None:
    return None if value >= 0 else "must not be negative"


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistrationSettings(SettingsBase):
    """Registration timeout (Flink's taskmanager.registration.timeout) for executors."""

    timeout: float = duration_setting(
        REGISTRATION_TIMEOUT_KEY,
        "0s",
        "How long an executor may run without the driver knowing it (UpdateDriverExecutors, "
        "explicit) before its pod is deleted and it is replaced; 0 = never. A driver may set it "
        "with UpdateDriverExecutors.registration_timeout_ms.",
        rule=_non_negative,
    )


def plug(settings: RegistrationSettings, parts: FeatureParts) -> RegistrationTimeout:
    """Always there (off at 0 s): a driver may set a timeout at any time."""
    return RegistrationTimeout(
        timeout=settings.timeout,
        clock=parts.clock,
        pod_operations=parts.pod_operations,
        expect_removal=parts.expect_removal,
    )


class RegistrationTimeout(Feature):
    """Finds Running executors the driver has not registered for too long, and deletes them."""

    def __init__(
        self,
        *,
        timeout: float,
        clock: Clock,
        pod_operations: PodOperations,
        expect_removal: ExpectRemoval,
    ) -> None:
        self._timeout = timeout
        self._clock = clock
        self._pods = pod_operations
        self._expect = expect_removal
        self._lock = threading.Lock()
        self._running_since: dict[int, float] = {}
        self._timed_out: set[int] = set()
        self.replaced = 0
        """Executors deleted for not registering in time."""

    @property
    def timeout(self) -> float:
        return self._timeout

    def set_timeout(self, seconds: float) -> None:
        """Change the timeout (0 turns it off); from the driver, any thread."""
        if seconds < 0:
            raise ValueError(f"the registration timeout must not be negative, not {seconds}")
        with self._lock:
            if seconds != self._timeout:
                logger.info("Executor registration timeout set to %.1f s.", seconds)
            self._timeout = seconds

    def observe(self, facts: RoundFacts) -> None:
        """One check on the round's snapshot (every round, also when nothing changed, since time
        went by)."""
        now = self._clock.monotonic()
        with self._lock:
            timeout = self._timeout
            if timeout <= 0:
                self._running_since.clear()
                return
        due: list[tuple[int, str, float]] = []
        with self._lock:
            running = set()
            for executor_id, state in facts.snapshot.executor_pods.items():
                if state.state is not ExecutorState.RUNNING or executor_id in facts.known:
                    continue
                running.add(executor_id)
                since = self._running_since.setdefault(executor_id, now)
                if now - since >= timeout and executor_id not in self._timed_out:
                    due.append((executor_id, state.pod.name, now - since))
            for executor_id in set(self._running_since) - running:
                del self._running_since[executor_id]
            self._timed_out.update(i for i, _, _ in due)
        for executor_id, name, waited in due:
            self._replace(executor_id, name, waited, timeout)

    def _replace(self, executor_id: int, name: str, waited: float, timeout: float) -> None:
        message = (
            f"The executor with id {executor_id} ran for {waited:.1f} s without registering with "
            f"the driver ({REGISTRATION_TIMEOUT_KEY} is {timeout:.1f} s): its pod {name} was "
            "deleted and the executor is replaced."
        )
        reason = ExecutorExited(
            exit_code=UNKNOWN_EXIT_CODE, exit_caused_by_app=False, message=message
        )
        self._expect(executor_id, reason)
        logger.warning(message)
        try:
            self._pods.delete(name)
        except PodOperationError as error:
            logger.warning("Could not delete pod %s of executor %d: %s", name, executor_id, error)
            with self._lock:
                self._timed_out.discard(executor_id)  # tried again next round
            return
        self.replaced += 1
