"""Cluster access: an API client from an explicit URL, a kubeconfig, or the service account.

Order of preference: `execpods.kubernetes.apiUrl` (used as is, e.g. for a simulator), an explicit
or default kubeconfig (with `spark.kubernetes.context`; a list of files such as `KUBECONFIG=a:b`
is merged as kubectl merges it, `kubeconfig.py`), then in-cluster configuration. `ClusterAccess`
says which, and where the credential came from, for the messages that must name them. The
connection pool is sized for a watch, a poll and concurrent pod operations at once: the client's
default (5 per CPU) would make a small container's operations queue behind its own watch.

Client-level retries are switched off: the watch loop owns retrying (with backoff and jitter), and
the reconcilers retry pod operations on their next round, so a hidden retry would only multiply
load on an API server that is already struggling.

The client is untyped; `KubernetesApiClient` names the part of its `ApiClient` execpods uses, so
no `Any` crosses this package's public API.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
from execpods.core import SettingsError
from execpods.k8s.clienttypes import KubernetesApiClient
from execpods.k8s.kubeconfig import describe_user, kubeconfig_list, merge_kubeconfigs, user_of
from execpods.k8s.settings import KubernetesSettings

logger = logging.getLogger(__name__)

# The client's configuration helpers are untyped; keep their Any behind these names.
k8s_client: Any = kubernetes.client
k8s_config: Any = kubernetes.config
k8s_incluster: Any = kubernetes.config.incluster_config

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_POOL_MAXSIZE = 32


def _default_kubeconfigs(environ: Mapping[str, str]) -> list[Path]:
    """$KUBECONFIG's files (a list, merged as kubectl merges them), else ~/.kube/config."""
    listed = kubeconfig_list(environ.get("KUBECONFIG", ""))
    if listed:
        return [path for path in listed if path.is_file()]
    home = Path.home() / ".kube" / "config"
    return [home] if home.is_file() else []


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterAccess:
    """How the sidecar reaches the API server, for messages that must say what to check."""

    server: str
    """The API server's URL."""
    via: str
    """Where the URL came from: e.g. "--api-url (execpods.kubernetes.apiUrl)"."""
    credential: str
    """Where the credential came from: a token file, a kubeconfig user, the service account."""


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
    """An API client for the first access method that is configured (`connect_cluster`)."""
    client, _ = connect_cluster(
        api_url=api_url,
        kubeconfig=kubeconfig,
        context=context,
        pool_maxsize=pool_maxsize,
        service_account_dir=service_account_dir,
        environ=environ,
    )
    return client


TOKEN_FILE_PERIOD = 60.0
"""How often a token file is read again (client-go's `CachedFileTokenSource` period): projected
service account tokens rotate, and a renewed token must be picked up without a restart."""


def _read_token_file(
    configuration: Any, path: Path, *, clock: Callable[[], float] = time.monotonic
) -> None:
    """Send the content of `path` as the bearer token, trimmed, read again every minute.

    As client-go does for a kubeconfig's `tokenFile`. The official client reads the file once,
    keeps its final newline (which no HTTP header may carry: `echo token > file` writes one)
    and sets that value again before every request."""
    last_read = -math.inf

    def refresh(config: Any) -> None:
        nonlocal last_read
        now = clock()
        if now - last_read < TOKEN_FILE_PERIOD:
            return
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as error:
            logger.warning("Could not read the token file %s again (%s).", path, error)
            return
        last_read = now
        config.api_key["BearerToken"] = f"Bearer {token}"

    configuration.refresh_api_key_hook = refresh
    refresh(configuration)


def _from_kubeconfigs(
    paths: list[Path], context: str | None, configuration: object, *, explicit: bool
) -> ClusterAccess:
    merged = merge_kubeconfigs(paths)
    shown = merged.describe()
    try:
        k8s_config.load_kube_config_from_dict(
            config_dict=merged.config,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except k8s_config.ConfigException as error:
        key = "spark.kubernetes.context" if context else "execpods.kubernetes.kubeconfig"
        raise SettingsError(f"{key}: kubeconfig {shown!r}: {error}") from None
    user = user_of(merged, context)
    token_file = user.get("tokenFile")
    plugin = user.get("exec") or user.get("auth-provider")
    if isinstance(token_file, str) and token_file and not user.get("token") and not plugin:
        _read_token_file(configuration, Path(token_file))
    credential, _ = describe_user(merged, context)
    chosen = context or merged.config.get("current-context") or ""
    where = "--kubeconfig (execpods.kubernetes.kubeconfig)" if explicit else "$KUBECONFIG"
    return ClusterAccess(
        server="",
        via=f"the kubeconfig {shown} (context {chosen!r}; {where}, --context)",
        credential=credential,
    )


def connect_cluster(
    *,
    api_url: str | None = None,
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    environ: Mapping[str, str] | None = None,
) -> tuple[KubernetesApiClient, ClusterAccess]:
    """An API client for the first access method that is configured, and how it reaches the
    cluster (for the messages of a refused credential or a server that never answers).

    `kubeconfig` may list several files (`a:b`, as $KUBECONFIG): they are merged as kubectl
    merges them (`kubeconfig.py`). `service_account_dir` and `environ` (default: `os.environ`)
    are where in-cluster configuration and $KUBECONFIG are read from.
    """
    env = os.environ if environ is None else environ
    configuration: Any = k8s_client.Configuration()
    if api_url is not None:
        configuration.host = api_url.rstrip("/")
        access = ClusterAccess(
            server="",
            via="--api-url (execpods.kubernetes.apiUrl)",
            credential="no credential (--api-url sends none; use --kubeconfig for one)",
        )
        how = f"API URL {api_url}"
    else:
        explicit = kubeconfig is not None
        paths = kubeconfig_list(str(kubeconfig)) if explicit else _default_kubeconfigs(env)
        if explicit and not any(path.is_file() for path in paths):
            raise SettingsError(f"execpods.kubernetes.kubeconfig: no such file {str(kubeconfig)!r}")
        if paths:
            access = _from_kubeconfigs(paths, context, configuration, explicit=explicit)
            how = access.via
        elif in_cluster(service_account_dir=service_account_dir, environ=env):
            _load_incluster(configuration, service_account_dir, env)
            token = service_account_dir / "token"
            access = ClusterAccess(
                server="",
                via="the in-cluster service account (KUBERNETES_SERVICE_HOST/_PORT)",
                credential=f"the in-cluster service account's token file {token}",
            )
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
    return client, dataclasses.replace(access, server=str(configuration.host))


def api_client_from(
    settings: KubernetesSettings, *, pool_maxsize: int = DEFAULT_POOL_MAXSIZE
) -> KubernetesApiClient:
    """`connect` with the access settings of `settings`."""
    client, _ = cluster_from(settings, pool_maxsize=pool_maxsize)
    return client


def cluster_from(
    settings: KubernetesSettings, *, pool_maxsize: int = DEFAULT_POOL_MAXSIZE
) -> tuple[KubernetesApiClient, ClusterAccess]:
    """`connect_cluster` with the access settings of `settings`."""
    return connect_cluster(
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
