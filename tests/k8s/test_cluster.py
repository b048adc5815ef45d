"""Cluster access: explicit URL, kubeconfig with context, and the namespace default."""

from __future__ import annotations

from pathlib import Path

import pytest
from execpods.core import PodSelector, SettingsError
from execpods.k8s import (
    ApiGateway,
    KubernetesPodOperations,
    KubernetesSettings,
    api_client_from,
    resolve_namespace,
)
from execpods.kubesim import KubeSim

from tests.k8s.conftest import executor_pod


def test_kubeconfig_and_context(sim: KubeSim) -> None:
    sim.create_pod(executor_pod(1))
    settings = KubernetesSettings(kubeconfig=str(sim.kubeconfig_path), context="kubesim")
    client = api_client_from(settings)
    assert client.configuration.connection_pool_maxsize >= 16
    operations = KubernetesPodOperations(ApiGateway(client, namespace=resolve_namespace(settings)))
    assert [p.name for p in operations.list(PodSelector())] == ["spark-app-1-exec-1"]
    client.close()


def test_explicit_url_wins(sim: KubeSim) -> None:
    client = api_client_from(KubernetesSettings(api_url=sim.url, kubeconfig="/nonexistent"))
    assert client.configuration.host == sim.url
    client.close()


def test_a_missing_kubeconfig_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="kubeconfig"):
        api_client_from(KubernetesSettings(kubeconfig=str(tmp_path / "missing")))


def test_namespace_defaults() -> None:
    assert resolve_namespace(KubernetesSettings(namespace="spark")) == "spark"
    assert resolve_namespace(KubernetesSettings()) == "default"  # not in a cluster here
