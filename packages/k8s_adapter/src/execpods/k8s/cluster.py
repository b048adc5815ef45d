"""Cluster access: an `ApiClient` from an explicit URL, a kubeconfig, or the service account.

Order of preference: `execpods.kubernetes.apiUrl` (used as is, e.g. for a simulator), an explicit
or default kubeconfig file (with `spark.kubernetes.context`), then in-cluster configuration. The
connection pool is sized for a watch, a poll and concurrent pod operations at once: the client's
default (5 per CPU) would make a small container's operations queue behind its own watch.

Client-level retries are switched off: the watch loop owns retrying (with backoff and jitter), and
the reconcilers retry pod operations on their next round, so a hidden retry would only multiply
load on an API server that is already struggling.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
from execpods.core import SettingsError
from execpods.k8s.settings import KubernetesSettings

logger = logging.getLogger(__name__)

# The client's configuration helpers are untyped; keep their Any behind these two names.
k8s_client: Any = kubernetes.client
k8s_config: Any = kubernetes.config

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


def in_cluster() -> bool:
    """Whether this process runs in a pod with a service account mounted."""
    return (
        bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        and (SERVICE_ACCOUNT_DIR / "token").is_file()
    )


def connect(
    *,
    api_url: str | None = None,
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
) -> Any:
    """A `kubernetes.client.ApiClient` for the first access method that is configured."""
    configuration: Any = k8s_client.Configuration()
    if api_url is not None:
        configuration.host = api_url.rstrip("/")
        how = f"API URL {api_url}"
    else:
        path = Path(kubeconfig) if kubeconfig is not None else _default_kubeconfig()
        if path is not None:
            if not path.is_file():
                raise SettingsError(f"execpods.kubernetes.kubeconfig: no such file {str(path)!r}")
            k8s_config.load_kube_config(
                config_file=str(path), context=context, client_configuration=configuration
            )
            how = f"kubeconfig {path}" + (f" (context {context})" if context else "")
        elif in_cluster():
            k8s_config.load_incluster_config(client_configuration=configuration)
            how = "in-cluster service account"
        else:
            raise SettingsError(
                "No Kubernetes access configured: set execpods.kubernetes.apiUrl or "
                "execpods.kubernetes.kubeconfig, or run in a pod with a service account."
            )
    configuration.connection_pool_maxsize = pool_maxsize
    configuration.retries = False
    logger.info("Connecting to Kubernetes through %s (%s).", how, configuration.host)
    return k8s_client.ApiClient(configuration)


def api_client_from(
    settings: KubernetesSettings, *, pool_maxsize: int = DEFAULT_POOL_MAXSIZE
) -> Any:
    """`connect` with the access settings of `settings`."""
    return connect(
        api_url=settings.api_url,
        kubeconfig=settings.kubeconfig,
        context=settings.context,
        pool_maxsize=pool_maxsize,
    )


def resolve_namespace(settings: KubernetesSettings) -> str:
    """The configured namespace, else the service account's (in-cluster), else "default"."""
    if settings.namespace is not None:
        return settings.namespace
    namespace_file = SERVICE_ACCOUNT_DIR / "namespace"
    if namespace_file.is_file():
        text = namespace_file.read_text(encoding="utf-8").strip()
        if text:
            return text
    return "default"
