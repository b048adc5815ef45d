"""Namespaced resources other than pods: ConfigMaps, Services, PersistentVolumeClaims, Secrets.

Spark creates a ConfigMap for its executors' configuration and, in cluster mode, a headless
Service for the driver; on exit it deletes them (and any PersistentVolumeClaims) by label. These
objects have no controller behind them in kubesim: they are stored, listed, watched and deleted
with the API server's semantics, and the garbage collector removes those whose owner (through
``metadata.ownerReferences``) is deleted, as Kubernetes does for background propagation.
"""

from __future__ import annotations

import random
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from execpods.kubesim.apply import apply_config, record_update
from execpods.kubesim.bodies import Status, StatusCause
from execpods.kubesim.cluster import Cluster
from execpods.kubesim.errors import ApiError, status_body
from execpods.kubesim.faults import Faults, RequestLog
from execpods.kubesim.patch import apply_patch
from execpods.kubesim.pods import SERVER_META, rfc3339
from execpods.kubesim.resources import PodApi
from execpods.kubesim.selectors import valid_label_key, valid_label_value
from execpods.kubesim.store import Event, Obj, PodStore, Predicate, Watcher

__all__ = ["KINDS", "GarbageCollector", "Kind", "ObjectApi"]

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Service names: RFC 1123 labels since Kubernetes 1.34 (RelaxedServiceNameValidation); a leading
# digit is accepted, as a real v1.36 server showed.
_DNS1035 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    """A namespaced core/v1 resource served from a plain store."""

    plural: str
    kind: str
    singular: str
    short_names: tuple[str, ...] = ()
    #: Services' names must be DNS-1035 labels (they become DNS names); others are subdomains.
    dns_label_name: bool = False
    #: A DELETE answers the deleted object (the kind's registry sets `ReturnDeletedObject`, as
    #: for pods, Services and PersistentVolumeClaims); otherwise a Success Status.
    returns_deleted_object: bool = False
    #: The API group ("" = core, served under /api/v1; others under /apis/<group>/v1).
    group: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1" if self.group else "v1"

    def discovery(self) -> Obj:
        entry: Obj = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": True,
            "kind": self.kind,
            "verbs": list(_VERBS),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        return entry


KINDS: tuple[Kind, ...] = (
    Kind(plural="configmaps", kind="ConfigMap", singular="configmap", short_names=("cm",)),
    Kind(
        plural="services",
        kind="Service",
        singular="service",
        short_names=("svc",),
        dns_label_name=True,
        returns_deleted_object=True,
    ),
    Kind(
        plural="persistentvolumeclaims",
        kind="PersistentVolumeClaim",
        singular="persistentvolumeclaim",
        short_names=("pvc",),
        returns_deleted_object=True,
    ),
    Kind(plural="secrets", kind="Secret", singular="secret"),
    # Enforced on pod creates by the ResourceQuota admission (quota.py).
    Kind(
        plural="resourcequotas",
        kind="ResourceQuota",
        singular="resourcequota",
        short_names=("quota",),
    ),
    # The kubelet's FailedMount warnings (mounts.py); clients may write events too.
    Kind(plural="events", kind="Event", singular="event", short_names=("ev",)),
    # Spark 4.3's cluster-mode submission applies one (NetworkPolicyFeatureStep: executors take
    # ingress only from their own application's pods); stored, not enforced.
    Kind(
        plural="networkpolicies",
        kind="NetworkPolicy",
        singular="networkpolicy",
        short_names=("netpol",),
        group="networking.k8s.io",
    ),
)


def _invalid(kind: Kind, name: str, causes: list[StatusCause]) -> ApiError:
    text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    return ApiError(
        422,
        "Invalid",
        f'{kind.kind} "{name}" is invalid: {text}',
        name=name,
        causes=causes,
        kind=kind.plural,
    )


class _Lister(PodApi):
    """Pods' listing and watch rules (selectors, versions, pagination) for another kind."""

    kind_name = "Pod"

    def bookmark(self, rv: int, *, initial_events_end: bool = False) -> bytes:
        line = super().bookmark(rv, initial_events_end=initial_events_end)
        return line.replace(b'"kind":"Pod"', b'"kind":"%s"' % self.kind_name.encode(), 1)


