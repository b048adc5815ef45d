"""The routing of everything but pods: discovery, namespaces, the other core kinds and RBAC.

The server (server.py) owns the connection, the request log and the pod API; a request whose
path names discovery, a namespace, a ConfigMap/Service/Secret/PVC... or an RBAC object is
answered here, through the handler's small ``Responder`` surface.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import orjson
from execpods.kubesim import resources
from execpods.kubesim.apply import APPLY_PATCH, field_manager, parse_apply_body
from execpods.kubesim.applykinds import (
    NAMESPACE_RESOURCE,
    NamespaceApi,
    group_discovery,
    namespace_not_found,
)
from execpods.kubesim.errors import ApiError
from execpods.kubesim.objects import ObjectApi
from execpods.kubesim.openapi import CRD_LIST_PATH, OPENAPI_ROOT, no_crds, openapi_document
from execpods.kubesim.params import parse_bool
from execpods.kubesim.pods import valid_namespace_name
from execpods.kubesim.watchserve import WatchSource

__all__ = ["Responder", "check_namespace", "discovery", "json_body", "serve"]

_OBJECT = re.compile(r"^/api/v1/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?$")
_OBJECT_WATCH = re.compile(r"^/api/v1/watch/(?:namespaces/([^/]+)/)?([a-z]+)(?:/([^/]+))?$")
_NAMESPACE = re.compile(r"^/api/v1/namespaces/([^/]+)$")
_IN_NAMESPACE = re.compile(r"^/api/v1/namespaces/([^/]+)(/.*)?$")
_GROUP_IN_NAMESPACE = re.compile(r"^/apis/[^/]+/[^/]+/namespaces/([^/]+)(/.*)?$")
_GROUP_OBJECT = re.compile(
    r"^/apis/([a-z0-9.-]+)/v1/(?:namespaces/([^/]+)/)?([a-z]+)(?:/([^/]+))?$"
)


class Responder(Protocol):
    """What the routes need of the request handler."""

    def header(self, name: str, default: str = "") -> str: ...

    def authorize(self, method: str, path: str) -> None: ...

    def reply(self, code: int, obj: Any) -> int: ...

    def watched(
        self,
        namespace: str | None,
        name: str | None,
        query: dict[str, str],
        api: WatchSource,
        *,
        watch_path: bool,
    ) -> bool: ...


def json_body(body: bytes) -> Any:
    """A request body as JSON, or the 400 a cluster answers."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError.bad_request(f"the request body is not valid JSON: {exc}") from None


def check_namespace(
    method: str, path: str, namespaces: NamespaceApi | None = None, content_type: str = ""
) -> None:
    """The namespace a request names must be able to exist, and exist for a create in it.

    A name that is not a DNS-1123 label cannot exist: reading it, or writing into it, gets the
    404 a cluster answers. With `namespaces`, a create inside a namespace that was never created
    (a POST, or a server-side apply) gets the NamespaceLifecycle admission plugin's 404,
    `namespaces "x" not found`; reads and deletes go on (a list in it is empty).
    """
    m = _IN_NAMESPACE.match(path) or _GROUP_IN_NAMESPACE.match(path)
    if m is None:
        return
    namespace, inside = m.group(1), m.group(2)
    if not valid_namespace_name(namespace):
        if inside is None or method in ("POST", "PUT", "PATCH"):
            raise ApiError.not_found(namespace, "namespaces")
        return
    creates = method == "POST" or (
        method == "PATCH" and content_type.lower().startswith(APPLY_PATCH)
    )
    if namespaces is not None and inside and creates and not namespaces.exists(namespace):
        raise namespace_not_found(namespace)


def discovery(
    method: str, path: str, objects: dict[str, ObjectApi], server_address: Any
) -> dict[str, Any] | None:
    """The discovery (or OpenAPI) document a path names, or None when it names none."""
    kinds = [o.kind for o in objects.values()]
    found = group_discovery(path, kinds)
    if found is None and path.startswith(OPENAPI_ROOT):
        found = openapi_document(path, [(k.group, k.plural, k.kind, True) for k in kinds])
    if found is None:
        found = resources.discovery(path, server_address)
    if found is None and path == CRD_LIST_PATH:
        found = no_crds()
    if found is None:
        return None
    if method != "GET":
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {path}")
    if path == "/api/v1":
        listed = [r for r in found["resources"] if r["name"] != "namespaces"]
        listed.append(dict(NAMESPACE_RESOURCE))
        listed.extend(k.discovery() for k in kinds if not k.group)
        found["resources"] = listed
    return found


