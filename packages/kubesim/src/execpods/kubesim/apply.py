"""Server-side apply and field ownership (`metadata.managedFields`) for the plain stored kinds.

Spark 4.3 creates a cluster-mode driver's Service and ConfigMap with fabric8's
`resourceList(...).forceConflicts().serverSideApply()`: a `PATCH` of each object with
`Content-Type: application/apply-patch+yaml` and `?fieldManager=fabric8&force=true`, which must
create the object when it does not exist. `kubectl apply --server-side` sends the same.

What the API server does, and this module models:

- every write records which *manager* set which fields: an apply as operation `Apply` under its
  `fieldManager` (required: 400 without it), a create, update or patch as operation `Update`
  under `fieldManager` or, when none is given, the client's User-Agent up to its first `/`;
- an apply sets the fields of its configuration, and removes the fields its manager applied
  before and no longer applies, unless another manager also owns them;
- an apply that would change a field another manager owns is a conflict: 409 naming each manager
  and field, unless `force=true`, which takes the fields over;
- an update never conflicts: it takes over the fields it changes;
- an apply of an object that does not exist creates it (201).

Fields are identified as in `fieldsV1`: `f:<name>` for a map key, `k:{...}` for an item of a list
merged by key (Service ports by port and protocol, containers and env by name, owner references
by uid...), `v:<json>` for an item of a set list (finalizers); other lists are atomic, owned
whole. The structural schema is a practical subset, enough for the kinds kubesim stores.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from execpods.kubesim.bodies import StatusCause
from execpods.kubesim.errors import ApiError

__all__ = [
    "APPLY_PATCH",
    "FieldPath",
    "apply_config",
    "changed_fields",
    "field_manager",
    "managed_fields",
    "parse_apply_body",
    "record_update",
    "to_fields_v1",
]

APPLY_PATCH = "application/apply-patch+yaml"

FieldPath = tuple[str, ...]
Obj = dict[str, Any]

#: Lists merged by key, by the field's name (and, for `ports`, the keys its items carry).
_LIST_MAP_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "ownerReferences": ("uid",),
    "imagePullSecrets": ("name",),
    "conditions": ("type",),
    "hostAliases": ("ip",),
}
_SET_LISTS = frozenset({"finalizers"})
#: Maps owned whole (`+mapType=atomic`/`+structType=atomic` in the API types): label selectors
#: and a Service's or pod's selector maps.
_ATOMIC_MAPS = frozenset(
    {"selector", "podSelector", "namespaceSelector", "labelSelector", "nodeSelector"}
)
#: What no manager owns: the server's own metadata and the status (applied through the main
#: resource, status is ignored, as for every kind with a status subresource).
_UNOWNED = frozenset(
    {
        "f:apiVersion",
        "f:kind",
        "f:status",
    }
)
_UNOWNED_META = frozenset(
    {
        "f:name",
        "f:namespace",
        "f:uid",
        "f:resourceVersion",
        "f:generation",
        "f:creationTimestamp",
        "f:deletionTimestamp",
        "f:deletionGracePeriodSeconds",
        "f:managedFields",
        "f:selfLink",
    }
)


def parse_apply_body(body: bytes) -> Obj:
    """An apply configuration: YAML (JSON is YAML too); 400 when it is not an object."""
    try:
        loaded = yaml.load(body, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise ApiError.bad_request(f"error decoding YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise ApiError.bad_request("an apply configuration must be an object")
    return loaded


def field_manager(query: Mapping[str, str], user_agent: str, *, apply: bool) -> str:
    """The manager of a write: `fieldManager`, or (not for an apply) the User-Agent's product."""
    given = query.get("fieldManager", "")
    if given:
        if len(given) > 128:
            raise ApiError.bad_request("fieldManager: Too long: may not be more than 128 bytes")
        return given
    if apply:
        required = "Required value: is required for apply patch"
        raise ApiError(
            422,
            "Invalid",
            f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: {required}',
            causes=[{"reason": "FieldValueRequired", "message": required, "field": "fieldManager"}],
            kind="PatchOptions",
        )
    return (user_agent.split("/", 1)[0] or "unknown")[:128]


