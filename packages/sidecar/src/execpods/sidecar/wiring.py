"""Assembling a sidecar's backend from settings: the adapter's parts into the core's root.

`assemble` takes the Kubernetes-facing parts as arguments and hands them, with the sidecar's
driver view, to `execpods.core.compose_backend`, so the same wiring runs over the adapter
(`connect`) and, in unit tests, over the core's in-memory pod registry.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from execpods.core import (
    ClaimOperations,
    Clock,
    ExecutorIdLedger,
    ExecutorPodBuilder,
    ExecutorPodsBackend,
    Machinery,
    PodOperations,
    PodSelector,
    Ports,
    ResizeOperations,
    ResourceProfile,
    ResourceProfiles,
    Scheduler,
    SettingsError,
    SnapshotSource,
    SnapshotsWriter,
    SourcesFactory,
    SystemClock,
    compose_backend,
    wait_for_driver_ready,
)
from execpods.k8s import (
    ApiBackoffGate,
    ApiGateway,
    ApiUnauthorized,
    ClusterIdLedger,
    ExecutorPodTemplateBuilder,
    KubernetesApiClient,
    KubernetesPodOperations,
    KubernetesResizer,
    KubernetesSettings,
    PodWarnings,
    PollSource,
    RateLimiter,
    WatchSource,
    builder_claims,
    cluster_from,
    rate_limiter_for,
    resolve_namespace,
)
from execpods.sidecar.config.settings import Settings
from execpods.sidecar.driver_view import InferredDriverView
from execpods.sidecar.guard.permissions import (
    CredentialsRefused,
    check_pod_permissions,
    cluster_probe,
)
from execpods.sidecar.guard.templatepolicy import TemplatePolicy
from execpods.sidecar.telemetry.contact import ApiContact, CredentialsWatch, refused_credential
from execpods.sidecar.telemetry.hub import (
    CountedPodOperations,
    CountedResizeOperations,
    Telemetry,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """A sidecar's allocation: the backend (the one facade) and the driver view beside it."""

    settings: Settings
    backend: ExecutorPodsBackend
    driver_view: InferredDriverView
    telemetry: Telemetry
    rate_limiter: RateLimiter | None = None
    """The API client's rate limit (None over the in-memory registry), for health and benches."""
    probe: Callable[[], None] | None = None
    """A cheap API call that tells whether the cluster answers (for health); None: no API."""
    before_start: Callable[[], None] | None = None
    """Runs before the backend starts: the wait for the driver pod's readiness, if any."""
    template_policy: TemplatePolicy = field(default_factory=TemplatePolicy)
    """What RequestTotal's pod templates may ask for (the namespace the API client resolved)."""
    contact: ApiContact | None = None
    """Whether the API server ever answered (None without an API): stopping need not retry
    deletes against a server that never did."""
    profile_check: Callable[[ResourceProfile], None] | None = None
    """Builds a declared profile's pod once and refuses what the Kubernetes client would
    (`ExecutorPodTemplateBuilder.check`); None over the in-memory registry."""

    @property
    def app_id(self) -> str:
        return self.settings.sidecar.app_id


