"""Graceful decommission on scale-down: marking the pods of executors the driver kills.

Spark's `KubernetesClusterSchedulerBackend`, asked to kill or decommission executors, labels
their pods with `spark.kubernetes.executor.decommissionLabel` (value
`spark.kubernetes.executor.decommissionLabelValue`, empty by default) so pod disruption budgets
and other tooling see them leave. It annotates them with
`controller.kubernetes.io/pod-deletion-cost` = `spark.kubernetes.executor.podDeletionCost` only
under its deployment allocator (`spark.kubernetes.allocation.pods.allocator=deployment`, whose
ReplicaSet chooses the victims by that cost): execpods makes no Deployment, so it never sets the
annotation (the property is read and validated, as Spark validates it, and has no effect; issue
33 M3: one useless PATCH per pod). The pods then go with their own
`terminationGracePeriodSeconds` (`spark.kubernetes.executor.terminationGracePeriodSeconds`, set
by the pod builder), during which a decommissioning executor (`spark.decommission.enabled`: the
builder's preStop hook runs `spark.kubernetes.decommission.script`) migrates its blocks.

Marking is one list and one patch per pod: a failure is logged and never stops the kill, as in
Spark, where labelling runs on the side.
"""

from __future__ import annotations

import logging

from execpods.core.errors import PodOperationError
from execpods.core.features import Feature, FeatureParts
from execpods.core.ports import PodOperations, PodSelector
from execpods.core.settings import CoreSettings

__all__ = ["DecommissionMarker", "plug"]

logger = logging.getLogger(__name__)


def plug(parts: FeatureParts) -> DecommissionMarker | None:
    """The feature when `decommissionLabel` is set."""
    marker = DecommissionMarker(settings=parts.settings, pod_operations=parts.pod_operations)
    return marker if marker.enabled else None


class DecommissionMarker(Feature):
    """Sets the decommission label on pods about to go."""

    def __init__(self, *, settings: CoreSettings, pod_operations: PodOperations) -> None:
        self._label = settings.decommission_label
        self._value = settings.decommission_label_value
        self._pods = pod_operations

    @property
    def enabled(self) -> bool:
        return self._label is not None

    def killing(self, selector: PodSelector) -> None:
        """The driver kills these executors: mark their pods before they are deleted."""
        self.mark(selector)

    def mark(self, selector: PodSelector) -> int:
        """Mark every pod `selector` matches; returns how many were marked."""
        if not self.enabled:
            return 0
        try:
            pods = self._pods.list(selector)
        except PodOperationError as error:
            logger.warning("Could not list pods to mark as decommissioning: %s", error)
            return 0
        marked = 0
        label = self._label
        assert label is not None  # enabled
        for pod in pods:
            try:
                self._pods.patch_labels(pod.name, {label: self._value})
            except PodOperationError as error:
                logger.warning("Could not mark pod %s as decommissioning: %s", pod.name, error)
                continue
            marked += 1
        return marked
