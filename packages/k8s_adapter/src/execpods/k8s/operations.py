"""`PodOperations` over the API: create, delete, delete by selector, list, patch labels.

Every call goes through the `ApiGateway` (timeouts, raw JSON, typed errors). Lists convert the raw
JSON directly (`convert.py`) and skip malformed pods with a warning.

Lists are paginated (`execpods.kubernetes.listPageSize`, 500 pods a page, as client-go's reflector
and kubectl do): the API server then never builds one answer of every executor, and the sidecar
parses one page at a time. A 10,000-pod answer is tens of megabytes of JSON whose parsed objects,
interleaved with the pods kept from them, left CPython's allocator holding tens of megabytes more
after every poll (the load command's resident memory at 10,000 executors). The pages of one list
are one consistent snapshot (the continue token pins the first page's resourceVersion); when the
token has expired (410) the list starts again unpaginated, as client-go's pager does.
"""

from __future__ import annotations

import builtins
import logging
import threading
from collections.abc import Iterable, Mapping

from execpods.core import SPARK_LABELS, ExecutorPod, PodManifest, PodNotFound, PodSelector
from execpods.k8s.convert import pod_page
from execpods.k8s.errors import ResourceExpired, ResourceVersionTooLarge
from execpods.k8s.gateway import ApiGateway

logger = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 500
"""Pods a list page holds by default (client-go's reflector and kubectl use 500 too)."""
DELETED_UIDS_KEPT = 65_536
"""How many deleted pods' uids are remembered (about 6 MiB at most), so a pod deleted again (a
kill of a terminating executor, the shutdown's delete of pods a kill already deleted, a pod a
finalizer holds) is not counted again."""


class _RecentUids:
    """A bounded set of uids, forgetting the oldest first."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._uids: dict[str, None] = {}
        self._lock = threading.Lock()

    def first_time(self, uids: Iterable[str | None]) -> int:
        """How many of `uids` were not seen before (a missing uid counts: it cannot be told);
        remembers them."""
        new = 0
        with self._lock:
            for uid in uids:
                if uid is None:
                    new += 1
                elif uid not in self._uids:
                    new += 1
                    self._uids[uid] = None
                    if len(self._uids) > self._limit:
                        del self._uids[next(iter(self._uids))]
        return new


def _uid_of(item: object) -> str | None:
    metadata = item.get("metadata") if isinstance(item, dict) else None
    uid = metadata.get("uid") if isinstance(metadata, dict) else None
    return uid if isinstance(uid, str) and uid else None


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
        self,
        gateway: ApiGateway,
        *,
        executor_id_label: str = SPARK_LABELS.executor_id,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if page_size < 0:
            raise ValueError(f"page_size must be 0 (unpaginated) or more, not {page_size}")
        self._gateway = gateway
        self._executor_id_label = executor_id_label
        self._page_size = page_size
        self._deleted = _RecentUids(DELETED_UIDS_KEPT)

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
        self.delete_counted(name)

    def delete_counted(self, name: str) -> int:
        """Delete one pod; 1 when this deleted it, 0 when it was gone or an earlier call of
        this process had deleted it already (it is still terminating, or a finalizer holds it)."""
        try:
            body = self._gateway.delete_pod(name)
        except PodNotFound:
            logger.debug("Pod %s was already gone when deleted.", name)
            return 0
        return self._deleted.first_time([_uid_of(body)])

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
        if not isinstance(items, list):
            return 0
        # Pods already deleted by an earlier call (terminating ones match again) count once.
        count = self._deleted.first_time(_uid_of(item) for item in items)
        logger.debug(
            "Deleted %d pods matching %r (%d answered).", count, label_selector, len(items)
        )
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
        """The matching pods and the list's resourceVersion (what a watch resumes from), read a
        page at a time (see the module's docstring)."""
        return self._list_pages(label_selector, field_selector, resource_version, self._page_size)

    def _list_pages(
        self,
        label_selector: str,
        field_selector: str | None,
        resource_version: str | None,
        page_size: int,
    ) -> tuple[builtins.list[ExecutorPod], str | None]:
        pods: builtins.list[ExecutorPod] = []
        token: str | None = None
        version: str | None = None
        while True:
            try:
                body = self._gateway.list_pods(
                    label_selector,
                    field_selector,
                    # A continued list must not name a version: its token carries the first's.
                    resource_version=resource_version if token is None else None,
                    limit=page_size or None,
                    continue_token=token,
                )
            except ResourceExpired as error:
                if token is None or isinstance(error, ResourceVersionTooLarge):
                    raise
                logger.info(
                    "A paginated list of %r expired after %d pods (%s); listing again in one "
                    "answer.",
                    label_selector,
                    len(pods),
                    error,
                )
                return self._list_pages(label_selector, field_selector, resource_version, 0)
            page = pod_page(body, executor_id_label=self._executor_id_label)
            pods.extend(page.pods)
            if version is None:
                version = page.resource_version
            token = page.continue_token
            if token is None:
                return pods, version

    def patch_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        """Set (or, with None, remove) labels of one pod with a strategic merge patch."""
        self._gateway.patch_pod(name, {"metadata": {"labels": dict(labels)}}, what="patch labels")

    def patch_annotations(self, name: str, annotations: Mapping[str, str]) -> None:
        """Set annotations of one pod with a strategic merge patch."""
        self._gateway.patch_pod(
            name, {"metadata": {"annotations": dict(annotations)}}, what="patch annotations"
        )

    def is_ready(self, name: str, *, container: str | None = None) -> bool:
        """Whether pod `name` has condition Ready=True (fabric8's `waitUntilReady` test, which
        Spark waits on for the driver), or, when `container` is named, that container is ready
        (a driver pod with the sidecar in it is Ready only once the sidecar is too). Raises
        `PodNotFound` when the pod is gone."""
        status = self.get(name).get("status")
        if not isinstance(status, dict):
            return False
        if any(
            isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        ):
            return True
        return container is not None and any(
            isinstance(c, dict) and c.get("name") == container and c.get("ready") is True
            for c in status.get("containerStatuses") or ()
        )

    def get(self, name: str) -> dict[str, object]:
        """One pod's raw JSON; raises `PodNotFound`."""
        body = self._gateway.read_pod(name)
        return body if isinstance(body, dict) else {}
