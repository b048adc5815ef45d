"""execpods.k8s: the core's sources and pod operations over the official `kubernetes` client.

The sidecar imports only from here. `connect`/`api_client_from` build the client; an `ApiGateway`
binds it to a namespace (timeouts, raw JSON, typed errors); `KubernetesPodOperations` and
`ExecutorPodTemplateBuilder` implement the core's `PodOperations` and `ExecutorPodBuilder`;
`WatchSource` and `PollSource` implement `SnapshotSource` and feed a store's write side
(`SnapshotsWriter`).
"""

from execpods.k8s.backoff import ApiBackoffGate, ApiHeldBack, Backoff, EventWaiter, Waiter
from execpods.k8s.builder import (
    ExecutorPodTemplateBuilder,
    app_id_prefix_problem,
    builder_claims,
    executor_pod_name,
    load_template,
    parse_pod_template,
    sanitize_prefix,
)
from execpods.k8s.claims import KubernetesClaims
from execpods.k8s.clienttypes import ClientConfiguration, KubernetesApiClient
from execpods.k8s.cluster import (
    ClusterAccess,
    api_client_from,
    cluster_from,
    connect,
    connect_cluster,
    in_cluster,
    resolve_namespace,
)
from execpods.k8s.congestion import AdaptiveRateLimiter, rate_limiter_for
from execpods.k8s.convert import (
    MalformedPod,
    PodPage,
    pod_from_dict,
    pod_from_dict_strict,
    pod_page,
    pods_from_list,
    pods_from_list_json,
)
from execpods.k8s.errors import (
    ApiUnauthorized,
    DriverPodNotFound,
    ResourceExpired,
    error_from_status,
    map_api_exception,
    map_error,
)
from execpods.k8s.gateway import ApiGateway
from execpods.k8s.ledger import ClusterIdLedger
from execpods.k8s.operations import KubernetesPodOperations
from execpods.k8s.poll import PollSource
from execpods.k8s.ratecontrol import CongestionConfig, RateController, Signal
from execpods.k8s.ratelimit import RateLimiter, TokenBucket
from execpods.k8s.ratesettings import ApiRateSettings
from execpods.k8s.resize import KubernetesResizer
from execpods.k8s.settings import KubernetesSettings, is_known_key, parse_memory_mib
from execpods.k8s.telemetry import ApiCall, ApiCallListener
from execpods.k8s.warnings import PodWarnings
from execpods.k8s.watch import WatchSource, WatchStats

__all__ = [
    "AdaptiveRateLimiter",
    "ApiCall",
    "ApiRateSettings",
    "CongestionConfig",
    "RateController",
    "Signal",
    "RateLimiter",
    "TokenBucket",
    "rate_limiter_for",
    "ApiGateway",
    "ApiCallListener",
    "ApiBackoffGate",
    "ApiHeldBack",
    "ApiUnauthorized",
    "ClusterAccess",
    "Backoff",
    "ClientConfiguration",
    "ClusterIdLedger",
    "DriverPodNotFound",
    "EventWaiter",
    "ExecutorPodTemplateBuilder",
    "KubernetesApiClient",
    "KubernetesClaims",
    "KubernetesPodOperations",
    "KubernetesResizer",
    "KubernetesSettings",
    "MalformedPod",
    "PodPage",
    "PodWarnings",
    "PollSource",
    "ResourceExpired",
    "Waiter",
    "WatchSource",
    "WatchStats",
    "api_client_from",
    "builder_claims",
    "cluster_from",
    "connect",
    "connect_cluster",
    "error_from_status",
    "app_id_prefix_problem",
    "executor_pod_name",
    "in_cluster",
    "is_known_key",
    "load_template",
    "parse_pod_template",
    "map_api_exception",
    "map_error",
    "parse_memory_mib",
    "pod_from_dict",
    "pod_from_dict_strict",
    "pod_page",
    "pods_from_list",
    "pods_from_list_json",
    "resolve_namespace",
    "sanitize_prefix",
]