def assemble(
    settings: Settings,
    *,
    pod_operations: PodOperations,
    pod_builder: ExecutorPodBuilder,
    sources: SourcesFactory,
    close_client: Callable[[], None] | None = None,
    clock: Clock | None = None,
    request_scheduler: Scheduler | None = None,
    profiles: ResourceProfiles | None = None,
    rate_limiter: RateLimiter | None = None,
    telemetry: Telemetry | None = None,
    id_ledger: ExecutorIdLedger | None = None,
    claims: ClaimOperations | None = None,
    resize: ResizeOperations | None = None,
) -> Runtime:
    """The backend over these ports (through the core's composition root), not yet started.

    The driver view is the backend's `DriverView`, and hears each lifecycle round before its
    decisions (a round observer); the backend numbers the removals streams resume from.
    `id_ledger` keeps the highest executor id ever reserved beyond the process (`connect` passes
    the cluster's, `execpods.k8s.ClusterIdLedger`); `resize` are the in-place resize calls (the
    adapter's `KubernetesResizer`), counted like the pod operations.
    """
    view = InferredDriverView(clock=clock)
    telemetry = telemetry if telemetry is not None else Telemetry()
    backend = compose_backend(
        app_id=settings.sidecar.app_id,
        settings=settings.core,
        ports=Ports(
            # Every pod call of the backend and its features is counted (the metrics).
            pod_operations=CountedPodOperations(pod_operations, telemetry),
            pod_builder=pod_builder,
            driver=view,
            sources=sources,
            id_ledger=id_ledger,
            claims=claims,
            resize=None if resize is None else CountedResizeOperations(resize, telemetry),
            profiles=profiles,
            close=close_client,
            api_rate_ceiling=settings.api_rate.peak_qps,
        ),
        features=settings.features,
        machinery=Machinery(
            clock=clock,
            request_scheduler=request_scheduler,
            concurrent_creates=True,
            on_round=telemetry.round_finished,
            round_observers=(view,),
            removal_window=settings.sidecar.stream_removal_window,
        ),
    )
    view.highest_id = backend.highest_executor_id  # what a driver says of other ids is not kept
    return Runtime(
        settings=settings,
        backend=backend,
        driver_view=view,
        telemetry=telemetry,
        rate_limiter=rate_limiter,
        template_policy=template_policy_of(settings, settings.kubernetes.namespace or "default"),
    )


def template_policy_of(settings: Settings, namespace: str) -> TemplatePolicy:
    """The policy of `execpods.sidecar.templatePolicy` with the namespace and service account the
    sidecar's settings fix."""
    return TemplatePolicy(
        level=settings.security.template_policy,
        namespace=namespace,
        service_account=settings.kubernetes.service_account,
    )


