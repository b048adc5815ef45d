"""The core's `ExecutorIdLedger` in the cluster: the highest executor id ever reserved.

A restarted sidecar must never issue an id again, even when every pod that carried one is gone,
so the mark lives beside the application in the API server, not in the pods:

- with a driver pod (`spark.kubernetes.driver.pod.name`), as its annotation
  `execpods.io/highest-executor-id`: it lives exactly as long as the application, and the
  sidecar already may get and patch pods;
- without one, in a ConfigMap `<app>-execpods-ids` (key `highestExecutorId`) labelled like the
  executors (`spark-app-selector=<app>`, `spark-role=executor`), so the clean-ups that remove an
  application's executor objects by label remove it too, and owned by the driver pod when an
  owner is given.

Writes are optimistic: each carries the resourceVersion it was based on, so of two writers (two
sidecars, or a sidecar and a person editing the object) the second gets 409 Conflict, reads the
mark again and writes only if it is still below what it needs. The mark therefore never goes
down. Reads and writes go through the `ApiGateway`, so they share the rate limit and back-off of
every other call. Failures raise `PodOperationError`, as the port says: the allocator then issues
no id above the old mark until a write succeeds (see docs/reliability.md).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Mapping
from typing import Any

from execpods.core import (
    SPARK_LABELS,
    ExecutorLabels,
    LedgerMarkInvalid,
    PodConflict,
    PodNotFound,
    PodOperationError,
)
from execpods.k8s.gateway import ApiGateway

logger = logging.getLogger(__name__)

ANNOTATION = "execpods.io/highest-executor-id"
"""The driver pod's annotation that holds the mark."""
DATA_KEY = "highestExecutorId"
"""The ConfigMap's data key that holds the mark."""
LEDGER_LABEL = "execpods.io/ledger"
"""Tells the ledger's ConfigMap from the executors' own (Spark's executor ConfigMap)."""
CONFIG_MAP_SUFFIX = "-execpods-ids"
MAX_CONFLICTS = 8
"""Conflicting writes in a row before a reservation gives up (another writer keeps winning)."""
_MAX_NAME = 253
_NOT_SUBDOMAIN = re.compile(r"[^a-z0-9.-]+")


def ledger_config_map_name(app_id: str) -> str:
    """The ConfigMap's name for `app_id`: a DNS subdomain; a short hash of the id keeps two
    application ids that sanitize alike apart."""
    cleaned = _NOT_SUBDOMAIN.sub("-", app_id.lower()).strip(".-")
    if cleaned != app_id or not cleaned:
        digest = hashlib.sha256(app_id.encode()).hexdigest()[:8]
        cleaned = f"{cleaned[: _MAX_NAME - 40]}-{digest}".strip(".-")
    return f"{cleaned[: _MAX_NAME - len(CONFIG_MAP_SUFFIX)]}{CONFIG_MAP_SUFFIX}"


def _metadata(body: object) -> dict[str, Any]:
    metadata = body.get("metadata") if isinstance(body, dict) else None
    return metadata if isinstance(metadata, dict) else {}


