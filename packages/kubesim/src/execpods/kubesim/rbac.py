"""RBAC: bearer tokens that map to service accounts, and Roles that say what each may do.

Off by default (anything is accepted). With a policy loaded from the same manifests a cluster
gets (ServiceAccounts, Roles, ClusterRoles, RoleBindings, ClusterRoleBindings, as parsed
dicts), every API request is authenticated by its ``Authorization: Bearer`` token and
authorised as kube-apiserver's RBAC authoriser does: a rule allows a request when its API group,
verb, resource (``pods``, ``pods/status``, ``*``, ``*/status``) and resource names match, and
the rule's Role is bound to the user, one of its groups, or its service account. A refusal is
the Status kube-apiserver sends: 403 ``Forbidden`` with the message that names the user, verb,
resource and namespace. An unknown token is 401; no token is ``system:anonymous``. Discovery
and health paths stay open (the API server grants them to everyone), and so does the
simulator's control endpoint (the test harness, not the API).
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from execpods.kubesim.errors import ApiError
from execpods.kubesim.params import TRUE

__all__ = ["ADMIN_USER", "Authorizer", "RequestAttributes", "User", "request_attributes"]

#: The user the simulator's own admin token authenticates as; in ``system:masters``, it is
#: never refused (the kubeconfig the simulator writes carries this token).
ADMIN_USER = "kubesim-admin"

_OPEN_PATHS = frozenset({"/version", "/api", "/apis", "/api/v1", "/healthz", "/readyz", "/livez"})
_RESOURCE = re.compile(
    r"^/api/v1/(?:(?P<watch>watch)/)?(?:namespaces/(?P<ns>[^/]+)/)?(?P<resource>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)
_KINDS = ("ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    """An authenticated user: a name and its groups."""

    name: str
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAttributes:
    """What the authoriser decides on, as kube-apiserver's RequestInfo names it."""

    verb: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    api_group: str = ""


