"""The pod resource's semantics, independent of HTTP: what each verb does and returns.

The server parses requests and writes responses; this module decides outcomes (status-only
writes, preconditions, pagination, resourceVersion rules), so the behaviour can be read in one
place.
"""

from __future__ import annotations

import base64
import calendar
import copy
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import orjson
from execpods.kubesim.bodies import (
    JsonObject,
    JsonValue,
    ListMeta,
    Pod,
    PodList,
    Status,
    as_pod,
    as_pods,
)
from execpods.kubesim.cluster import Cluster
from execpods.kubesim.disruptions import disrupt
from execpods.kubesim.errors import ApiError
from execpods.kubesim.faults import Faults, RequestLog
from execpods.kubesim.limits import CreateRateLimit
from execpods.kubesim.patch import apply_patch
from execpods.kubesim.pods import (
    SERVER_META,
    admit_new_pod,
    default_spec,
    rfc3339,
    validate_pod,
    validate_status,
)
from execpods.kubesim.rbac import Authorizer
from execpods.kubesim.resize import ResourceUsage, resized_spec
from execpods.kubesim.selectors import SelectorError, parse_field_selector, parse_label_selector
from execpods.kubesim.store import Obj, PodStore, Predicate, Watcher
from execpods.kubesim.watchstart import bookmark_line, open_watch, wait_fresh

__all__ = ["DISCOVERY_PATHS", "KUBERNETES_VERSION", "PodApi", "as_table", "discovery"]

KUBERNETES_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-kubesim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_POD_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_HEALTH = ("/healthz", "/readyz", "/livez")
#: The paths :func:`discovery` answers.
DISCOVERY_PATHS = frozenset({"/version", "/api", "/apis", "/api/v1", *_HEALTH})


def discovery(path: str, address: Sequence[object]) -> Obj | None:
    """Discovery documents, enough for kubectl to find pods (None if ``path`` is not one)."""
    if path == "/version":
        return dict(KUBERNETES_VERSION)
    if path == "/api":
        host, port = address[0], address[1]
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{host}:{port}"}
            ],
        }
    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
    if path == "/api/v1":
        return {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {
                    "name": "pods",
                    "singularName": "pod",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": _POD_VERBS,
                    "shortNames": ["po"],
                    "categories": ["all"],
                },
                {
                    "name": "pods/status",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get", "patch", "update"],
                },
                {
                    "name": "namespaces",
                    "singularName": "namespace",
                    "namespaced": False,
                    "kind": "Namespace",
                    "verbs": ["get"],
                    "shortNames": ["ns"],
                },
            ],
        }
    if path in _HEALTH:
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}
    return None


_COLUMNS = [
    ("Name", "string", "name", "Name must be unique within a namespace."),
    ("Ready", "string", "", "The aggregate readiness state of this pod for accepting traffic."),
    ("Status", "string", "", "The aggregate status of the containers in this pod."),
    (
        "Restarts",
        "string",
        "",
        "The number of times the containers in this pod have been restarted.",
    ),
    ("Age", "string", "", "The time since the pod was created."),
    ("Node", "string", "", "The node the pod is bound to."),
]


def _age(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _row(pod: Obj, now: float) -> Obj:
    meta, status = pod["metadata"], pod.get("status", {})
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    shown = status.get("reason") or status.get("phase", "Pending")
    for c in statuses:
        state = c.get("state") or {}
        detail = (state.get("waiting") or state.get("terminated") or {}).get("reason")
        if detail and shown != status.get("reason"):
            shown = detail
    if meta.get("deletionTimestamp"):
        shown = "Terminating"
    created = meta.get("creationTimestamp", "")
    try:
        born: float = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        born = now
    cells = [
        meta["name"],
        f"{ready}/{len(pod['spec'].get('containers', []))}",
        shown,
        str(sum(c.get("restartCount", 0) for c in statuses)),
        _age(now - born),
        pod["spec"].get("nodeName") or "<none>",
    ]
    partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
    return {"cells": cells, "object": partial}


def as_table(result: Obj, now: float) -> Obj:
    """A pod or pod list as a meta.k8s.io/v1 Table, which is what kubectl asks for."""
    items = result["items"] if result.get("kind") == "PodList" else [result]
    meta = result.get("metadata", {})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {k: v for k, v in meta.items() if k in ("resourceVersion", "continue")},
        "columnDefinitions": [
            {
                "name": n,
                "type": t,
                "format": f,
                "description": d,
                "priority": 1 if n == "Node" else 0,
            }
            for n, t, f, d in _COLUMNS
        ],
        "rows": [_row(p, now) for p in items],
    }


