"""`PodOperations` over the API: create, delete, delete by selector, list, patch labels.

Every call goes through the `ApiGateway` (timeouts, raw JSON, typed errors). Lists convert the raw
JSON directly (`convert.py`) and skip malformed pods with a warning.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping

from execpods.core import SPARK_LABELS, ExecutorPod, PodManifest, PodNotFound, PodSelector
from execpods.k8s.convert import pods_from_list
from execpods.k8s.gateway import ApiGateway

logger = logging.getLogger(__name__)


def _name_of(manifest: PodManifest) -> str:
    metadata = manifest.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else "<unnamed>"


class KubernetesPodOperations:
    """The core's `PodOperations` (plus `patch_labels`, `list_with_version`, `get`).

    `executor_id_label` is the label key of executor ids (execpods.labels.executorId): listed pods
    whose id there is beyond int64 are skipped as malformed.
    """

    def __init__(
        self, gateway: ApiGateway, *, executor_id_label: str = SPARK_LABELS.executor_id
    ) -> None:
        self._gateway = gateway
        self._executor_id_label = executor_id_label

    @property
    def namespace(self) -> str:
        return self._gateway.namespace

    @property
    def gateway(self) -> ApiGateway:
        return self._gateway

    def create(self, manifest: PodManifest) -> None:
        name = _name_of(manifest)
        self._gateway.create_pod(name, manifest)
        logger.debug("Created pod %s in namespace %s.", name, self.namespace)

    def delete(self, name: str) -> None:
        try:
            self._gateway.delete_pod(name)
        except PodNotFound:
            logger.debug("Pod %s was already gone when deleted.", name)

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        label_selector = selector.label_selector()
        # Named in errors and logs: summarised, since a kill's selector may list 500 ids.
        what = f"delete pods {selector.describe()!r}"
        body = self._gateway.delete_pods(
            label_selector,
            selector.field_selector(),
            grace_period_seconds=grace_period_seconds,
            what=what,
        )
        # A real server answers with the list of deleted pods, although the client types a Status.
        items = body.get("items") if isinstance(body, dict) else None
        count = len(items) if isinstance(items, list) else 0
        logger.debug("Deleted %d pods matching %r.", count, label_selector)
        return count

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        pods, _ = self.list_with_version(selector.label_selector(), selector.field_selector())
        return pods

    def list_with_version(
        self,
        label_selector: str,
        field_selector: str | None = None,
        *,
        resource_version: str | None = None,
    ) -> tuple[builtins.list[ExecutorPod], str | None]:
        """The matching pods and the list's resourceVersion (what a watch resumes from)."""
        body = self._gateway.list_pods(
            label_selector, field_selector, resource_version=resource_version
        )
        return pods_from_list(body, executor_id_label=self._executor_id_label)

    def patch_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        """Set (or, with None, remove) labels of one pod with a strategic merge patch."""
        self._gateway.patch_pod(name, {"metadata": {"labels": dict(labels)}}, what="patch labels")

    def get(self, name: str) -> dict[str, object]:
        """One pod's raw JSON; raises `PodNotFound`."""
        body = self._gateway.read_pod(name)
        return body if isinstance(body, dict) else {}