def request_attributes(
    method: str, path: str, query: Mapping[str, str]
) -> RequestAttributes | None:
    """The resource request a path names, or None for a path outside the resource API."""
    m = _RESOURCE.match(path)
    if m is None:
        return None
    ns, resource, name, sub = m.group("ns"), m.group("resource"), m.group("name"), m.group("sub")
    if ns is None and resource == "namespaces" and name is not None:
        ns, sub = name, sub or ""  # a namespace is its own namespace, as kube-apiserver has it
    elif ns is None and resource == "namespaces":
        ns = ""
    watch = m.group("watch") is not None or query.get("watch", "") in TRUE
    if method == "GET":
        verb = "watch" if watch else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return RequestAttributes(
        verb=verb, resource=resource, subresource=sub or "", namespace=ns or "", name=name or ""
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Rule:
    api_groups: frozenset[str]
    verbs: frozenset[str]
    resources: frozenset[str]
    resource_names: frozenset[str]

    def allows(self, req: RequestAttributes) -> bool:
        if not ({"*", req.api_group} & self.api_groups):
            return False
        if not ({"*", req.verb} & self.verbs):
            return False
        combined = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
        wanted = {"*", combined}
        if req.subresource:
            wanted.add(f"*/{req.subresource}")
        if not (wanted & self.resources):
            return False
        return not self.resource_names or req.name in self.resource_names


@dataclass(slots=True)
class _Policy:
    roles: dict[tuple[str, str], list[_Rule]] = field(default_factory=dict)  # (ns, name)
    cluster_roles: dict[str, list[_Rule]] = field(default_factory=dict)
    # (namespace or "" for cluster-wide, role key, subject (kind, name))
    bindings: list[tuple[str, tuple[str, str], tuple[str, str]]] = field(default_factory=list)
    service_accounts: set[tuple[str, str]] = field(default_factory=set)


def _strings(value: object, what: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings, not {value!r}")
    return frozenset(value)


def _rules(obj: Mapping[str, object]) -> list[_Rule]:
    rules = obj.get("rules") or []
    if not isinstance(rules, list):
        raise ValueError("rules must be a list")
    return [
        _Rule(
            api_groups=_strings(r.get("apiGroups"), "apiGroups"),
            verbs=_strings(r.get("verbs"), "verbs"),
            resources=_strings(r.get("resources"), "resources"),
            resource_names=_strings(r.get("resourceNames"), "resourceNames"),
        )
        for r in rules
        if isinstance(r, dict)
    ]


def _meta(obj: Mapping[str, object]) -> tuple[str, str]:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(name, str) or not name:
        raise ValueError(f"{obj.get('kind')} without metadata.name")
    namespace = meta.get("namespace") or "default"
    return str(namespace), name


def _load(policy: _Policy, obj: Mapping[str, object]) -> None:
    kind = obj.get("kind")
    if kind == "List":
        items = obj.get("items") or []
        for item in items if isinstance(items, list) else [items]:
            if not isinstance(item, Mapping):
                raise ValueError(f"a List item must be an object, not {item!r}")
            _load(policy, item)
        return
    if kind not in _KINDS:
        raise ValueError(f"unsupported kind {kind!r} in an RBAC manifest; one of {_KINDS}")
    namespace, name = _meta(obj)
    if kind == "ServiceAccount":
        policy.service_accounts.add((namespace, name))
    elif kind == "Role":
        policy.roles[(namespace, name)] = _rules(obj)
    elif kind == "ClusterRole":
        policy.cluster_roles[name] = _rules(obj)
    else:
        ref = obj.get("roleRef")
        ref_kind, ref_name = (
            (ref.get("kind"), ref.get("name")) if isinstance(ref, Mapping) else ("", "")
        )
        if ref_kind not in ("Role", "ClusterRole") or not isinstance(ref_name, str):
            raise ValueError(f"{kind} {name}: roleRef must name a Role or ClusterRole")
        if kind == "ClusterRoleBinding" and ref_kind != "ClusterRole":
            raise ValueError(f"ClusterRoleBinding {name}: roleRef must be a ClusterRole")
        scope = "" if kind == "ClusterRoleBinding" else namespace
        role = (namespace if ref_kind == "Role" else "", ref_name)
        subjects = obj.get("subjects") or []
        for subject in subjects if isinstance(subjects, list) else []:
            if not isinstance(subject, Mapping):
                raise ValueError(f"{kind} {name}: a subject must be an object")
            s_kind, s_name = subject.get("kind"), subject.get("name")
            if s_kind == "ServiceAccount":
                s_ns = subject.get("namespace") or namespace
                s_name = f"system:serviceaccount:{s_ns}:{s_name}"
                s_kind = "User"
            policy.bindings.append((scope, role, (str(s_kind), str(s_name))))


class Authorizer:
    """Tokens and the RBAC policy; consulted on every API request while enabled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._policy: _Policy | None = None
        self.admin_token = "kubesim-admin-" + secrets.token_hex(16)
        self._tokens: dict[str, User] = {
            self.admin_token: User(name=ADMIN_USER, groups=frozenset({"system:masters"}))
        }

    @property
    def enabled(self) -> bool:
        return self._policy is not None

    def enable(self, objects: Iterable[Mapping[str, object]]) -> None:
        """Enforce the policy these manifests describe (replacing any earlier one)."""
        policy = _Policy()
        for obj in objects:
            if not isinstance(obj, Mapping):
                raise ValueError(f"an RBAC manifest must be an object, not {obj!r}")
            _load(policy, obj)
        with self._lock:
            self._policy = policy

    def disable(self) -> None:
        with self._lock:
            self._policy = None

    def token_for(self, namespace: str, name: str, token: str | None = None) -> str:
        """A bearer token for the service account ``namespace/name`` (``token`` to choose it)."""
        token = token or f"kubesim-sa-{secrets.token_hex(16)}"
        user = User(
            name=f"system:serviceaccount:{namespace}:{name}",
            groups=frozenset(
                {
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{namespace}",
                    "system:authenticated",
                }
            ),
        )
        with self._lock:
            self._tokens[token] = user
        return token

    def authenticate(self, authorization: str) -> User:
        """The user a request's Authorization header names; 401 for a token nobody issued."""
        scheme, _, token = authorization.strip().partition(" ")
        if not authorization:
            return User(name="system:anonymous", groups=frozenset({"system:unauthenticated"}))
        with self._lock:
            user = self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return user

    def allowed(self, user: User, req: RequestAttributes) -> bool:
        if "system:masters" in user.groups:
            return True
        with self._lock:
            policy = self._policy
        if policy is None:
            return True
        subjects = {("User", user.name)} | {("Group", g) for g in user.groups}
        for scope, role, subject in policy.bindings:
            if subject not in subjects or (scope and scope != req.namespace):
                continue
            rules = policy.roles.get(role, []) if role[0] else policy.cluster_roles.get(role[1], [])
            if any(rule.allows(req) for rule in rules):
                return True
        return False

    def check(self, method: str, path: str, query: Mapping[str, str], authorization: str) -> None:
        """Raise 401 or 403 (kube-apiserver's Status) unless the request is allowed."""
        if self._policy is None or path in _OPEN_PATHS:
            return
        user = self.authenticate(authorization)
        req = request_attributes(method, path, query)
        if req is None or self.allowed(user, req):
            return
        raise forbidden(user, req)


def forbidden(user: User, req: RequestAttributes) -> ApiError:
    """The 403 kube-apiserver answers when no rule allows the request."""
    resource = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
    where = f'in the namespace "{req.namespace}"' if req.namespace else "at the cluster scope"
    why = (
        f'User "{user.name}" cannot {req.verb} resource "{resource}" in API group '
        f'"{req.api_group}" {where}'
    )
    subject = f'{req.resource} "{req.name}"' if req.name else req.resource
    message = f"{subject} is forbidden: {why}"
    return ApiError(403, "Forbidden", message, name=req.name or None, kind=req.resource)