def _item_key(field: str, item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    if field == "ports":
        names: tuple[str, ...] = (
            ("containerPort", "protocol") if "containerPort" in item else ("port", "protocol")
        )
        keyed = {n: item.get(n, "TCP") for n in names}
    elif field in _LIST_MAP_KEYS:
        names = _LIST_MAP_KEYS[field]
        if any(n not in item for n in names):
            return None
        keyed = {n: item[n] for n in names}
    else:
        return None
    return "k:" + json.dumps(keyed, separators=(",", ":"), sort_keys=True)


def _is_list_map(field: str, value: list[Any]) -> bool:
    return (field in _LIST_MAP_KEYS or field == "ports") and all(
        _item_key(field, item) is not None for item in value
    )


def _leaves(value: Any, path: FieldPath, field: str, out: set[FieldPath]) -> None:
    if isinstance(value, dict) and value and field not in _ATOMIC_MAPS:
        for k, v in value.items():
            _leaves(v, (*path, f"f:{k}"), k, out)
    elif isinstance(value, list) and value and field in _SET_LISTS:
        for item in value:
            out.add((*path, "v:" + json.dumps(item, separators=(",", ":"))))
    elif isinstance(value, list) and value and _is_list_map(field, value):
        for item in value:
            key = _item_key(field, item)
            assert key is not None
            out.add((*path, key, "."))
            _leaves(item, (*path, key), field, out)
    else:
        out.add(path)


def owned_fields(obj: Mapping[str, Any]) -> set[FieldPath]:
    """The fields of a configuration or object a manager would own (leaves and list items)."""
    out: set[FieldPath] = set()
    for k, v in obj.items():
        name = f"f:{k}"
        if name in _UNOWNED:
            continue
        if k == "metadata" and isinstance(v, dict):
            for mk, mv in v.items():
                if f"f:{mk}" not in _UNOWNED_META:
                    _leaves(mv, ("f:metadata", f"f:{mk}"), mk, out)
            continue
        _leaves(v, (name,), k, out)
    return out


def _find(items: list[Any], field: str, key: str) -> int | None:
    for i, item in enumerate(items):
        if _item_key(field, item) == key:
            return i
    return None


def _get(obj: Any, path: FieldPath) -> tuple[bool, Any]:
    """(present, value) of a field path in an object."""
    cur: Any = obj
    field = ""
    for step in path:
        if step == ".":
            return True, cur
        if step.startswith("f:") and isinstance(cur, dict):
            field = step[2:]
            if field not in cur:
                return False, None
            cur = cur[field]
        elif step.startswith("k:") and isinstance(cur, list):
            i = _find(cur, field, step)
            if i is None:
                return False, None
            cur = cur[i]
        elif step.startswith("v:") and isinstance(cur, list):
            item = json.loads(step[2:])
            return item in cur, item
        else:
            return False, None
    return True, cur


def _remove(obj: Any, path: FieldPath) -> None:
    """Remove a field (or list item) from an object; parents left empty by it go too."""
    if not path:
        return
    parent_present, parent = _get(obj, path[:-1])
    if not parent_present:
        return
    step = path[-1]
    field = next((s[2:] for s in reversed(path[:-1]) if s.startswith("f:")), "")
    if step == ".":
        _remove(obj, path[:-1])
        return
    if step.startswith("f:") and isinstance(parent, dict):
        parent.pop(step[2:], None)
    elif step.startswith("k:") and isinstance(parent, list):
        i = _find(parent, field, step)
        if i is not None:
            parent.pop(i)
    elif step.startswith("v:") and isinstance(parent, list):
        item = json.loads(step[2:])
        if item in parent:
            parent.remove(item)
    if isinstance(parent, dict | list) and not parent and len(path) > 2:
        _remove(obj, path[:-1])


def _merge(live: Any, config: Any, field: str = "") -> Any:
    """The applied configuration merged into the live value: maps by key, keyed lists by item,
    set lists by value, anything else replaced."""
    if isinstance(config, dict) and isinstance(live, dict) and field not in _ATOMIC_MAPS:
        out = dict(live)
        for k, v in config.items():
            out[k] = _merge(live.get(k), v, k) if k in live else copy.deepcopy(v)
        return out
    if isinstance(config, list) and isinstance(live, list):
        if field in _SET_LISTS:
            return [*live, *(copy.deepcopy(v) for v in config if v not in live)]
        if config and _is_list_map(field, config) and _is_list_map(field, live):
            out_list = [copy.deepcopy(v) for v in live]
            for item in config:
                key = _item_key(field, item)
                assert key is not None
                i = _find(out_list, field, key)
                if i is None:
                    out_list.append(copy.deepcopy(item))
                else:
                    out_list[i] = _merge(out_list[i], item, field)
            return out_list
    return copy.deepcopy(config)


def _field_text(path: FieldPath) -> str:
    """A field path as the API server writes it in a conflict: `.spec.ports[port=80,...].name`."""
    text = ""
    for step in path:
        if step.startswith("f:"):
            text += "." + step[2:]
        elif step.startswith("k:"):
            keys = json.loads(step[2:])
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]"
        elif step.startswith("v:"):
            text += "[=" + step[2:] + "]"
    return text


