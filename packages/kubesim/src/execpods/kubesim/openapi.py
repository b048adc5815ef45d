"""The OpenAPI v3 documents kubectl reads before `kubectl apply`.

kubectl validates what it applies. It first asks the server's OpenAPI v3 documents whether each
kind's PATCH takes the `fieldValidation` query parameter; when it does, kubectl leaves the
validation to the server (`fieldValidation=Strict`) instead of downloading the whole schema.
kubesim serves just that: for each resource it serves, a PATCH operation tagged with its
`x-kubernetes-group-version-kind` and the parameter. Without these documents `kubectl apply`
fails with "failed to download openapi" unless given `--validate=false`.

A kind in none of those documents (a custom resource, such as the Prometheus Operator's
PodMonitor) sends kubectl to the CustomResourceDefinitions and then to the OpenAPI v2 document:
kubesim answers both as a cluster without CRDs would, empty, so kubectl says what a cluster says
("no matches for kind ... ensure CRDs are installed first"). Before, a 404 and a 406 there made
it fail with "the server was unable to respond with a content type that the client supports".
"""

from __future__ import annotations

from collections.abc import Iterable

from execpods.kubesim.store import Obj

__all__ = [
    "CRD_LIST_PATH",
    "OPENAPI_ROOT",
    "OPENAPI_V2_PATH",
    "no_crds",
    "openapi_document",
    "openapi_v2",
]

OPENAPI_ROOT = "/openapi/v3"
OPENAPI_V2_PATH = "/openapi/v2"
CRD_LIST_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def no_crds() -> Obj:
    """The CustomResourceDefinitionList of a cluster that has none."""
    return {
        "kind": "CustomResourceDefinitionList",
        "apiVersion": "apiextensions.k8s.io/v1",
        "metadata": {"resourceVersion": "1"},
        "items": [],
    }


def openapi_v2(accept: str) -> tuple[str, bytes]:
    """(content type, body) of an OpenAPI v2 document that declares nothing: in Protobuf (as
    kubectl asks for it, with the API server's content type) an empty `Document` is no bytes."""
    if "protobuf" in accept:
        return _V2_PROTOBUF, b""
    return "application/json", b'{"swagger":"2.0","info":{"title":"Kubernetes","version":"v1"}}'


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