def _int_rv(text: str, what: str = "resourceVersion") -> int:
    try:
        value = int(text)
    except ValueError:
        raise ApiError.bad_request(f"invalid {what}: {text!r}") from None
    if value < 0:
        raise ApiError.bad_request(f"invalid {what}: {text!r}")
    return value


def _pod_list(items: list[Obj], rv: int, cont: str | None = None, remaining: int = 0) -> PodList:
    meta: ListMeta = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
        meta["remainingItemCount"] = remaining
    return {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": as_pods(items)}


class PodApi:
    """The pod verbs over a store and a cluster, with faults and a request log alongside."""

    def __init__(
        self,
        *,
        store: PodStore,
        cluster: Cluster,
        faults: Faults,
        log: RequestLog,
        create_limit: CreateRateLimit | None = None,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.faults = faults
        self.log = log
        self.create_limit = create_limit or CreateRateLimit(cluster.clock)
        #: Authentication and RBAC, consulted before anything else (off until a policy loads).
        self.authorizer = Authorizer()
        #: Real seconds a read "not older than" a version the store has not reached waits for
        #: it before the answer is "too large resource version" (kube-apiserver waits 3 s).
        self.fresh_timeout = 3.0
        #: Validating admission around a create (the ResourceQuota plugin, `quota.py`): may
        #: refuse the pod, and sees whether the create went through.
        self.admission: Callable[[Obj], AbstractContextManager[None]] | None = None
        self._rng_lock = threading.Lock()
        #: What the metrics API reports each container uses (`resize.ResourceUsage`).
        self.usage = ResourceUsage()

    # -- selectors and versions ----------------------------------------------------------------

    @staticmethod
    def predicate(query: dict[str, str]) -> Predicate:
        try:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"))
        except SelectorError as exc:
            raise ApiError.bad_request(f"unable to parse selector: {exc}") from None
        if not labels.requirements and not fields.terms:
            return lambda _obj: True
        if not fields.terms:
            return labels.matches
        return lambda obj: fields.matches(obj) and labels.matches(obj)

    @staticmethod
    def watch_start(query: dict[str, str]) -> int | None:
        """None (start from the current state) for an unset or "0" resourceVersion."""
        rv = query.get("resourceVersion", "")
        if rv in ("", "0"):
            return None
        return _int_rv(rv)

    def bookmark(self, rv: int, *, initial_events_end: bool = False) -> bytes:
        return bookmark_line(rv, initial_events_end=initial_events_end)

    def _wait_fresh(self, rv: int) -> None:
        wait_fresh(self.store, rv, self.fresh_timeout)

    def open_watch(
        self, namespace: str | None, query: dict[str, str]
    ) -> tuple[Watcher | None, list[bytes], Status | None]:
        """See :func:`execpods.kubesim.watchstart.open_watch`."""
        return open_watch(self, namespace, query)

    # -- verbs ---------------------------------------------------------------------------------

    def list(self, namespace: str | None, query: dict[str, str]) -> PodList:
        predicate = self.predicate(query)
        if self.faults.take_expire():
            raise ApiError.gone("too old resource version (injected by kubesim)")
        exact: int | None = None
        rv_text = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        if match and match not in ("Exact", "NotOlderThan"):
            raise ApiError.bad_request(f"invalid resourceVersionMatch {match!r}")
        if match and rv_text == "":
            raise ApiError.bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is set"
            )
        if match == "Exact":
            if rv_text == "0":
                raise ApiError.bad_request('resourceVersionMatch "Exact" is forbidden for "0"')
            exact = _int_rv(rv_text)
            if exact > self.store.resource_version:
                raise ApiError.too_large_resource_version(exact, self.store.resource_version)
        elif rv_text not in ("", "0"):
            self._wait_fresh(_int_rv(rv_text))
        start_after: tuple[str, str] | None = None
        token = query.get("continue", "")
        if token:
            try:
                state = orjson.loads(base64.urlsafe_b64decode(token.encode()))
                exact, start_after = int(state["rv"]), (state["ns"], state["name"])
            except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
                raise ApiError.bad_request("invalid continue token") from None
            if exact < self.store.compacted_rv:
                raise ApiError.gone(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter."
                )
        items, rv = self.store.list(namespace, predicate, exact_rv=exact)
        if start_after is not None:
            items = [
                o
                for o in items
                if (o["metadata"]["namespace"], o["metadata"]["name"]) > start_after
            ]
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise ApiError.bad_request(f"invalid limit: {query['limit']!r}") from None
        if 0 < limit < len(items):
            last = items[limit - 1]["metadata"]
            state = {"rv": rv, "ns": last["namespace"], "name": last["name"]}
            cont = base64.urlsafe_b64encode(orjson.dumps(state)).decode()
            return _pod_list(items[:limit], rv, cont, len(items) - limit)
        return _pod_list(items, rv)

    def create(self, namespace: str, body: JsonValue, *, limited: bool = True) -> Pod:
        """Admit and store a pod. ``limited`` creates (every API request) count against the
        create-rate cap first: an overloaded server refuses before it reads the object."""
        if limited:
            self.create_limit.take()
        meta = body.get("metadata") if isinstance(body, dict) else None
        given = (meta.get("name") or meta.get("generateName")) if isinstance(meta, dict) else ""
        self.faults.check_create(given if isinstance(given, str) else "")
        clock = self.cluster.clock
        with self._rng_lock:
            pod = admit_new_pod(
                body,
                namespace,
                now=clock.now(),
                rng=self.cluster.rng,
                name_taken=lambda n: self.store.name_taken(namespace, n),
            )
        if self.admission is None:
            return as_pod(self.store.create(pod))
        with self.admission(pod):
            return as_pod(self.store.create(pod))

    def get(self, namespace: str, name: str) -> Pod:
        return as_pod(self.store.get(namespace, name))

    def _merge_write(self, old: Obj, new: JsonValue, name: str, *, status: bool) -> Obj:
        """The object a write produces: ``/status`` takes only status, the main resource takes
        everything but status (and never the server-owned metadata)."""
        new_meta = (new.get("metadata") or {}) if isinstance(new, dict) else None
        if not isinstance(new, dict) or not isinstance(new_meta, dict):
            raise ApiError.bad_request("the request body must be a pod object")
        if new_meta.get("name", name) != name:
            raise ApiError.bad_request("the name of the object does not match the name on the URL")
        rv = new_meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError.conflict(
                name,
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
            )
        if status:
            # kube-apiserver's pod status strategy resets the spec, not the metadata: a /status
            # write changes labels, annotations and finalizers too (seen on a real server).
            updated = dict(old)
            updated["status"] = new.get("status") or {}
            validate_status(name, updated["status"])
            _default_container_statuses(updated["status"])
            kept = dict(old["metadata"])
            for key in ("labels", "annotations", "finalizers"):
                if new_meta.get(key) is not None:
                    kept[key] = new_meta[key]
                else:
                    kept.pop(key, None)
            updated["metadata"] = kept
            return updated
        meta: Obj = {k: v for k, v in new_meta.items() if k not in SERVER_META}
        for k in SERVER_META:
            if k in old["metadata"]:
                meta[k] = old["metadata"][k]
        meta["name"] = name
        spec = new.get("spec")
        if isinstance(spec, dict):
            spec = default_spec(spec)
        result: Obj = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": meta,
            "spec": spec,
            "status": old.get("status", {}),
        }
        validate_pod(result)
        self._check_spec_update(old["spec"], result["spec"], name)
        if old["metadata"].get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
            if added:
                raise ApiError(
                    422,
                    "Invalid",
                    f'Pod "{name}" is invalid: metadata.finalizers: Forbidden: '
                    "no new finalizers can be added if the object is being deleted",
                    name=name,
                )
        return result

    @staticmethod
    def _check_spec_update(old: Obj, new: Obj, name: str) -> None:
        def mutable_view(spec: Obj) -> Obj:
            view = {
                k: v for k, v in spec.items() if k not in ("activeDeadlineSeconds", "tolerations")
            }
            view["containers"] = [
                {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers", [])
            ]
            return view

        if mutable_view(old) != mutable_view(new):
            raise ApiError.invalid(
                name,
                [
                    {
                        "reason": "FieldValueForbidden",
                        "message": "Forbidden: pod updates may not change fields other than "
                        "`spec.containers[*].image`, `spec.activeDeadlineSeconds` or "
                        "`spec.tolerations` (only additions to existing tolerations)",
                        "field": "spec",
                    }
                ],
            )

    def replace(self, namespace: str, name: str, body: JsonValue, *, status: bool) -> Pod:
        return as_pod(
            self.store.update(
                namespace, name, lambda old: self._merge_write(old, body, name, status=status)
            )
        )

    def patch(
        self, namespace: str, name: str, content_type: str, body: JsonValue, *, status: bool
    ) -> Pod:
        def mutate(old: Obj) -> Obj:
            patched = apply_patch(content_type, old, body)
            return self._merge_write(old, patched, name, status=status)

        return as_pod(self.store.update(namespace, name, mutate))

    def resize(
        self, namespace: str, name: str, content_type: str, body: JsonValue, *, patch: bool
    ) -> Pod:
        """The `pods/resize` subresource (`resize.py`): only the containers' resources change
        (cpu and memory); the kubelet (`nodes.py`) then actuates them."""

        def mutate(old: Obj) -> Obj:
            new = apply_patch(content_type, old, body) if patch else body
            meta = (new.get("metadata") or {}) if isinstance(new, dict) else None
            if not isinstance(new, dict) or not isinstance(meta, dict):
                raise ApiError.bad_request("the request body must be a pod object")
            rv = meta.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise ApiError.conflict(name, "the object has been modified; please apply your "
                                        "changes to the latest version and try again")  # fmt: skip
            new_spec = new.get("spec")
            if not isinstance(new_spec, dict):
                raise ApiError.bad_request("the pod's spec must be an object")
            statuses = (old.get("status") or {}).get("containerStatuses") or []
            updated = copy.deepcopy(old)
            updated["spec"] = resized_spec(old["spec"], new_spec, name, statuses=statuses)
            return updated

        return as_pod(self.store.update(namespace, name, mutate))

    def pod_metrics(
        self, namespace: str, query: dict[str, str], *, name: str | None = None
    ) -> JsonObject:
        """metrics.k8s.io/v1beta1 PodMetricsList of the namespace's Running pods, or one pod's
        PodMetrics (404, as metrics-server, for a pod it has none of)."""
        now = rfc3339(self.cluster.clock.now())
        if name is None:
            items, _ = self.store.list(namespace, self.predicate(query))
            return self.usage.pod_metrics(namespace, items, now)
        found = self.usage.pod_metrics(namespace, [self.store.get(namespace, name)], now)["items"]
        if not found:
            raise ApiError(404, "NotFound", f'podmetrics.metrics.k8s.io "{name}" not found')
        metrics: JsonObject = found[0]
        metrics.update({"kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1"})
        return metrics

    @staticmethod
    def _grace(query: dict[str, str], options: JsonValue) -> tuple[int | None, JsonObject]:
        if not isinstance(options, dict):
            raise ApiError.bad_request("DeleteOptions must be a JSON object")
        grace = options.get("gracePeriodSeconds")
        if grace is None and query.get("gracePeriodSeconds"):
            grace = _int_rv(query["gracePeriodSeconds"], "gracePeriodSeconds")
        if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)):
            raise ApiError.bad_request(f"invalid gracePeriodSeconds: {grace!r}")
        pre = options.get("preconditions") or {}
        if not isinstance(pre, dict):
            raise ApiError.bad_request("DeleteOptions.preconditions must be a JSON object")
        return grace, pre

    def delete(self, namespace: str, name: str, query: dict[str, str], options: JsonValue) -> Pod:
        grace, pre = self._grace(query, options)
        pod = self.store.get(namespace, name)
        self.faults.check_delete(name, pod["metadata"].get("labels") or {})
        return as_pod(self.cluster.delete(namespace, name, grace_period=grace, preconditions=pre))

    def bind(self, namespace: str, name: str, body: JsonValue) -> JsonObject:
        """The binding subresource: another scheduler (a pod's `spec.schedulerName` other than
        kubesim's `default-scheduler`) assigns the pod to a node. A node kubesim does not run
        leaves the pod to that node's own kubelet."""
        target = body.get("target") if isinstance(body, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not isinstance(node, str) or not node:
            raise ApiError.bad_request("a Binding needs target.name (the node)")
        self.cluster.bind(namespace, name, node)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def evict(self, namespace: str, name: str, body: JsonValue) -> JsonObject:
        """The eviction subresource (policy/v1 Eviction; no PodDisruptionBudgets are kept, so
        every eviction is allowed): a graceful delete marked `DisruptionTarget`."""
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise ApiError.bad_request("the body of an eviction must be a policy/v1 Eviction")
        disrupt(self.cluster, namespace, name, "EvictionByEvictionAPI")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}

    def delete_collection(
        self, namespace: str, query: dict[str, str], options: JsonValue
    ) -> PodList:
        """Delete every match with the same rules as a single delete; return the matches as
        they were listed, before their deletes (kube-apiserver's DeleteCollection answers the
        list it worked through, not the marked objects)."""
        grace, _ = self._grace(query, options)
        items, _ = self.store.list(namespace, self.predicate(query))
        deleted = []
        denied: ApiError | None = None
        for pod in items:
            try:
                self.faults.check_delete(
                    pod["metadata"]["name"], pod["metadata"].get("labels") or {}
                )
                self.cluster.delete(
                    namespace,
                    pod["metadata"]["name"],
                    grace_period=grace,
                    preconditions={"uid": pod["metadata"]["uid"]},
                )
                deleted.append(pod)
            except ApiError as err:
                if err.code in (400, 403, 422) and denied is None:
                    denied = err  # the others are deleted; the call then fails with it
                elif err.code not in (404, 409):
                    raise
        if denied is not None:
            raise denied
        return _pod_list(deleted, self.store.resource_version)


_STATUS_DEFAULTS: tuple[tuple[str, object], ...] = (
    ("state", {}),
    ("lastState", {}),
    ("ready", False),
    ("restartCount", 0),
    ("image", ""),
    ("imageID", ""),
)


def _default_container_statuses(status: Obj) -> None:
    """Fields a Go ContainerStatus always serialises (no omitempty): a status write that leaves
    them out reads back with their zero values, as from kube-apiserver."""
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for entry in status.get(key) or []:
            if isinstance(entry, dict):
                for field, zero in _STATUS_DEFAULTS:
                    entry.setdefault(field, copy.deepcopy(zero))