def to_fields_v1(paths: Iterable[FieldPath]) -> Obj:
    """Field paths as the nested `fieldsV1` document."""
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for step in path:
            node = node.setdefault(step, {})
    return root


def _from_fields_v1(tree: Mapping[str, Any], prefix: FieldPath = ()) -> set[FieldPath]:
    out: set[FieldPath] = set()
    for step, sub in tree.items():
        path = (*prefix, step)
        if step == "." or not sub:
            out.add(path)
        else:
            out |= _from_fields_v1(sub, path)
    return out


def managed_fields(obj: Mapping[str, Any]) -> list[tuple[str, str, set[FieldPath]]]:
    """(manager, operation, fields) of each entry of an object's `managedFields`."""
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    result = []
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("fieldsV1"), dict):
            fields = _from_fields_v1(entry["fieldsV1"])
            result.append((str(entry.get("manager")), str(entry.get("operation")), fields))
    return result


def _store_managed(
    obj: Obj, entries: list[tuple[str, str, set[FieldPath]]], api_version: str, now: str
) -> None:
    previous = {
        (e.get("manager"), e.get("operation")): e
        for e in (obj["metadata"].get("managedFields") or [])
        if isinstance(e, dict)
    }
    out = []
    for manager, operation, fields in entries:
        if not fields:
            continue
        fields_v1 = to_fields_v1(fields)
        old = previous.get((manager, operation))
        time = old["time"] if old and old.get("fieldsV1") == fields_v1 else now
        out.append(
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
                "time": time,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1,
            }
        )
    if out:
        obj["metadata"]["managedFields"] = out
    else:
        obj["metadata"].pop("managedFields", None)


def _maps(value: Any, path: FieldPath, field: str, out: set[FieldPath]) -> None:
    """The "." entry of every granular map: an update that creates a map owns the map itself."""
    if isinstance(value, dict) and value and field not in _ATOMIC_MAPS:
        if path and path != ("f:metadata",):
            out.add((*path, "."))
        for k, v in value.items():
            if f"f:{k}" not in _UNOWNED and not (
                path == ("f:metadata",) and f"f:{k}" in _UNOWNED_META
            ):
                _maps(v, (*path, f"f:{k}"), k, out)


