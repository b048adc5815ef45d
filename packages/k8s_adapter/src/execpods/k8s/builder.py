"""The executor pod manifest: a template file plus image, resources, environment and labels.

Mirrors Spark's basic executor feature step: the pod is named `<prefix>-exec-<id>` (prefix defaults
to the app id, made DNS-1123 valid), labelled as the app's executor, given the image, CPU and memory
(heap + overhead) and the environment the executor needs, and owned by the driver pod when one is
configured, so Kubernetes garbage-collects the executors when the driver goes away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from execpods.core import (
    DEFAULT_RESOURCE_PROFILE_ID,
    EXECUTOR_CONTAINER_NAME,
    SPARK_LABELS,
    ExecutorLabels,
    PodDecisions,
    PodManifest,
    PodNotFound,
    ResourceProfile,
    ResourceProfiles,
    SettingsError,
)
from execpods.k8s.claims import ACCESS_MODE as CLAIM_ACCESS_MODE
from execpods.k8s.claims import (
    CLAIMS_ANNOTATION,
    KubernetesClaims,
    OnDemandVolume,
    name_claims,
    rename_claims,
    take_claim_templates,
)
from execpods.k8s.errors import DriverPodNotFound
from execpods.k8s.gateway import ApiGateway, pod_problem
from execpods.k8s.mounts import on_demand_volumes, with_mounts
from execpods.k8s.operations import KubernetesPodOperations
from execpods.k8s.podshape import (
    PER_EXECUTOR_ENV,
    app_id_prefix_problem,
    avoid_nodes,
    ensure_section,
    escalation_problem,
    executor_hostname,
    executor_pod_name,
    fresh_copy,
    merge_env,
    owner_reference,
    sanitize_prefix,
    substituted,
)
from execpods.k8s.podtemplate import check_template, load_template, parse_pod_template
from execpods.k8s.settings import (
    MEMORY_OVERHEAD_FACTOR,
    MEMORY_OVERHEAD_MIN_MIB,
    KubernetesSettings,
)

__all__ = [
    "ExecutorPodTemplateBuilder",
    "app_id_prefix_problem",
    "builder_claims",
    "executor_pod_name",
    "load_template",
    "parse_pod_template",
    "sanitize_prefix",
]

CHECK_EXECUTOR_ID = 2**31 - 1
"""The executor id of the pod a declared profile is built into once, to check it."""

NO_DECISIONS = PodDecisions()


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorPodTemplateBuilder:
    """The core's `ExecutorPodBuilder`: deterministic manifests from settings and a template."""

    settings: KubernetesSettings
    namespace: str
    labels: ExecutorLabels = SPARK_LABELS
    template: PodManifest = field(default_factory=dict)
    owner: Mapping[str, object] | None = None
    extra_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    container_name: str = EXECUTOR_CONTAINER_NAME
    """`spark.kubernetes.executor.podTemplateContainerName`: the template's container of that
    name is the executor's (else the first one, which gets the name); its exit code is the
    executor's."""
    profiles: ResourceProfiles | None = None
    """Declared resource profiles: a pod of profile N is shaped by profile N (`_shape`)."""
    claim_templates: dict[int, list[PodManifest]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """The claims a Spark-built profile template carries (`claims.take_claim_templates`)."""
    on_demand: dict[str, OnDemandVolume] = field(default_factory=dict, compare=False, repr=False)
    """The OnDemand claim volumes of the settings, by volume name."""

    def __post_init__(self) -> None:
        check_template(self.template)
        reserved = {self.labels.app_id, self.labels.role, self.labels.executor_id}
        reserved.add(self.labels.resource_profile_id)
        clashes = sorted(reserved & set(self.settings.executor_labels))
        if clashes:
            raise SettingsError(
                f"spark.kubernetes.executor.label.{clashes[0]} is invalid: execpods selects its "
                f"executor pods by that label (as Spark, custom labels cannot set {clashes})"
            )
        settings = self.settings
        mounted = with_mounts(
            self.template,
            secrets=settings.secrets,
            secret_key_refs=settings.secret_key_refs,
            volumes=settings.volumes,
        )
        object.__setattr__(self, "template", mounted)  # once: the same for every executor
        self.on_demand.update({v.volume_name: v for v in on_demand_volumes(settings.volumes)})
        if self.settings.image is None and self._template_image() is None:
            raise SettingsError(
                "spark.kubernetes.executor.container.image (or spark.kubernetes.container.image) "
                "is required: the pod template names no image"
            )

    @classmethod
    def create(
        cls,
        settings: KubernetesSettings,
        operations: KubernetesPodOperations,
        *,
        labels: ExecutorLabels = SPARK_LABELS,
        extra_env: Mapping[str, str] | None = None,
        container_name: str = EXECUTOR_CONTAINER_NAME,
        profiles: ResourceProfiles | None = None,
    ) -> ExecutorPodTemplateBuilder:
        """A builder with the template loaded and the driver pod (if configured) looked up."""
        template = load_template(settings.pod_template_file) if settings.pod_template_file else {}
        owner = None
        if settings.driver_pod_name is not None:
            try:
                driver = operations.get(settings.driver_pod_name)
            except PodNotFound:
                raise DriverPodNotFound(settings.driver_pod_name, operations.namespace) from None
            owner = owner_reference(driver)
        return cls(
            settings=settings,
            namespace=operations.namespace,
            labels=labels,
            template=template,
            owner=owner,
            extra_env=MappingProxyType(dict(extra_env or {})),
            container_name=container_name,
            profiles=profiles,
        )

    def _template_image(self) -> str | None:
        """The first container's image (`check_template` made containers a list of mappings)."""
        containers = (self.template.get("spec") or {}).get("containers") or []
        image = containers[0].get("image") if containers else None
        return image if isinstance(image, str) else None

    def pod_name(self, *, executor_id: int, app_id: str) -> str:
        """`<prefix>-exec-<id>`: as Spark, a configured prefix (a subdomain of at most 237
        characters) is used whole; the default, from the app id, is cut to keep a label."""
        if self.settings.pod_name_prefix:
            return f"{self.settings.pod_name_prefix}-exec-{executor_id}"
        return executor_pod_name(sanitize_prefix(app_id), executor_id)

    def _set_scheduling(self, spec: dict[str, Any]) -> None:
        """Node selector, scheduler, service account and pull secrets, as Spark's executor
        feature steps set them (a template's own service account is kept)."""
        settings = self.settings
        if settings.node_selectors:
            ensure_section(spec, "nodeSelector").update(settings.node_selectors)
        if settings.executor_scheduler is not None:
            spec["schedulerName"] = settings.executor_scheduler
        has_account = spec.get("serviceAccountName") or spec.get("serviceAccount")
        if settings.service_account is not None and not has_account:
            spec["serviceAccountName"] = settings.service_account
        if settings.image_pull_secrets:
            secrets = spec.get("imagePullSecrets")
            kept = [s for s in secrets if isinstance(s, dict)] if isinstance(secrets, list) else []
            names = {s.get("name") for s in kept}
            spec["imagePullSecrets"] = kept + [
                {"name": name} for name in settings.image_pull_secrets if name not in names
            ]

    def carries_claims(self, resource_profile_id: int) -> bool:
        """Whether the profile's template carries claims of its own (a Spark-built one)."""
        if self.claim_templates.get(resource_profile_id):
            return True
        profile = self.profiles.get(resource_profile_id) if self.profiles is not None else None
        annotations = (self._template_of(profile).get("metadata") or {}).get("annotations")
        return isinstance(annotations, dict) and CLAIMS_ANNOTATION in annotations

    def build(
        self,
        *,
        executor_id: int,
        app_id: str,
        resource_profile_id: int = DEFAULT_RESOURCE_PROFILE_ID,
        decisions: PodDecisions = NO_DECISIONS,
    ) -> PodManifest:
        """The executor's pod, with what the core decided written: its announced cores, the
        nodes it avoids, the claims it reuses."""
        profile = self.profiles.get(resource_profile_id) if self.profiles is not None else None
        pod: dict[str, Any] = fresh_copy(self._template_of(profile))
        claims = take_claim_templates(pod, what=f"resource profile {resource_profile_id}")
        if claims:  # a Spark-built template's claims, for `claims.KubernetesClaims`
            self.claim_templates[resource_profile_id] = claims
        return self._shape(
            pod,
            executor_id=executor_id,
            app_id=app_id,
            resource_profile_id=resource_profile_id,
            profile=profile,
            decisions=decisions,
        )

    def check(self, profile: ResourceProfile | None, *, app_id: str) -> None:
        """Build `profile`'s pod once (the settings' own when None), as a create would, and
        raise `SettingsError` when the client's model refuses it: a template that parses and
        passes the policy but that no create could send is refused where it is declared, not
        at every create (where each failure would spend an id and count toward
        spark.executor.maxNumFailures)."""
        profile_id = DEFAULT_RESOURCE_PROFILE_ID if profile is None else profile.id
        pod: dict[str, Any] = fresh_copy(self._template_of(profile))
        what = f"resource profile {profile_id}"
        take_claim_templates(pod, what=what)
        trial = self._shape(
            pod,
            executor_id=CHECK_EXECUTOR_ID,
            app_id=app_id,
            resource_profile_id=profile_id,
            profile=profile,
            decisions=NO_DECISIONS,
        )
        problem = pod_problem(trial) or escalation_problem(trial)
        if problem is not None:
            raise SettingsError(
                f"{what}: the executor pod built from it would be refused by the Kubernetes "
                f"client: {problem}"
            )

    def _shape(
        self,
        pod: dict[str, Any],
        *,
        executor_id: int,
        app_id: str,
        resource_profile_id: int,
        profile: ResourceProfile | None,
        decisions: PodDecisions,
    ) -> PodManifest:
        """Everything `build` writes into the copy of the template."""
        pod["apiVersion"] = "v1"
        pod["kind"] = "Pod"
        name = self.pod_name(executor_id=executor_id, app_id=app_id)
        metadata = ensure_section(pod, "metadata")
        metadata["name"] = name
        metadata["namespace"] = self.namespace
        metadata.pop("resourceVersion", None)
        metadata.pop("uid", None)
        ids = {"{{APP_ID}}": app_id, "{{EXECUTOR_ID}}": str(executor_id)}
        labels = ensure_section(metadata, "labels")
        labels.update(substituted(self.settings.executor_labels, ids))
        labels.update(self.labels.for_executor(app_id, executor_id))
        if self.settings.executor_annotations:
            annotations = ensure_section(metadata, "annotations")
            annotations.update(substituted(self.settings.executor_annotations, ids))
        labels[self.labels.resource_profile_id] = str(resource_profile_id)
        if self.owner is not None:
            metadata["ownerReferences"] = [dict(self.owner)]
        spec = ensure_section(pod, "spec")
        spec["restartPolicy"] = "Never"
        if "hostname" in spec:  # a template built by Spark names the executor's host after it
            spec["hostname"] = executor_hostname(name)
        name_claims(pod, pod_name=name, executor_id=executor_id, on_demand=self.on_demand)
        rename_claims(pod, decisions.claims)
        self._set_scheduling(spec)
        avoid_nodes(spec, decisions.avoid_nodes)
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            containers = [{"name": self.container_name}]
            spec["containers"] = containers
        named = [c for c in containers if c.get("name") == self.container_name]
        container = named[0] if named else containers[0]
        container.setdefault("name", self.container_name)
        container["imagePullPolicy"] = self.settings.image_pull_policy
        if self.settings.image is not None:
            container["image"] = self.settings.image
        built_by_spark = profile is not None and profile.pod_template is not None
        env = self._env(executor_id, app_id, name, profile)
        forced = set(PER_EXECUTOR_ENV)
        if decisions.cores is not None:  # OOM recovery mode: one task at a time
            env["SPARK_EXECUTOR_CORES"] = str(decisions.cores)
            forced.add("SPARK_EXECUTOR_CORES")  # over Spark's own pod's too
        container["env"] = merge_env(
            container.get("env"), env, keep_template=built_by_spark, forced=frozenset(forced)
        )
        self._set_resources(
            ensure_section(container, "resources"), profile, keep_template=built_by_spark
        )
        self._set_termination(spec, container, keep_template=built_by_spark)
        return pod

    def _set_termination(
        self, spec: dict[str, Any], container: dict[str, Any], *, keep_template: bool
    ) -> None:
        """terminationGracePeriodSeconds, the decommission preStop hook and
        allowPrivilegeEscalation, as Spark's BasicExecutorFeatureStep sets them. A pod Spark's
        own builder made (a profile's template, from the plugin) already has Spark's values for
        them, from the driver's configuration: those are kept, except that the sidecar's
        `allowPrivilegeEscalation=false` always wins: the sidecar's settings are the operator's
        word, and a caller's template may only tighten them (issue 32)."""
        settings = self.settings
        values: list[tuple[dict[str, Any], str, object]] = [
            (spec, "terminationGracePeriodSeconds", settings.termination_grace_period_seconds),
            (
                ensure_section(container, "securityContext"),
                "allowPrivilegeEscalation",
                settings.executor_privilege_escalation,
            ),
        ]
        if settings.decommission_enabled:
            values.append(
                (
                    ensure_section(container, "lifecycle"),
                    "preStop",
                    {"exec": {"command": [settings.decommission_script]}},
                )
            )
        for section, key, value in values:
            if keep_template and not (key == "allowPrivilegeEscalation" and value is False):
                section.setdefault(key, value)
            else:
                section[key] = value

    def _template_of(self, profile: ResourceProfile | None) -> PodManifest:
        """The profile's own template when it has one (parsed where the profile was made), else
        the settings'."""
        if profile is None or profile.pod_template is None:
            return self.template
        return profile.pod_template

    def _cores(self, profile: ResourceProfile | None) -> int:
        if profile is not None and profile.cores is not None:
            return profile.cores
        return self.settings.executor_cores

    def _memory_mib(self, profile: ResourceProfile | None) -> int:
        if profile is not None and profile.memory_mib is not None:
            return profile.memory_mib
        return self.settings.executor_memory_mib

    def _env(
        self, executor_id: int, app_id: str, pod_name: str, profile: ResourceProfile | None
    ) -> dict[str, str]:
        return {
            **self.settings.executor_env,
            **self.extra_env,
            "SPARK_EXECUTOR_ID": str(executor_id),
            "SPARK_APPLICATION_ID": app_id,
            "SPARK_EXECUTOR_CORES": str(self._cores(profile)),
            "SPARK_EXECUTOR_MEMORY": f"{self._memory_mib(profile)}m",
            "SPARK_EXECUTOR_POD_NAME": pod_name,
            "SPARK_RESOURCE_PROFILE_ID": str(
                DEFAULT_RESOURCE_PROFILE_ID if profile is None else profile.id
            ),
        }

    def _set_resources(
        self,
        resources: dict[str, Any],
        profile: ResourceProfile | None,
        *,
        keep_template: bool = False,
    ) -> None:
        """Requests and limits: the settings' shape, overridden field by field by the profile.
        A pod Spark's own builder made keeps the requests and limits it has (Spark sized it from
        the same profile, `spark.kubernetes.executor.request.cores` and limits included)."""
        memory_mib = self.settings.pod_memory_mib
        cpu = self.settings.cpu_request
        extra: Mapping[str, str] = {}
        if profile is not None:
            if profile.memory_mib is not None:
                overhead = profile.memory_overhead_mib
                if overhead is None:
                    overhead = max(
                        int(profile.memory_mib * MEMORY_OVERHEAD_FACTOR), MEMORY_OVERHEAD_MIN_MIB
                    )
                memory_mib = profile.memory_mib + overhead
            elif profile.memory_overhead_mib is not None:
                memory_mib = self.settings.executor_memory_mib + profile.memory_overhead_mib
            if profile.cores is not None:
                cpu = str(profile.cores)
            extra = profile.extra_resources
        memory = f"{memory_mib}Mi"
        requests = ensure_section(resources, "requests")
        limits = ensure_section(resources, "limits")
        values: list[tuple[dict[str, Any], str, str]] = [
            (requests, "cpu", cpu),
            (requests, "memory", memory),
            (limits, "memory", memory),
        ]
        if self.settings.limit_cores is not None:
            values.append((limits, "cpu", self.settings.limit_cores))
        for name, quantity in extra.items():  # extended resources: requests must equal limits
            values += [(requests, name, quantity), (limits, name, quantity)]
        for section, key, value in values:
            if keep_template:
                section.setdefault(key, value)
            else:
                section[key] = value


def builder_claims(
    gateway: ApiGateway, builder: ExecutorPodTemplateBuilder, *, read_write_once: bool = False
) -> KubernetesClaims:
    """The claims of the pods `builder` makes: its OnDemand volumes, its profiles' Spark-built
    templates' claims, its driver pod as owner; `read_write_once` for Spark's legacy access
    mode."""
    return KubernetesClaims(
        gateway,
        app_label=builder.labels.app_id,
        on_demand=list(builder.on_demand.values()),
        driver_owner=builder.owner,
        pods=builder,
        templates_of=builder.claim_templates,
        access_mode="ReadWriteOnce" if read_write_once else CLAIM_ACCESS_MODE,
    )