class ClusterIdLedger:
    """`ExecutorIdLedger` over the API: the driver pod's annotation, or a ConfigMap."""

    def __init__(
        self,
        gateway: ApiGateway,
        *,
        app_id: str,
        labels: ExecutorLabels = SPARK_LABELS,
        driver_pod_name: str | None = None,
        owner: Mapping[str, object] | None = None,
    ) -> None:
        self._gateway = gateway
        self._app_id = app_id
        self._labels = labels
        self._driver = driver_pod_name
        self._owner = dict(owner) if owner is not None else None
        self._config_map = ledger_config_map_name(app_id)
        self._lock = threading.Lock()
        self._known = 0  # the stored mark as last read or written (it may have gone down since)
        self._version: str | None = None  # the resourceVersion the next write is based on
        self._exists = driver_pod_name is not None
        self.writes = 0
        """Writes that raised the mark (for tests and benchmarks)."""

    @property
    def location(self) -> str:
        """Where the mark is kept, for messages and logs."""
        if self._driver is not None:
            return f"annotation {ANNOTATION} of pod {self._driver}"
        return f"configmap {self._config_map} (key {DATA_KEY})"

    def highest_reserved(self) -> int:
        """The stored mark (0: none); `LedgerMarkInvalid` when it holds no executor id (the core
        then distrusts it), `PodOperationError` when it cannot be read. Every read refreshes
        what this ledger believes is stored, so a mark found gone or lower is written again by
        the next `reserve_through`."""
        with self._lock:
            mark = self._read()
            logger.debug("Executor ids up to %d are reserved (%s).", mark, self.location)
            return mark

    def reserve_through(self, executor_id: int) -> None:
        with self._lock:
            if executor_id <= self._known:
                return
            for _ in range(MAX_CONFLICTS):
                if self._version is None and self._read_or_zero() >= executor_id:
                    return
                try:
                    self._write(executor_id)
                except PodConflict:
                    # Another writer came first (or our version is stale): read and decide again.
                    self._version = None
                    continue
                except PodNotFound:
                    if self._driver is not None:
                        raise  # the driver pod is gone: nothing to keep the mark on
                    # The ConfigMap was deleted under us: create it again from our own mark.
                    self._exists, self._version = False, None
                    continue
                self.writes += 1
                self._known = executor_id
                logger.debug("Reserved executor ids through %d (%s).", executor_id, self.location)
                return
            raise PodOperationError(
                f"could not reserve executor ids through {executor_id} in {self.location}: "
                f"{MAX_CONFLICTS} conflicting writes in a row"
            )

    # --- the object ------------------------------------------------------------------------

    def _read_or_zero(self) -> int:
        """The stored mark, a value that is no executor id counting as none: the write that
        follows replaces it (based on the version it was read at)."""
        try:
            return self._read()
        except LedgerMarkInvalid:
            return 0

    def _read(self) -> int:
        """Read the stored mark and version (caller holds the lock): the mark, 0 without one;
        `LedgerMarkInvalid` for a value that is no executor id."""
        if self._driver is not None:
            metadata = _metadata(self._gateway.read_pod(self._driver))
            annotations = metadata.get("annotations")
            raw = annotations.get(ANNOTATION) if isinstance(annotations, dict) else None
            where = self.location
        else:
            try:
                body = self._gateway.read_config_map(self._config_map)
            except PodNotFound:
                self._exists, self._version, self._known = False, None, 0
                return 0
            self._exists = True
            metadata = _metadata(body)
            data = body.get("data") if isinstance(body, dict) else None
            raw = data.get(DATA_KEY) if isinstance(data, dict) else None
            where = self.location
        version = metadata.get("resourceVersion")
        self._version = version if isinstance(version, str) else None
        self._known = 0  # a value that is no id: as good as none, until written
        mark = LedgerMarkInvalid.parse(raw, where=where)
        self._known = mark
        return mark

    def _write(self, mark: int) -> None:
        """Store `mark` based on `self._version` (409 `PodConflict` when it is stale)."""
        value = str(mark)
        if self._driver is not None:
            body = self._gateway.patch_pod_json(
                self._driver,
                {
                    "metadata": {
                        "resourceVersion": self._version,
                        "annotations": {ANNOTATION: value},
                    }
                },
                what="reserve executor ids",
            )
        elif not self._exists:
            metadata: dict[str, object] = {
                "name": self._config_map,
                "labels": {**self._labels.for_app(self._app_id), LEDGER_LABEL: "executor-ids"},
            }
            if self._owner is not None:
                metadata["ownerReferences"] = [self._owner]
            manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
            body = self._gateway.create_config_map(
                self._config_map, {**manifest, "data": {DATA_KEY: value}}
            )
            self._exists = True
        else:
            body = self._gateway.patch_config_map(
                self._config_map,
                {"metadata": {"resourceVersion": self._version}, "data": {DATA_KEY: value}},
            )
        version = _metadata(body).get("resourceVersion")
        self._version = version if isinstance(version, str) else None
