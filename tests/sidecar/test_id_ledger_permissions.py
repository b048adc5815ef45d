"""The id ledger's permissions: deploy/rbac.yaml grants them, and the start-up check names them.

Without a driver pod the ledger is a ConfigMap, so the check probes get, create and patch on
configmaps as well; with one it is the driver pod's annotation (get and patch on pods, checked
already).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from execpods.k8s.ledger import ANNOTATION as LEDGER_ANNOTATION
from execpods.sidecar.config.settings import Settings
from execpods.sidecar.guard.permissions import CONFIG_MAP_VERBS, MissingPermissions
from execpods.sidecar.wiring import connect

from tests.sidecar.conftest import wait_for
from tests.sidecar.test_rbac import NAMESPACE, RBAC, properties, start_simulator


def role_without_on_configmaps(*verbs: str) -> list[dict[str, Any]]:
    manifests = copy.deepcopy(RBAC)
    (role,) = [d for d in manifests if d["kind"] == "Role"]
    for rule in role["rules"]:
        if "configmaps" in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v not in verbs]
    return manifests


def without_driver(kubeconfig: Path) -> dict[str, str]:
    props = properties(kubeconfig)
    del props["spark.kubernetes.driver.pod.name"]
    return props


def test_the_role_grants_what_the_ledger_needs_on_configmaps() -> None:
    (role,) = [d for d in RBAC if d["kind"] == "Role"]
    granted = {
        v for rule in role["rules"] if "configmaps" in rule["resources"] for v in rule["verbs"]
    }
    assert granted == set(CONFIG_MAP_VERBS)


@pytest.mark.parametrize("verb", CONFIG_MAP_VERBS)
def test_without_a_driver_a_missing_configmap_verb_stops_the_start(
    verb: str, tmp_path: Path
) -> None:
    sim, kubeconfig = start_simulator(role_without_on_configmaps(verb), tmp_path)
    try:
        with pytest.raises(MissingPermissions) as caught:
            connect(Settings.from_properties(without_driver(kubeconfig)))
        assert caught.value.missing == (f"{verb} configmaps",)
        assert f"refused {verb} on resource configmaps in namespace {NAMESPACE!r}" in str(
            caught.value
        )
        assert sim.objects("configmaps") == []  # the probes changed nothing
    finally:
        sim.close()


def test_with_a_driver_configmaps_are_not_needed(tmp_path: Path) -> None:
    """The mark goes to the driver pod's annotation: allocating with no verb on configmaps."""
    sim, kubeconfig = start_simulator(role_without_on_configmaps(*CONFIG_MAP_VERBS), tmp_path)
    props = properties(kubeconfig)
    driver = props["spark.kubernetes.driver.pod.name"]
    try:
        runtime = connect(Settings.from_properties(props))
        try:
            runtime.backend.start(initial_executors=1)

            def marked() -> bool:
                pod = sim.pod(driver, NAMESPACE)
                annotations = (pod or {}).get("metadata", {}).get("annotations") or {}
                return LEDGER_ANNOTATION in annotations

            wait_for(marked, what="the id ledger's mark on the driver pod")
        finally:
            runtime.backend.stop()
        assert not [r for r in sim.requests() if "configmaps" in r.path]
    finally:
        sim.close()


def test_without_a_driver_the_deployed_role_passes_the_check(tmp_path: Path) -> None:
    sim, kubeconfig = start_simulator(RBAC, tmp_path)
    try:
        runtime = connect(Settings.from_properties(without_driver(kubeconfig)))
        runtime.backend.stop()
        probes = [r for r in sim.requests() if "configmaps" in r.path]
        assert {r.verb for r in probes} == set(CONFIG_MAP_VERBS)
        # Authorized, and nothing changed: kubesim refuses the dry runs (400) after authorizing
        # them, where kube-apiserver answers what the write would (404, 422).
        assert {r.status for r in probes} <= {400, 404, 422}
        assert sim.objects("configmaps") == []
    finally:
        sim.close()