def serve(
    h: Responder,
    method: str,
    path: str,
    query: dict[str, str],
    body: bytes,
    *,
    objects: dict[str, ObjectApi],
    namespaces: NamespaceApi | None,
) -> int | None:
    """Answer a namespace or non-pod object request (the status sent), or None: not ours."""
    if namespaces is not None and (path == "/api/v1/namespaces" or _NAMESPACE.match(path)):
        return _namespaces(h, method, path, body, namespaces)
    route = _object_route(path, objects)
    if route is not None:
        api, namespace, name, watch_path = route
        applying = h.header("Content-Type").split(";", 1)[0].strip().lower() == APPLY_PATCH
        creating = namespace and name and api.store.find(namespace, name) is None
        if method == "PATCH" and applying and creating:
            h.authorize("POST", path)  # an apply that creates needs create as well as patch
        return _objects(
            h, method, query, body, api=api, namespace=namespace, name=name, watch_path=watch_path
        )
    if _NAMESPACE.match(path):  # a server without namespaces (none is built so): none exists
        raise namespace_not_found(path.rsplit("/", 1)[1])
    return None


def _object_route(
    path: str, objects: dict[str, ObjectApi]
) -> tuple[ObjectApi, str | None, str | None, bool] | None:
    """(api, namespace, name, legacy watch path) for a ConfigMap, Service... path."""
    if path.startswith("/apis/"):
        g = _GROUP_OBJECT.match(path)
        if g is None:
            return None
        api = objects.get(g.group(3))
        if api is None or not api.kind.group or api.kind.group != g.group(1):
            return None
        return api, g.group(2), g.group(4), False
    if path.startswith("/api/v1/watch/"):
        m = _OBJECT_WATCH.match(path)
        watch_path = True
    else:
        m = _OBJECT.match(path)
        watch_path = False
        if m is None and path.count("/") == 3:  # /api/v1/{plural}: across namespaces
            plural = path.rsplit("/", 1)[1]
            api = objects.get(plural)
            return None if api is None else (api, None, None, False)
    if m is None:
        return None
    api = objects.get(m.group(2))
    if api is None or api.kind.group:
        return None
    return api, m.group(1), m.group(3), watch_path


def _namespaces(h: Responder, method: str, path: str, body: bytes, api: NamespaceApi) -> int:
    """Namespaces, cluster-scoped (applykinds.NamespaceApi)."""
    m = _NAMESPACE.match(path)
    if m is None:
        if method == "GET":
            return h.reply(200, api.list())
        if method == "POST":
            return h.reply(201, api.create(json_body(body)))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on namespaces")
    name = m.group(1)
    if method == "GET":
        return h.reply(200, api.get(name))
    if method == "PATCH":
        return h.reply(200, api.patch(name, h.header("Content-Type"), json_body(body)))
    if method == "PUT":
        return h.reply(200, api.replace(name, json_body(body)))
    if method == "DELETE":
        return h.reply(200, api.delete(name))
    raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a namespace")


def _objects(
    h: Responder,
    method: str,
    query: dict[str, str],
    body: bytes,
    *,
    api: ObjectApi,
    namespace: str | None,
    name: str | None,
    watch_path: bool,
) -> int:
    """The verbs on ConfigMaps, Services, PersistentVolumeClaims, Secrets and RBAC objects."""
    if name is None or watch_path:
        if method == "GET":
            if h.watched(namespace, name, query, api, watch_path=watch_path):
                return 200
            return h.reply(200, api.list(namespace, query))
        if namespace is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} needs a namespace")
        if method == "POST":
            manager = field_manager(query, h.header("User-Agent"), apply=False)
            return h.reply(201, api.create(namespace, json_body(body), manager=manager))
        if method == "DELETE":
            return h.reply(200, api.delete_collection(namespace, query))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
    assert namespace is not None
    if method == "GET":
        return h.reply(200, api.get(namespace, name))
    if method == "PUT":
        manager = field_manager(query, h.header("User-Agent"), apply=False)
        return h.reply(200, api.replace(namespace, name, json_body(body), manager=manager))
    if method == "PATCH":
        ctype = h.header("Content-Type")
        if ctype.split(";", 1)[0].strip().lower() == APPLY_PATCH:
            manager = field_manager(query, h.header("User-Agent"), apply=True)
            force = parse_bool(query.get("force"), "force")
            applied, created = api.apply(
                namespace, name, parse_apply_body(body), manager=manager, force=force
            )
            return h.reply(201 if created else 200, applied)
        manager = field_manager(query, h.header("User-Agent"), apply=False)
        return h.reply(200, api.patch(namespace, name, ctype, json_body(body), manager=manager))
    if method == "DELETE":
        options = json_body(body) if body.strip() else {}
        return h.reply(200, api.delete(namespace, name, options))
    raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")