def changed_fields(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> set[FieldPath]:
    """The fields of `new` that `old` lacks or holds with another value, and the maps it
    creates (their "." entry, as kube-apiserver records an update's new maps)."""
    fields = owned_fields(new)
    maps: set[FieldPath] = set()
    _maps(dict(new), (), "", maps)
    fields |= {m for m in maps if m[-1] == "." and not _get(old or {}, m[:-1])[0]}
    if old is None:
        return fields
    return {p for p in fields if _get(old, p) != _get(new, p)}


def record_update(old: Obj | None, new: Obj, *, manager: str, api_version: str, now: str) -> None:
    """A create, update or patch by `manager`: it owns what it changed (taken from the others,
    with no conflict), and fields the write removed are no one's any more."""
    present = owned_fields(new)
    changed = changed_fields(old, new)
    entries = []
    found = False
    for name, operation, fields in managed_fields(old or {}):
        kept = (fields & present) - changed
        if name == manager and operation == "Update":
            kept |= changed
            found = True
        entries.append((name, operation, kept))
    if not found:
        entries.append((manager, "Update", changed))
    _store_managed(new, entries, api_version, now)


def apply_config(
    live: Obj | None,
    config: Obj,
    *,
    manager: str,
    force: bool,
    api_version: str,
    now: str,
) -> Obj:
    """The object after `manager` applies `config` to `live` (None: it does not exist yet).

    Raises the API server's 409 Conflict when another manager owns a field this apply would
    change, unless `force`. The result's `metadata.managedFields` says who owns what.
    """
    applied = owned_fields(config)
    entries = managed_fields(live or {})
    base: Obj = copy.deepcopy(live) if live is not None else {"metadata": {}}
    conflicts: list[tuple[str, FieldPath]] = []
    shown: dict[str, str] = {}
    for name, operation, fields in entries:
        if name == manager:
            continue
        for path in sorted(fields & applied):
            if _get(base, path) != _get(config, path):
                conflicts.append((name, path))
                shown[name] = _shown_manager(live or {}, name, operation)
    if conflicts and not force:
        raise _conflict_error(conflicts, shown)
    others: set[FieldPath] = set()
    kept_entries: list[tuple[str, str, set[FieldPath]]] = []
    previous: set[FieldPath] = set()
    for name, operation, fields in entries:
        if name == manager and operation == "Apply":
            previous = fields
            continue
        # Forced: the conflicting fields move to this manager; shared equal values stay shared.
        remaining = fields - {p for n, p in conflicts if n == name}
        others |= remaining
        kept_entries.append((name, operation, remaining))
    # Whole list items first (their "." entry), then single fields of what is left.
    for path in sorted(previous - applied - others, key=lambda p: (p[-1] != ".", len(p))):
        _remove(base, path)
    merged = _merge(base, {k: v for k, v in config.items() if k != "status"})
    if not isinstance(merged, dict):
        raise ApiError.bad_request("an apply configuration must be an object")
    merged.setdefault("metadata", {})
    kept_entries.append((manager, "Apply", applied))
    _store_managed(merged, kept_entries, api_version, now)
    return merged


def _shown_manager(live: Obj, name: str, operation: str) -> str:
    """A manager as kube-apiserver names it in a conflict: an updater with its API version
    (`"kubectl-create" using v1`), an applier by name alone."""
    if operation != "Update":
        return json.dumps(name)
    for entry in (live.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == name and entry.get("operation") == operation:
            return f"{json.dumps(name)} using {entry.get('apiVersion')}"
    return json.dumps(name)


def _conflict_error(conflicts: list[tuple[str, FieldPath]], shown: dict[str, str]) -> ApiError:
    causes: list[StatusCause] = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {shown[name]}",
            "field": _field_text(path),
        }
        for name, path in conflicts
    ]
    if len(conflicts) == 1:
        name, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {shown[name]}: {_field_text(path)}"
    else:
        lines = []
        for name in sorted({n for n, _ in conflicts}):
            lines.append(f"conflicts with {shown[name]}:")
            lines.extend(f"- {_field_text(p)}" for n, p in conflicts if n == name)
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, causes=causes)