class ObjectApi:
    """The verbs of one resource over its own store (no controller acts on these objects)."""

    def __init__(
        self, *, kind: Kind, cluster: Cluster, log: RequestLog, event_window: int = 10_000
    ) -> None:
        self.kind = kind
        self.store = PodStore(event_window=event_window, plural=kind.plural)
        self.clock = cluster.clock
        # Its own seeded generator: creating these objects must not shift the pods' names.
        self._rng = random.Random(f"{cluster.config.seed}-{kind.plural}")
        self._rng_lock = threading.Lock()
        self._next_ip = 1
        # Listing (selectors, resourceVersion rules, pagination) is the same as for pods; the
        # pod fault injection does not apply here, so this lister has faults of its own.
        self.faults = Faults(cluster.clock)
        self._lister = _Lister(store=self.store, cluster=cluster, faults=self.faults, log=log)
        self._lister.kind_name = kind.kind
        #: Fills in what a controller would on create (a claim's binding, `claims.py`); by
        #: default a claim is bound at once.
        self.on_create: Callable[[Obj], None] | None = None
        #: Verbs answered 403, as if RBAC took them away (`KubeSim.forbid`).
        self.forbidden: frozenset[str] = frozenset()

    def _check_allowed(self, verb: str, namespace: str, name: str = "") -> None:
        if verb in self.forbidden:
            target = f'"{name}" ' if name else ""
            raise ApiError(
                403,
                "Forbidden",
                f'{self.kind.plural} {target}is forbidden: User "system:serviceaccount:'
                f'{namespace}:default" cannot {verb} resource "{self.kind.plural}" in API '
                f'group "" in the namespace "{namespace}"',
                name=name,
                kind=self.kind.plural,
            )

    # -- what the server's watch needs -----------------------------------------------------------

    def predicate(self, query: dict[str, str]) -> Predicate:
        return self._lister.predicate(query)

    def open_watch(
        self, namespace: str | None, query: dict[str, str]
    ) -> tuple[Watcher | None, list[bytes], Status | None]:
        return self._lister.open_watch(namespace, query)

    def bookmark(self, rv: int, *, initial_events_end: bool = False) -> bytes:
        return self._lister.bookmark(rv, initial_events_end=initial_events_end)

    # -- verbs -----------------------------------------------------------------------------------

    def list(self, namespace: str | None, query: dict[str, str]) -> Obj:
        result: Obj = dict(self._lister.list(namespace, query))
        result["kind"] = f"{self.kind.kind}List"
        result["apiVersion"] = self.kind.api_version
        return result

    def get(self, namespace: str, name: str) -> Obj:
        self._check_allowed("get", namespace, name)
        return self.store.get(namespace, name)

    def create(self, namespace: str, body: Any, *, manager: str | None = None) -> Obj:
        """POST: a new object; `manager` (the write's field manager) then owns its fields."""
        self._check_allowed("create", namespace)
        obj = self._new(namespace, body)
        if manager is not None:
            record_update(
                None, obj, manager=manager, api_version=self.kind.api_version, now=self._now()
            )
        return self.store.create(obj)

    def _now(self) -> str:
        return rfc3339(self.clock.now())

    def _new(self, namespace: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise ApiError.bad_request("the request body must be a JSON object")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if kind not in (None, self.kind.kind) or api_version not in (None, self.kind.api_version):
            raise ApiError.bad_request(
                f"the kind ({kind}) or API version ({api_version}) in the data does not match "
                f"{self.kind.kind} {self.kind.api_version}"
            )
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        if meta.get("namespace") not in (None, "", namespace):
            raise ApiError.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        name = meta.get("name") or ""
        generate = meta.get("generateName") or ""
        obj: Obj = {k: v for k, v in body.items() if k not in ("metadata", "status")}
        obj.update(kind=self.kind.kind, apiVersion=self.kind.api_version)
        obj["metadata"] = {k: v for k, v in meta.items() if k not in SERVER_META}
        with self._rng_lock:
            if not name and generate:
                suffix = "".join(self._rng.choice(_SUFFIX_CHARS) for _ in range(5))
                name = generate + suffix
            uid = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        obj["metadata"]["name"] = name
        self._validate(obj)
        obj["metadata"].update(
            namespace=namespace, uid=uid, creationTimestamp=rfc3339(self.clock.now())
        )
        self._default(obj)
        return obj

    def _validate(self, obj: Obj) -> None:
        causes: list[StatusCause] = []
        meta = obj["metadata"]
        name = meta.get("name") or ""
        pattern, limit = (_DNS1035, 63) if self.kind.dns_label_name else (_SUBDOMAIN, 253)
        if not name:
            causes.append(
                {
                    "reason": "FieldValueRequired",
                    "message": "name or generateName is required",
                    "field": "metadata.name",
                }
            )
        elif len(name) > limit or not pattern.match(name):
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: {name!r}: not a valid {self.kind.singular} name",
                    "field": "metadata.name",
                }
            )
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict):
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": "must be a map of strings",
                    "field": "metadata.labels",
                }
            )
        else:
            for k, v in labels.items():
                if not valid_label_key(k) or not isinstance(v, str) or not valid_label_value(v):
                    causes.append(
                        {
                            "reason": "FieldValueInvalid",
                            "message": f"Invalid value: {k!r}: {v!r}",
                            "field": f"metadata.labels.{k}",
                        }
                    )
        owners = meta.get("ownerReferences")
        if owners is not None and (
            not isinstance(owners, list)
            or not all(isinstance(o, dict) and isinstance(o.get("uid"), str) for o in owners)
        ):
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": "must be a list of owner references, each with a uid",
                    "field": "metadata.ownerReferences",
                }
            )
        if causes:
            raise _invalid(self.kind, name or meta.get("generateName") or "", causes)

    def _default(self, obj: Obj) -> None:
        """What the API server fills in: a Service's cluster IP and port protocols, a claim's
        binding (kubesim provisions every claim at once)."""
        if self.kind.kind == "Service":
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            if spec.get("clusterIP") != "None":
                with self._rng_lock:
                    n, self._next_ip = self._next_ip, self._next_ip + 1
                spec["clusterIP"] = f"10.96.{(n >> 8) & 255}.{n & 255}"
            spec["clusterIPs"] = [spec["clusterIP"]]
            for port in spec.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
                    port.setdefault("targetPort", port.get("port"))
            obj["status"] = {"loadBalancer": {}}
        elif self.on_create is not None:
            self.on_create(obj)
        elif self.kind.kind == "PersistentVolumeClaim":
            obj.setdefault("spec", {})["volumeName"] = f"pvc-{obj['metadata']['uid']}"
            obj["status"] = {"phase": "Bound"}

    def _write(self, old: Obj, new: Any, name: str) -> Obj:
        if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
            raise ApiError.bad_request(f"the request body must be a {self.kind.kind} object")
        new_meta = new.get("metadata") or {}
        if new_meta.get("name", name) != name:
            raise ApiError.bad_request("the name of the object does not match the name on the URL")
        rv = new_meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {self.kind.plural} "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
                name=name,
                kind=self.kind.plural,
            )
        result: Obj = {k: v for k, v in new.items() if k != "status"}
        result.update(kind=self.kind.kind, apiVersion=self.kind.api_version)
        meta = {k: v for k, v in new_meta.items() if k not in SERVER_META}
        for k in SERVER_META:
            if k in old["metadata"]:
                meta[k] = old["metadata"][k]
        meta["name"] = name
        result["metadata"] = meta
        if "status" in old:
            result["status"] = old["status"]
        self._validate(result)
        if self.kind.kind == "Service":  # the allocated IP is immutable
            spec = result.setdefault("spec", {})
            spec["clusterIP"] = old.get("spec", {}).get("clusterIP")
            spec["clusterIPs"] = old.get("spec", {}).get("clusterIPs")
        return result

    def _recorded(self, old: Obj, new: Obj, manager: str | None) -> Obj:
        if manager is not None:
            record_update(
                old, new, manager=manager, api_version=self.kind.api_version, now=self._now()
            )
        return new

    def replace(self, namespace: str, name: str, body: Any, *, manager: str | None = None) -> Obj:
        return self.store.update(
            namespace, name, lambda old: self._recorded(old, self._write(old, body, name), manager)
        )

    def patch(
        self,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        *,
        manager: str | None = None,
    ) -> Obj:
        self._check_allowed("patch", namespace, name)

        def patched(old: Obj) -> Obj:
            return self._recorded(
                old, self._write(old, apply_patch(content_type, old, body), name), manager
            )

        return self.store.update(namespace, name, patched)

    def apply(
        self, namespace: str, name: str, config: Obj, *, manager: str, force: bool
    ) -> tuple[Obj, bool]:
        """Server-side apply (`apply.py`): (the object, whether this apply created it)."""
        kind, api_version = config.get("kind"), config.get("apiVersion")
        if kind != self.kind.kind or api_version != self.kind.api_version:
            group, _, version = str(api_version or "").rpartition("/")
            raise ApiError.bad_request(f"invalid object type: {group}/{version}, Kind={kind}")
        meta = config.get("metadata")
        if not isinstance(meta, dict) or meta.get("name", name) != name:
            raise ApiError.bad_request(
                f"the name of the object ({(meta or {}).get('name')}) does not match the name "
                f"on the URL ({name})"
            )
        if meta.get("namespace") not in (None, "", namespace):
            raise ApiError.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )

        def merged(live: Obj | None) -> Obj:
            return apply_config(
                live,
                config,
                manager=manager,
                force=force,
                api_version=self.kind.api_version,
                now=self._now(),
            )

        if self.store.find(namespace, name) is None:
            fresh = merged(None)
            obj = self._new(namespace, {**fresh, "metadata": {**fresh["metadata"], "name": name}})
            obj["metadata"]["managedFields"] = fresh["metadata"]["managedFields"]
            return self.store.create(obj), True

        def applied(old: Obj) -> Obj:
            result = merged(old)
            new = self._write(old, result, name)
            new["metadata"]["managedFields"] = result["metadata"]["managedFields"]
            return new

        return self.store.update(namespace, name, applied), False

    def delete(self, namespace: str, name: str, options: Any) -> Status | Obj:
        """Remove at once (nothing here has a grace period); answer the deleted object for a
        kind whose registry returns it, else a Success Status, as the API server does."""
        if not isinstance(options, dict):
            raise ApiError.bad_request("DeleteOptions must be a JSON object")
        obj = self.store.get(namespace, name)
        pre = options.get("preconditions") or {}
        if not isinstance(pre, dict):
            raise ApiError.bad_request("DeleteOptions.preconditions must be a JSON object")
        for field in ("uid", "resourceVersion"):
            if pre.get(field) and pre[field] != obj["metadata"].get(field):
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {self.kind.plural} "{name}": the '
                    f"{field} in the precondition does not match",
                    name=name,
                    kind=self.kind.plural,
                )
        removed = self.store.remove(namespace, name, obj["metadata"]["uid"])
        if removed is None:
            raise ApiError.not_found(name, self.kind.plural)
        if self.kind.returns_deleted_object:
            return removed
        return status_body(200, "", "", {"name": name, "kind": self.kind.plural})

    def delete_collection(self, namespace: str, query: dict[str, str]) -> Obj:
        """Remove every match; the answer is the list of what was deleted."""
        items, _ = self.store.list(namespace, self.predicate(query))
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            removed = self.store.remove(namespace, meta["name"], meta["uid"])
            if removed is not None:
                deleted.append(removed)
        return {
            "kind": f"{self.kind.kind}List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.store.resource_version)},
            "items": deleted,
        }

    def remove_owned_by(self, namespace: str, uid: str) -> int:
        """Delete every object whose ownerReferences name ``uid``; returns how many."""
        items, _ = self.store.list(namespace, lambda o: _owned_by(o, uid))
        removed = 0
        for obj in items:
            meta = obj["metadata"]
            if self.store.remove(namespace, meta["name"], meta["uid"]) is not None:
                removed += 1
        return removed


