"""Which labels mark a pod as an executor of an application.

The defaults are Spark's, so `kubectl get pods -l spark-app-selector=...` and every existing Spark
tool keep working on pods execpods creates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from execpods.core.idlists import INT64_MAX
from execpods.core.pods import ExecutorPod

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorLabels:
    """The label keys (and the executor role value) that identify an application's executors."""

    app_id: str = "spark-app-selector"
    role: str = "spark-role"
    executor_role: str = "executor"
    executor_id: str = "spark-exec-id"
    resource_profile_id: str = "spark-exec-resourceprofile-id"
    inactive: str = "spark-exec-inactive"
    """Set to "true" on a finished pod kept by `deleteOnTermination=false`: the sources leave
    such pods out, so the driver hears of the executor once however long the pod stays."""

    def is_inactive(self, labels: Mapping[str, str]) -> bool:
        return labels.get(self.inactive) == "true"

    def for_app(self, app_id: str) -> dict[str, str]:
        """The equality labels every executor pod of `app_id` carries."""
        return {self.app_id: app_id, self.role: self.executor_role}

    def for_executor(self, app_id: str, executor_id: int) -> dict[str, str]:
        labels = self.for_app(app_id)
        labels[self.executor_id] = str(executor_id)
        return labels

    def executor_id_of_pod(self, pod: ExecutorPod) -> int | None:
        """The id the conversion parsed, else the label's (see `executor_id_of`)."""
        if pod.executor_id is not None:
            return pod.executor_id
        return self.executor_id_of(pod.name, pod.labels)

    def executor_id_of(self, name: str, labels: Mapping[str, str]) -> int | None:
        """The executor id a pod carries, or None (with a warning) when it is missing or invalid.

        A pod someone labelled by hand must never take a reconciler down, so this never raises.
        """
        raw = labels.get(self.executor_id)
        if raw is None:
            logger.warning("Skipping pod %s: it has no %s label.", name, self.executor_id)
            return None
        executor_id = parse_executor_id(raw)
        if executor_id is not None:
            return executor_id
        if not (raw.isascii() and raw.isdigit()):
            logger.warning(
                "Skipping pod %s: its %s label %r is not a non-negative integer.",
                name,
                self.executor_id,
                raw,
            )
            return None
        if len(raw) > 1 and raw[0] == "0":
            # "0007" would alias executor 7 beside the real one, and a kill of "7" selects only
            # the label "7": one id, one spelling, as the allocator writes it.
            logger.warning(
                "Skipping pod %s: its %s label %r is not written as executor ids are (no leading "
                "zeros).",
                name,
                self.executor_id,
                raw[:40],
            )
            return None
        # A valid label value, but no executor id: the contract carries ids as int64.
        logger.warning(
            "Skipping pod %s: its %s label %r is beyond 64 bits.", name, self.executor_id, raw
        )
        return None


def parse_executor_id(raw: str | None) -> int | None:
    """An executor id label's value as an id (a decimal integer up to 2^63-1, written as the
    allocator writes it: no leading zeros), else None."""
    if raw is None or not (raw.isascii() and raw.isdigit()):
        return None
    if len(raw) > 1 and raw[0] == "0":
        return None
    # The length first: int() refuses (ValueError) strings of over 4,300 digits.
    if len(raw) > len(str(INT64_MAX)):
        return None
    executor_id = int(raw)
    return executor_id if executor_id <= INT64_MAX else None


SPARK_LABELS = ExecutorLabels()
"""Spark's label keys: the default everywhere."""
