"""The three patch formats the API server accepts for pods.

Strategic merge matters most: the official clients send a dict body as a strategic merge patch.
``conditions`` are merged by ``type``; ``containerStatuses`` (and the init and ephemeral ones) are
atomic lists, replaced whole, as kube-apiserver treats them (checked against a real server: a
patch naming one container's status leaves only that one).
"""

from __future__ import annotations

import copy

from execpods.kubesim.bodies import JsonObject, JsonValue
from execpods.kubesim.errors import ApiError

__all__ = [
    "JSON_PATCH",
    "MERGE_PATCH",
    "PATCH_TYPES",
    "STRATEGIC_MERGE_PATCH",
    "apply_patch",
    "json_patch",
    "merge_patch",
    "strategic_merge",
]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH)

#: List fields of a pod merged by key under strategic merge (field name -> merge key).
MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "podIPs": "ip",
    "hostIPs": "ip",
    "resourceClaims": "name",
    "readinessGates": "conditionType",
}

#: List fields merged as sets of scalars.
SET_LISTS = frozenset({"finalizers"})


def merge_patch(target: JsonValue, patch: JsonValue) -> JsonValue:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: JsonObject = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def _merge_list(field: str, target: list[JsonValue], patch: list[JsonValue]) -> list[JsonValue]:
    key = MERGE_KEYS.get(field)
    if field in SET_LISTS:
        out = list(target)
        out.extend(v for v in patch if v not in out)
        return out
    items = [p for p in patch if isinstance(p, dict)]
    if key is None or len(items) != len(patch):
        # An atomic list is replaced whole; a null inside it is a field left out, as the API
        # server decodes it (a status entry patched with `"waiting": null` has no waiting).
        return [strategic_merge({}, p) if isinstance(p, dict) else copy.deepcopy(p) for p in patch]
    if any(p.get("$patch") == "replace" for p in items):
        return [p for p in copy.deepcopy(items) if p.get("$patch") != "replace"]
    out = [copy.deepcopy(t) for t in target]
    index = {str(t.get(key)): i for i, t in enumerate(out) if isinstance(t, dict)}
    removed: set[int] = set()
    for item in items:
        if key not in item:
            raise ApiError(422, "Invalid", f"map in list {field} lacks merge key {key!r}")
        i = index.get(str(item[key]))
        if item.get("$patch") == "delete":
            if i is not None:
                removed.add(i)
            continue
        if i is None:
            index[str(item[key])] = len(out)
            out.append(strategic_merge({}, item))
        else:
            out[i] = strategic_merge(out[i], item)
    return [v for i, v in enumerate(out) if i not in removed]


def strategic_merge(target: JsonValue, patch: JsonValue, field: str = "") -> JsonValue:
    """A strategic merge patch using the pod schema's merge keys (a practical subset).

    Supports ``null`` deletion, keyed list merges, ``$patch: delete|replace`` and the
    ``$deleteFromPrimitiveList/<field>`` and ``$setElementOrder/<field>`` directives.
    """
    if isinstance(patch, list):
        base = target if isinstance(target, list) else []
        return _merge_list(field, base, patch)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result: JsonObject = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            present = result.get(name)
            drop = v if isinstance(v, list) else [v]
            result[name] = (
                [x for x in present if x not in drop] if isinstance(present, list) else []
            )
            continue
        if v is None:
            result.pop(k, None)
            continue
        merged = strategic_merge(result.get(k), v, k)
        if merged is None:
            result.pop(k, None)
        else:
            result[k] = merged
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _missing(path: str) -> ApiError:
    return ApiError(422, "Invalid", f"path {path!r} does not exist")


def _child(cur: JsonValue, part: str, path: str) -> JsonValue:
    try:
        if isinstance(cur, list):
            return cur[int(part)]
        if isinstance(cur, dict):
            return cur[part]
    except (KeyError, IndexError, ValueError):
        pass
    raise _missing(path)


def _parent(doc: JsonValue, parts: list[str], path: str) -> JsonValue:
    cur = doc
    for p in parts[:-1]:
        cur = _child(cur, p, path)
    return cur


def _get(doc: JsonValue, path: str) -> JsonValue:
    parts = _pointer(path)
    if not parts:
        return doc
    return _child(_parent(doc, parts, path), parts[-1], path)


def _remove(doc: JsonValue, path: str) -> JsonValue:
    parts = _pointer(path)
    parent = _parent(doc, parts, path)
    try:
        if isinstance(parent, list):
            return parent.pop(int(parts[-1]))
        if isinstance(parent, dict):
            return parent.pop(parts[-1])
    except (KeyError, IndexError, ValueError):
        pass
    raise _missing(path)


def _add(doc: JsonValue, path: str, value: JsonValue, *, replace: bool) -> JsonValue:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, list):
        if replace:
            _remove(doc, path)
        if last == "-":
            parent.append(value)
            return doc
        try:
            idx = int(last)
        except ValueError:
            raise ApiError(422, "Invalid", f"bad array index in {path!r}") from None
        if not 0 <= idx <= len(parent):
            raise ApiError(422, "Invalid", f"array index out of range in {path!r}")
        parent.insert(idx, value)
    elif isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, "Invalid", f"path {path!r} does not exist")
        parent[last] = value
    else:
        raise ApiError(422, "Invalid", f"path {path!r} does not exist")
    return doc


def json_patch(doc: JsonValue, ops: JsonValue) -> JsonValue:
    """RFC 6902: add, remove, replace, move, copy and test, applied in order to a copy."""
    if not isinstance(ops, list):
        raise ApiError.bad_request("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError.bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path, source = op["op"], op["path"], op.get("from", "")
        if kind in ("move", "copy") and "from" not in op:
            raise ApiError.bad_request(f"JSON patch operation {kind!r} needs 'from': {op!r}")
        if not isinstance(path, str) or not isinstance(source, str):
            raise ApiError.bad_request(f"JSON patch paths must be strings: {op!r}")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), replace=False)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "move":
            value = _remove(doc, source)
            doc = _add(doc, path, value, replace=False)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, source)), replace=False)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, "Invalid", f"test operation failed at {path!r}")
        else:
            raise ApiError.bad_request(f"unknown JSON patch operation {kind!r}")
    return doc


def apply_patch(content_type: str, target: JsonObject, body: JsonValue) -> JsonObject:
    """Apply a patch of the given media type; 415 for types the simulator does not serve."""
    ctype = content_type.split(";", 1)[0].strip().lower()
    if ctype == MERGE_PATCH:
        if not isinstance(body, dict):
            raise ApiError.bad_request("a merge patch must be a JSON object")
        result = merge_patch(target, body)
    elif ctype == STRATEGIC_MERGE_PATCH:
        if not isinstance(body, dict):
            raise ApiError.bad_request("a strategic merge patch must be a JSON object")
        result = strategic_merge(target, body)
    elif ctype == JSON_PATCH:
        result = json_patch(target, body)
    else:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{', '.join(PATCH_TYPES)}",
        )
    if not isinstance(result, dict):
        raise ApiError(422, "Invalid", "the patch did not produce an object")
    return result
