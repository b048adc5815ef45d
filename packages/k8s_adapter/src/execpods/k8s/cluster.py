"""Cluster access: an API client from an explicit URL, a kubeconfig, or the service account.

Order of preference: `execpods.kubernetes.apiUrl` (used as is, e.g. for a simulator), an explicit
or default kubeconfig file (with `spark.kubernetes.context`), then in-cluster configuration. The
connection pool is sized for a watch, a poll and concurrent pod operations at once: the client's
default (5 per CPU) would make a small container's operations queue behind its own watch.

Client-level retries are switched off: the watch loop owns retrying (with backoff and jitter), and
the reconcilers retry pod operations on their next round, so a hidden retry would only multiply
load on an API server that is already struggling.

The client is untyped; `KubernetesApiClient` names the part of its `ApiClient` execpods uses, so
no `Any` crosses this package's public API.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
from execpods.core import SettingsError
from execpods.k8s.clienttypes import KubernetesApiClient
from execpods.k8s.settings import KubernetesSettings

logger = logging.getLogger(__name__)

# The client's configuration helpers are untyped; keep their Any behind these names.
k8s_client: Any = kubernetes.client
k8s_config: Any = kubernetes.config
k8s_incluster: Any = kubernetes.config.incluster_config

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_POOL_MAXSIZE = 32


def _default_kubeconfig() -> Path | None:
    env = os.environ.get("KUBECONFIG")
    if env:
        first = env.split(os.pathsep)[0]
        if Path(first).is_file():
            return Path(first)
    home = Path.home() / ".kube" / "config"
    return home if home.is_file() else None


def in_cluster(
    *,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Whether this process runs in a pod with a service account mounted."""
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST")) and (service_account_dir / "token").is_file()


def _load_incluster(
    configuration: object, service_account_dir: Path, environ: Mapping[str, str]
) -> None:
    loader = k8s_incluster.InClusterConfigLoader(
        token_filename=str(service_account_dir / "token"),
        cert_filename=str(service_account_dir / "ca.crt"),
        environ=environ,
    )
    try:
        loader.load_and_set(configuration)
    except k8s_config.ConfigException as error:
        raise SettingsError(
            f"in-cluster configuration from {str(service_account_dir)!r} failed: {error}"
        ) from None


def connect(
    *,
    api_url: str | None = None,
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    environ: Mapping[str, str] | None = None,
) -> KubernetesApiClient:
    """An API client for the first access method that is configured.

    `service_account_dir` and `environ` (default: `os.environ`) are where in-cluster
    configuration is read from: `KUBERNETES_SERVICE_HOST`/`_PORT`, `token` and `ca.crt`.
    """
    env = os.environ if environ is None else environ
    configuration: Any = k8s_client.Configuration()
    if api_url is not None:
        configuration.host = api_url.rstrip("/")
        how = f"API URL {api_url}"
    else:
        path = Path(kubeconfig) if kubeconfig is not None else _default_kubeconfig()
        if path is not None:
            if not path.is_file():
                raise SettingsError(f"execpods.kubernetes.kubeconfig: no such file {str(path)!r}")
            try:
                k8s_config.load_kube_config(
                    config_file=str(path), context=context, client_configuration=configuration
                )
            except k8s_config.ConfigException as error:
                key = "spark.kubernetes.context" if context else "execpods.kubernetes.kubeconfig"
                raise SettingsError(f"{key}: kubeconfig {str(path)!r}: {error}") from None
            how = f"kubeconfig {path}" + (f" (context {context})" if context else "")
        elif in_cluster(service_account_dir=service_account_dir, environ=env):
            _load_incluster(configuration, service_account_dir, env)
            how = "in-cluster service account"
        else:
            raise SettingsError(
                "No Kubernetes access configured: set execpods.kubernetes.apiUrl or "
                "execpods.kubernetes.kubeconfig, or run in a pod with a service account."
            )
    configuration.connection_pool_maxsize = pool_maxsize
    configuration.retries = False
    logger.info("Connecting to Kubernetes through %s (%s).", how, configuration.host)
    client: KubernetesApiClient = k8s_client.ApiClient(configuration)
    return client


def api_client_from(
    settings: KubernetesSettings, *, pool_maxsize: int = DEFAULT_POOL_MAXSIZE
) -> KubernetesApiClient:
    """`connect` with the access settings of `settings`."""
    return connect(
        api_url=settings.api_url,
        kubeconfig=settings.kubeconfig,
        context=settings.context,
        pool_maxsize=pool_maxsize,
    )


def resolve_namespace(
    settings: KubernetesSettings, *, service_account_dir: Path = SERVICE_ACCOUNT_DIR
) -> str:
    """The configured namespace, else the service account's (in-cluster), else "default"."""
    if settings.namespace is not None:
        return settings.namespace
    namespace_file = service_account_dir / "namespace"
    if namespace_file.is_file():
        text = namespace_file.read_text(encoding="utf-8").strip()
        if text:
            return text
    return "default"
