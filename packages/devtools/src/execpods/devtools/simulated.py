"""A sidecar's properties for the embedded simulator: for the demo, the benchmarks and tests."""

from __future__ import annotations


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
