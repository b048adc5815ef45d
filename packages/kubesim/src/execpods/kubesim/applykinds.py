"""What `kubectl apply -k deploy/overlays/...` needs beyond pods: namespaces (cluster-scoped),
ServiceAccounts, and the RBAC group's Roles and RoleBindings, with their discovery documents.

ServiceAccounts, Roles and RoleBindings are plain stored objects (`ObjectApi`); the RBAC ones are
served under `/apis/rbac.authorization.k8s.io/v1`. They are stored, listed, patched and deleted
with the API server's semantics, but do not feed kubesim's authorizer, which takes its policy when
RBAC is switched on (`KubeSim(rbac=...)`).

Namespaces exist once created, as in a cluster: `default`, `kube-system`, `kube-public` and
`kube-node-lease` from the start, any other by a create (or a server-side apply). A GET of another
name is a 404 (`namespaces "x" not found`), and so is a create of anything inside it (the
NamespaceLifecycle admission plugin, `kindroutes.check_namespace`). Deleting one removes the stored
object only: its pods and objects stay, as if the namespace controller were slow; `default`,
`kube-system` and `kube-public` may not be deleted (403, the plugin's wording).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from execpods.kubesim.apply import APPLY_PATCH
from execpods.kubesim.bodies import StatusCause
from execpods.kubesim.clock import Clock
from execpods.kubesim.errors import ApiError
from execpods.kubesim.objects import Kind
from execpods.kubesim.patch import apply_patch
from execpods.kubesim.pods import SERVER_META, rfc3339, valid_namespace_name
from execpods.kubesim.store import Obj

__all__ = [
    "APPLY_KINDS",
    "RBAC_GROUP",
    "NamespaceApi",
    "group_discovery",
    "namespace_not_found",
]

RBAC_GROUP = "rbac.authorization.k8s.io"

APPLY_KINDS: tuple[Kind, ...] = (
    Kind(
        plural="serviceaccounts",
        kind="ServiceAccount",
        singular="serviceaccount",
        short_names=("sa",),
    ),
    Kind(plural="roles", kind="Role", singular="role", group=RBAC_GROUP),
    Kind(plural="rolebindings", kind="RoleBinding", singular="rolebinding", group=RBAC_GROUP),
)

NAMESPACE_RESOURCE: Obj = {
    "name": "namespaces",
    "singularName": "namespace",
    "namespaced": False,
    "kind": "Namespace",
    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    "shortNames": ["ns"],
}


def group_discovery(path: str, kinds: list[Kind]) -> Obj | None:
    """/apis, and each served group's document and /v1 resource list (RBAC, networking), or
    None: not one of those."""
    groups = sorted({k.group for k in kinds if k.group})

    def group(name: str) -> Obj:
        version = {"groupVersion": f"{name}/v1", "version": "v1"}
        return {"name": name, "versions": [version], "preferredVersion": version}

    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group(g) for g in groups]}
    for name in groups:
        if path == f"/apis/{name}":
            return {"kind": "APIGroup", "apiVersion": "v1", **group(name)}
        if path == f"/apis/{name}/v1":
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{name}/v1",
                "resources": [k.discovery() for k in kinds if k.group == name],
            }
    return None


def namespace_not_found(name: str) -> ApiError:
    """The API server's 404 for a namespace that does not exist (also for a create inside it)."""
    return ApiError(404, "NotFound", f'namespaces "{name}" not found', name=name, kind="namespaces")


class NamespaceApi:
    """Namespaces: the default ones, and those created (or applied) since."""

    DEFAULTS = ("default", "kube-node-lease", "kube-public", "kube-system")
    IMMORTAL = frozenset({"default", "kube-system", "kube-public"})
    """What the NamespaceLifecycle plugin refuses to delete."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._stored: dict[str, Obj] = {}
        self._rv = 1
        for name in self.DEFAULTS:
            self._stored[name] = self._fresh(name, {})

    def _fresh(self, name: str, meta: dict[str, Any]) -> Obj:
        self._rv += 1
        labels = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": name}
        return {
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {
                **{k: v for k, v in meta.items() if k not in SERVER_META},
                "name": name,
                "labels": labels,
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"kubesim/namespaces/{name}")),
                "resourceVersion": str(self._rv),
                "creationTimestamp": rfc3339(self._clock.now()),
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }

    def exists(self, name: str) -> bool:
        with self._lock:
            return name in self._stored

    def get(self, name: str) -> Obj:
        with self._lock:
            stored = self._stored.get(name)
        if stored is None:
            raise namespace_not_found(name)
        return dict(stored)

    def list(self) -> Obj:
        with self._lock:
            items = [self._stored[name] for name in sorted(self._stored)]
            return {
                "kind": "NamespaceList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": items,
            }

    def create(self, body: Any) -> Obj:
        meta = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(meta, dict):
            meta = {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError.bad_request("a namespace needs metadata.name")
        if not valid_namespace_name(name):
            message = (
                f"Invalid value: {name!r}: a lowercase RFC 1123 label must consist of lower case "
                "alphanumeric characters or '-', and must start and end with an alphanumeric "
                "character"
            )
            cause: StatusCause = {
                "reason": "FieldValueInvalid",
                "message": message,
                "field": "metadata.name",
            }
            raise ApiError(
                422,
                "Invalid",
                f'Namespace "{name}" is invalid: metadata.name: {message}',
                name=name,
                causes=[cause],
                kind="Namespace",  # an Invalid error's details name the Kind, as kubectl prints
            )
        with self._lock:
            if name in self._stored:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'namespaces "{name}" already exists',
                    name=name,
                    kind="namespaces",
                )
            self._stored[name] = self._fresh(name, meta)
            return self._stored[name]

    def patch(self, name: str, content_type: str, body: Any) -> Obj:
        """A patch of an existing namespace; a server-side apply creates a missing one."""
        with self._lock:
            current = self._stored.get(name)
            if current is None:
                if not content_type.lower().startswith(APPLY_PATCH):
                    raise namespace_not_found(name)
                current = self._fresh(name, {})
            patched = apply_patch(content_type, current, body)
            if not isinstance(patched, dict):
                raise ApiError.bad_request("the patched namespace is not an object")
            meta = patched.get("metadata") or {}
            self._stored[name] = self._fresh(name, meta if isinstance(meta, dict) else {})
            self._stored[name]["metadata"]["uid"] = current["metadata"]["uid"]
            return self._stored[name]

    def replace(self, name: str, body: Any) -> Obj:
        meta = body.get("metadata") if isinstance(body, dict) else {}
        with self._lock:
            current = self._stored.get(name)
            if current is None:
                raise namespace_not_found(name)  # an update never creates a namespace
            self._stored[name] = self._fresh(name, meta if isinstance(meta, dict) else {})
            self._stored[name]["metadata"]["uid"] = current["metadata"]["uid"]
            return self._stored[name]

    def delete(self, name: str) -> Obj:
        if name in self.IMMORTAL:
            raise ApiError(
                403,
                "Forbidden",
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                name=name,
                kind="namespaces",
            )
        with self._lock:
            removed = self._stored.pop(name, None)
        if removed is None:
            raise namespace_not_found(name)
        return {**removed, "status": {"phase": "Terminating"}}
