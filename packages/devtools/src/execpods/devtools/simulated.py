"""A sidecar's properties for the embedded simulator, and a namespace on it: for the demo, the
benchmarks and tests."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import orjson


def simulator_properties(api_url: str, app_id: str, **extra: str) -> dict[str, str]:
    """Properties for a sidecar on a simulator at `api_url`, listening on any free port.

    The start-up permission check is off: a simulator without RBAC grants every verb, and its
    probes would only add to the request counts tests assert on (tests/sidecar/test_rbac.py
    switches it on against a simulator that enforces a Role).
    """
    return {
        "spark.app.id": app_id,
        "execpods.kubernetes.apiUrl": api_url,
        "execpods.sidecar.listen": "127.0.0.1:0",
        "execpods.sidecar.checkPermissions": "false",
        "spark.kubernetes.container.image": "execpods/executor:demo",
        **extra,
    }


def create_namespace(api_url: str, name: str, *, timeout: float = 10.0) -> None:
    """Create namespace `name` on the API server at `api_url` (plain HTTP, no credentials, as a
    simulator serves), as `kubectl create namespace` would; one that exists already is fine.

    Namespaces exist only once created, on kubesim as on a cluster: a run in a namespace of its
    own creates it first.
    """
    split = urlsplit(api_url)
    host = split.hostname or "127.0.0.1"
    connection = http.client.HTTPConnection(host, split.port, timeout=timeout)
    try:
        body = orjson.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        connection.request(
            "POST", "/api/v1/namespaces", body=body, headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        text = response.read()
    finally:
        connection.close()
    if response.status not in (200, 201, 409):
        raise RuntimeError(f"creating namespace {name!r} failed: {response.status} {text[:300]!r}")
