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
    connect,
    in_cluster,
    resolve_namespace,
)
from execpods.k8s.cluster import DEFAULT_POOL_MAXSIZE
from execpods.kubesim import KubeSim

from tests.k8s.conftest import executor_pod, free_port


def test_kubeconfig_and_context(sim: KubeSim) -> None:
    sim.create_pod(executor_pod(1))
    settings = KubernetesSettings(kubeconfig=str(sim.kubeconfig_path), context="kubesim")
    client = api_client_from(settings)
    # Room for the watch, the poll and the operations at once, as connect() promises.
    assert client.configuration.connection_pool_maxsize == DEFAULT_POOL_MAXSIZE >= 16
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


def two_context_kubeconfig(path: Path, sim: KubeSim, dead_port: int) -> Path:
    """A kubeconfig whose current context is a dead server; context `sim` is the simulator."""
    path.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "current-context: dead\n"
        "clusters:\n"
        f"- name: dead\n  cluster: {{server: 'http://127.0.0.1:{dead_port}'}}\n"
        f"- name: sim\n  cluster: {{server: '{sim.url}'}}\n"
        "users:\n"
        "- name: someone\n  user: {token: abc}\n"
        "contexts:\n"
        "- name: dead\n  context: {cluster: dead, user: someone}\n"
        "- name: sim\n  context: {cluster: sim, user: someone, namespace: ignored}\n",
        encoding="utf-8",
    )
    return path


def test_a_non_default_context_is_used(sim: KubeSim, tmp_path: Path) -> None:
    sim.create_pod(executor_pod(1))
    config = two_context_kubeconfig(tmp_path / "config", sim, free_port())
    client = api_client_from(KubernetesSettings(kubeconfig=str(config), context="sim"))
    assert client.configuration.host == sim.url
    operations = KubernetesPodOperations(ApiGateway(client, namespace="default"))
    assert [p.name for p in operations.list(PodSelector())] == ["spark-app-1-exec-1"]
    client.close()
    current = api_client_from(KubernetesSettings(kubeconfig=str(config)))
    assert current.configuration.host != sim.url  # without a context: the current one
    current.close()


def test_an_unknown_context_is_a_settings_error(sim: KubeSim, tmp_path: Path) -> None:
    config = two_context_kubeconfig(tmp_path / "config", sim, free_port())
    with pytest.raises(SettingsError, match=r"spark\.kubernetes\.context.*nope"):
        api_client_from(KubernetesSettings(kubeconfig=str(config), context="nope"))


def service_account(directory: Path, *, token: str = "sa-token") -> Path:
    directory.mkdir()
    (directory / "token").write_text(token, encoding="utf-8")
    (directory / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n", encoding="utf-8")
    (directory / "namespace").write_text("spark-jobs\n", encoding="utf-8")
    return directory


@pytest.fixture
def no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No $KUBECONFIG and an empty home, so only the service account can configure access."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


@pytest.mark.usefixtures("no_kubeconfig")
def test_in_cluster_service_account(sim: KubeSim, tmp_path: Path) -> None:
    directory = service_account(tmp_path / "sa")
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(sim.port)}
    assert in_cluster(service_account_dir=directory, environ=environ)
    assert not in_cluster(service_account_dir=directory, environ={})
    client = connect(service_account_dir=directory, environ=environ)
    configuration = client.configuration
    assert configuration.host == f"https://127.0.0.1:{sim.port}"  # the service's host and port
    assert configuration.ssl_ca_cert == str(directory / "ca.crt")
    assert configuration.api_key["BearerToken"] == "bearer sa-token"
    assert configuration.connection_pool_maxsize == 32
    client.close()
    from_account = resolve_namespace(KubernetesSettings(), service_account_dir=directory)
    assert from_account == "spark-jobs"
    configured = resolve_namespace(KubernetesSettings(namespace="x"), service_account_dir=directory)
    assert configured == "x"


@pytest.mark.usefixtures("no_kubeconfig")
def test_a_broken_service_account_is_a_settings_error(tmp_path: Path) -> None:
    directory = service_account(tmp_path / "sa", token="")
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(SettingsError, match=r"in-cluster.*[Tt]oken"):
        connect(service_account_dir=directory, environ=environ)
    with pytest.raises(SettingsError, match="No Kubernetes access configured"):
        connect(service_account_dir=directory, environ={})