def _owned_by(obj: Obj, uid: str) -> bool:
    owners = obj["metadata"].get("ownerReferences") or ()
    return any(isinstance(o, dict) and o.get("uid") == uid for o in owners)


class GarbageCollector:
    """Background cascading deletion: when an object goes, so do the objects it owns.

    Spark makes its executor pods and ConfigMap (and, in cluster mode, its Service) owned by the
    driver pod, so that deleting the driver cleans up the application; kubesim must do the same
    or a test of that clean-up would pass against a server that leaks. Runs in the writer's
    thread after each commit; owned pods are deleted like any pod (graceful when running).
    """

    def __init__(self, *, pods: PodStore, cluster: Cluster, objects: list[ObjectApi]) -> None:
        self._cluster = cluster
        self._pods = pods
        self._objects = objects
        pods.add_listener(self._on_event)
        for api in objects:
            api.store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.type != "DELETED":
            return
        meta = event.new["metadata"]
        namespace, uid = meta["namespace"], meta.get("uid")
        if not uid:
            return
        for api in self._objects:
            api.remove_owned_by(namespace, uid)
        owned, _ = self._pods.list(namespace, lambda o: _owned_by(o, uid))
        for pod in owned:
            pmeta = pod["metadata"]
            if pmeta.get("deletionTimestamp"):
                continue
            try:
                self._cluster.delete(namespace, pmeta["name"], preconditions={"uid": pmeta["uid"]})
            except ApiError as err:
                if err.code not in (404, 409):
                    raise
