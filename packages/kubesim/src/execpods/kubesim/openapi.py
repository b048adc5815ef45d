"""The OpenAPI v3 documents kubectl reads before `kubectl apply`.

kubectl validates what it applies. It first asks the server's OpenAPI v3 documents whether each
kind's PATCH takes the `fieldValidation` query parameter; when it does, kubectl leaves the
validation to the server (`fieldValidation=Strict`) instead of downloading the whole schema.
kubesim serves just that: for each resource it serves, a PATCH operation tagged with its
`x-kubernetes-group-version-kind` and the parameter. Without these documents `kubectl apply`
fails with "failed to download openapi" unless given `--validate=false`.
"""

from __future__ import annotations

from collections.abc import Iterable

from execpods.kubesim.store import Obj

__all__ = ["OPENAPI_ROOT", "openapi_document"]

OPENAPI_ROOT = "/openapi/v3"

# (group, plural, kind, namespaced) of every resource kubesim serves besides its object kinds.
_BUILTIN = (
    ("", "pods", "Pod", True),
    ("", "namespaces", "Namespace", False),
)


def _gv_path(group: str) -> str:
    return "api/v1" if not group else f"apis/{group}/v1"


def openapi_document(path: str, resources: Iterable[tuple[str, str, str, bool]]) -> Obj | None:
    """The root (`/openapi/v3`) or one group-version's document; None when `path` is neither.

    `resources` are (group, plural, kind, namespaced) of the served object kinds."""
    served = [*_BUILTIN, *resources]
    if path == OPENAPI_ROOT:
        versions = sorted({_gv_path(group) for group, *_ in served})
        return {"paths": {gv: {"serverRelativeURL": f"{OPENAPI_ROOT}/{gv}"} for gv in versions}}
    for gv in {_gv_path(group) for group, *_ in served}:
        if path == f"{OPENAPI_ROOT}/{gv}":
            return _document(gv, [r for r in served if _gv_path(r[0]) == gv])
    return None


def _document(gv: str, resources: list[tuple[str, str, str, bool]]) -> Obj:
    paths: Obj = {}
    for group, plural, kind, namespaced in resources:
        scope = "/namespaces/{namespace}" if namespaced else ""
        paths[f"/{gv}{scope}/{plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{kind}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": group, "version": "v1", "kind": kind},
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
    }