def connect(settings: Settings, *, clock: Clock | None = None) -> Runtime:
    """The runtime over the adapter: one API client, pod operations, builder, watch and poll.

    Settings that only the API can check (the driver pod exists, the template loads) fail here,
    before anything is served, as a `SettingsError` naming the property.
    """
    k8s = settings.kubernetes
    if k8s.image is None and k8s.pod_template_file is None:
        # As Spark: guessing an image would start executors that do not match the driver.
        raise SettingsError(
            "spark.kubernetes.executor.container.image is not set (nor "
            "spark.kubernetes.container.image): executor pods need an image, or a pod template "
            "(spark.kubernetes.executor.podTemplateFile) that names one"
        )
    api_client, access = cluster_from(k8s)
    # One flow per driver to the API server's fair queuing when no credentials tell them apart.
    api_client.user_agent = f"execpods-sidecar/{settings.sidecar.app_id}"
    telemetry = Telemetry()
    contact = ApiContact(access)  # hears the first calls (the permission check's) too
    telemetry.add(contact)
    try:
        namespace = resolve_namespace(k8s)
        limiter = rate_limiter_for(settings.api_rate)
        gateway = ApiGateway(
            api_client,
            namespace=namespace,
            request_timeout=k8s.request_timeout,
            rate_limiter=limiter,
            backoff=ApiBackoffGate(initial=k8s.backoff_initial, maximum=k8s.backoff_max),
            telemetry=telemetry.api_call,
            throttle_retries=THROTTLE_RETRIES,
            create_pool=settings.core.batch_concurrency,
        )
        selector = PodSelector.executors_of(
            settings.core.labels, settings.sidecar.app_id
        ).label_selector()
        if settings.security.check_permissions:
            check_pod_permissions(
                gateway,
                selector=selector,
                config_maps=k8s.driver_pod_name is None,
                access=access,
            )
        operations = KubernetesPodOperations(
            gateway,
            executor_id_label=settings.core.labels.executor_id,
            page_size=k8s.list_page_size,
        )
        profiles = ResourceProfiles()
        builder = ExecutorPodTemplateBuilder.create(
            k8s,
            operations,
            labels=settings.core.labels,
            profiles=profiles,
            container_name=settings.core.executor_container_name,
        )
        builder.check(None, app_id=settings.sidecar.app_id)  # the settings' own pod, once
        id_ledger = ClusterIdLedger(
            gateway,
            app_id=settings.sidecar.app_id,
            labels=settings.core.labels,
            driver_pod_name=k8s.driver_pod_name,
            owner=builder.owner,
        )
    except ApiUnauthorized as error:  # a start-up call other than the permission check's
        api_client.close()
        raise CredentialsRefused(refused_credential(access, str(error))) from None
    except BaseException:
        api_client.close()
        raise

    warnings = PodWarnings()  # FailedMount, read by each poll, attached by both sources

    def sources(store: SnapshotsWriter) -> list[SnapshotSource]:
        # Each source decides for itself whether it runs (enableApiWatcher / enableApiPolling),
        # as in Spark: one place per switch, in the adapter's WatchSource and PollSource.
        core = settings.core
        watch = WatchSource(
            store, operations, settings=k8s, core_settings=core, clock=clock, warnings=warnings
        )
        # A full list older than what the watch saw: the server went back in time; re-list.
        poll = PollSource(
            store,
            operations,
            core_settings=core,
            newest_version=lambda: watch.resource_version,
            on_went_back=watch.relist,
            warnings=warnings,
        )
        return [watch, poll]

    claims = builder_claims(  # the executors' OnDemand claims (none unless configured)
        gateway, builder, read_write_once=settings.features.claims.legacy_read_write_once
    )
    runtime = assemble(
        settings,
        claims=claims,
        pod_operations=operations,
        pod_builder=builder,
        sources=sources,
        close_client=_closing(gateway, api_client),
        clock=clock,
        profiles=profiles,
        rate_limiter=limiter,
        telemetry=telemetry,
        id_ledger=id_ledger,
        # Spark's ExecutorResizeDriverPlugin cannot run through the plugin (it wants Spark's own
        # allocator): the backend's resize feature does its job when enabled, over these calls.
        resize=KubernetesResizer(
            gateway,
            container_name=settings.core.executor_container_name,
            labels=settings.core.labels,
        ),
    )
    # A 401 from any call: NOT_SERVING and a notice on every stream until the API accepts it.
    telemetry.add(CredentialsWatch(runtime.backend.progress, access))
    return dataclasses.replace(
        runtime,
        contact=contact,
        probe=cluster_probe(gateway, selector=selector),
        before_start=driver_readiness_wait(k8s, operations, clock=clock),
        template_policy=template_policy_of(settings, namespace),
        profile_check=lambda profile: builder.check(profile, app_id=settings.sidecar.app_id),
    )


THROTTLE_RETRIES = 10
"""How often a call refused with 429 and a Retry-After is sent again (client-go's maxRetries)."""


def _closing(gateway: ApiGateway, api_client: KubernetesApiClient) -> Callable[[], None]:
    def close() -> None:
        gateway.close()
        api_client.close()

    return close


DRIVER_CONTAINER = "spark-kubernetes-driver"
"""Spark's driver container: its readiness is the driver's when the sidecar shares the pod."""


def driver_readiness_wait(
    k8s: KubernetesSettings,
    operations: KubernetesPodOperations,
    *,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Callable[[], None] | None:
    """Spark's wait for the driver pod to be Ready before the first executors
    (`spark.kubernetes.allocation.driver.readinessTimeout`); None without a driver pod."""
    name = k8s.driver_pod_name
    if name is None or k8s.driver_publishes_not_ready:  # Spark's shouldWaitForDriverReadiness
        return None
    driver_pod = name

    def wait() -> None:
        wait_for_driver_ready(
            lambda: operations.is_ready(driver_pod, container=DRIVER_CONTAINER),
            timeout=k8s.driver_readiness_timeout,
            clock=clock if clock is not None else SystemClock(),
            sleep=sleep,
            driver=f"driver pod {driver_pod}",
        )

    return wait
