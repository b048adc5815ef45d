"""Assembling a running backend from settings: the core's parts around the adapter's.

`assemble` takes the Kubernetes-facing parts as arguments, so the same wiring runs over the
adapter (`connect`) and, in unit tests, over the core's in-memory pod registry.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

from execpods.core import (
    Clock,
    ExecutorPodBuilder,
    ExecutorPodsAllocator,
    ExecutorPodsBackend,
    PodOperations,
    PodSelector,
    Scheduler,
    SettingsError,
    SnapshotSource,
    SnapshotsStore,
    SnapshotsStoreImpl,
    SystemClock,
    ThreadScheduler,
)
from execpods.k8s import (
    ApiGateway,
    ExecutorPodTemplateBuilder,
    KubernetesPodOperations,
    PollSource,
    WatchSource,
    api_client_from,
    resolve_namespace,
)
from execpods.sidecar.driver_view import InferredDriverView, ObservingLifecycleManager
from execpods.sidecar.observe import ObservedPodOperations, Observers, TimedRounds
from execpods.sidecar.permissions import check_pod_permissions, cluster_probe
from execpods.sidecar.settings import Settings

logger = logging.getLogger(__name__)

SourcesFactory = Callable[[SnapshotsStore], tuple[SnapshotSource | None, SnapshotSource | None]]
"""Makes the (watch, poll) sources that feed a store; either may be None (switched off)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """Everything a running sidecar is made of, for the server and for tests to inspect."""

    settings: Settings
    store: SnapshotsStore
    allocator: ExecutorPodsAllocator
    lifecycle: ObservingLifecycleManager
    driver_view: InferredDriverView
    backend: ExecutorPodsBackend
    observers: Observers
    probe: Callable[[], None] | None = None
    """A cheap API call that tells whether the cluster answers (for health); None: no API."""

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
    store_scheduler: Scheduler | None = None,
    request_scheduler: Scheduler | None = None,
    observers: Observers | None = None,
) -> Runtime:
    """The store, reconcilers, driver view and backend, not yet started."""
    core = settings.core
    observers = observers if observers is not None else Observers()
    pod_operations = ObservedPodOperations(pod_operations, observers)
    clock = clock if clock is not None else SystemClock()
    store = SnapshotsStoreImpl(
        store_scheduler
        if store_scheduler is not None
        else ThreadScheduler(workers=2, name="execpods-subscribers"),
        clock=clock,
        labels=core.labels,
    )
    allocator = ExecutorPodsAllocator(
        settings=core,
        pod_builder=pod_builder,
        pod_operations=pod_operations,
        store=TimedRounds(store, "allocator", observers),
        clock=clock,
    )
    view = InferredDriverView()
    lifecycle = ObservingLifecycleManager(
        view=view,
        settings=core,
        pod_operations=pod_operations,
        store=TimedRounds(store, "lifecycle", observers),
        clock=clock,
    )
    watch, poll = sources(store)
    backend = ExecutorPodsBackend(
        app_id=settings.sidecar.app_id,
        settings=core,
        store=store,
        allocator=allocator,
        lifecycle=lifecycle,
        pod_operations=pod_operations,
        driver=view,
        request_scheduler=(
            request_scheduler
            if request_scheduler is not None
            else ThreadScheduler(workers=1, name="execpods-requests")
        ),
        watch_source=watch if core.enable_api_watcher else None,
        poll_source=poll if core.enable_api_polling else None,
        close_client=close_client,
    )
    return Runtime(
        settings=settings,
        store=store,
        allocator=allocator,
        lifecycle=lifecycle,
        driver_view=view,
        backend=backend,
        observers=observers,
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
    api_client = api_client_from(k8s)
    observers = Observers()
    try:
        namespace = resolve_namespace(k8s)
        gateway = ApiGateway(
            api_client,
            namespace=namespace,
            request_timeout=k8s.request_timeout,
            observer=observers.api_call,
        )
        selector = PodSelector.executors_of(
            settings.core.labels, settings.sidecar.app_id
        ).label_selector()
        if settings.security.check_permissions:
            check_pod_permissions(gateway, selector=selector)
        operations = KubernetesPodOperations(gateway)
        builder = ExecutorPodTemplateBuilder.create(k8s, operations, labels=settings.core.labels)
    except BaseException:
        api_client.close()
        raise

    def sources(store: SnapshotsStore) -> tuple[SnapshotSource | None, SnapshotSource | None]:
        watch = WatchSource(
            store, operations, settings=k8s, core_settings=settings.core, clock=clock
        )
        poll = PollSource(store, operations, settings=k8s, core_settings=settings.core)
        return watch, poll

    runtime = assemble(
        settings,
        pod_operations=operations,
        pod_builder=builder,
        sources=sources,
        close_client=api_client.close,
        clock=clock,
        observers=observers,
    )
    return dataclasses.replace(runtime, probe=cluster_probe(gateway, selector=selector))
