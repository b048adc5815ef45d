"""The executors' OnDemand claims over the API: naming, templates and the claim calls.

A volume `spark.kubernetes.executor.volumes.persistentVolumeClaim.NAME.options.claimName=OnDemand`
becomes, in executor N's pod, a claim named `<pod name>-pvc-<i>` (`i`: the volume's position among
the executor volumes, as Spark's `MountVolumesFeatureStep` numbers them); `SPARK_EXECUTOR_ID` in
any claim name becomes N. With `options.storageClass` and `options.sizeLimit` set, the claim is
made for the executor (`ReadWriteOncePod`, labelled with the application id); without them the
claim must exist already, as in Spark.

A pod template that Spark built (the plugin declares each profile's pod, built for executor 0)
names its claims `<prefix>-exec-0-pvc-<i>`; the plugin passes the claims Spark would have created
in the template's annotation `execpods.io/executor-claims` (a JSON list of claims), which the
builder takes out of the template: executor N gets the same claims, named `-exec-N-pvc-<i>`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from execpods.core import Claim, NeededClaim, PodManifest, PodNotFound, SettingsError
from execpods.k8s.convert import parse_timestamp, volume_claim_names
from execpods.k8s.gateway import ApiGateway

__all__ = [
    "CLAIMS_ANNOTATION",
    "KubernetesClaims",
    "OnDemandVolume",
    "name_claims",
    "rename_claims",
    "take_claim_templates",
]

CLAIMS_ANNOTATION = "execpods.io/executor-claims"
ON_DEMAND = "OnDemand"
_TEMPLATE_INFIX = "-exec-0-pvc-"
ACCESS_MODE = "ReadWriteOncePod"


@dataclass(frozen=True, slots=True, kw_only=True)
class OnDemandVolume:
    """An executor volume whose claim is made per executor."""

    volume_name: str
    index: int
    storage_class: str | None = None
    size: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    """`persistentVolumeClaim.NAME.label.KEY`: the claim's labels (the application id wins)."""


def name_claims(
    pod: PodManifest,
    *,
    pod_name: str,
    executor_id: int,
    on_demand: Mapping[str, OnDemandVolume],
) -> None:
    """Name executor `executor_id`'s claims in its pod (in place), as Spark names them."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        source = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else None
        if not isinstance(source, dict) or not isinstance(source.get("claimName"), str):
            continue
        name: str = source["claimName"]
        spec = on_demand.get(volume.get("name", ""))
        if name == ON_DEMAND and spec is not None:
            name = f"{pod_name}-pvc-{spec.index}"
        name = name.replace(_TEMPLATE_INFIX, f"-exec-{executor_id}-pvc-")
        source["claimName"] = name.replace("SPARK_EXECUTOR_ID", str(executor_id))


def take_claim_templates(template: PodManifest, *, what: str) -> list[PodManifest]:
    """The claims a Spark-built template carries in its annotation, removed from the template."""
    annotations = (template.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, dict) or CLAIMS_ANNOTATION not in annotations:
        return []
    text = annotations.pop(CLAIMS_ANNOTATION)
    try:
        claims = json.loads(text)
    except (TypeError, ValueError) as error:
        raise SettingsError(f"{what}: {CLAIMS_ANNOTATION} is not JSON: {error}") from None
    if not isinstance(claims, list) or not all(
        isinstance(c, dict) and isinstance((c.get("metadata") or {}).get("name"), str)
        for c in claims
    ):
        raise SettingsError(f"{what}: {CLAIMS_ANNOTATION} must be a list of named claims")
    return claims


def _size(manifest: PodManifest) -> str | None:
    requests = ((manifest.get("spec") or {}).get("resources") or {}).get("requests") or {}
    size = requests.get("storage")
    return None if size is None else str(size)


def _storage_class(manifest: PodManifest) -> str | None:
    value = (manifest.get("spec") or {}).get("storageClassName")
    return None if value is None else str(value)


def rename_claims(pod: PodManifest, renames: Mapping[str, str]) -> None:
    """Point the pod's volumes at the claims `renames` names instead (claims reused)."""
    if not renames:
        return
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        source = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else None
        if isinstance(source, dict) and source.get("claimName") in renames:
            source["claimName"] = renames[source["claimName"]]


def _claim_of(pod: PodManifest, volume_name: str) -> str | None:
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if isinstance(volume, dict) and volume.get("name") == volume_name:
            source = volume.get("persistentVolumeClaim") or {}
            name = source.get("claimName")
            return name if isinstance(name, str) else None
    return None


class PodShape(Protocol):
    """The builder as the claims see it: the pod an executor would get, before any decision."""

    def build(self, *, executor_id: int, app_id: str, resource_profile_id: int) -> PodManifest:
        """The executor's pod as built without decisions (its claims named)."""

    def carries_claims(self, resource_profile_id: int) -> bool:
        """Whether the profile's template carries claims of its own (a Spark-built one)."""


class KubernetesClaims:
    """The core's `ClaimOperations` over the API: the claims a pod needs, and the claim calls."""

    def __init__(
        self,
        gateway: ApiGateway,
        *,
        app_label: str,
        on_demand: Sequence[OnDemandVolume],
        driver_owner: Mapping[str, object] | None,
        pods: PodShape,
        templates_of: Mapping[int, Sequence[PodManifest]] | None = None,
        access_mode: str = ACCESS_MODE,
    ) -> None:
        self._gateway = gateway
        self._app_label = app_label
        self._on_demand = list(on_demand)
        self._owner = driver_owner
        self._pods = pods
        self._access_mode = access_mode
        self._templates_of: Mapping[int, Sequence[PodManifest]] = (
            templates_of if templates_of is not None else {}  # the builder fills it as it builds
        )

    @property
    def declares_on_demand(self) -> bool:
        return bool(self._on_demand)

    @property
    def has_driver_pod(self) -> bool:
        return self._owner is not None

    def claims_for(
        self, *, executor_id: int, app_id: str, resource_profile_id: int
    ) -> list[NeededClaim]:
        if not self._on_demand and not self._pods.carries_claims(resource_profile_id):
            return []  # the common case, with no build
        pod = self._pods.build(
            executor_id=executor_id, app_id=app_id, resource_profile_id=resource_profile_id
        )
        return [
            NeededClaim(
                name=str(manifest["metadata"]["name"]),
                storage_class=_storage_class(manifest),
                size=_size(manifest),
                manifest=manifest,
            )
            for manifest in self._manifests_for(pod, app_id, str(executor_id), resource_profile_id)
        ]

    def _manifests_for(
        self, pod: PodManifest, app_id: str, executor_id: str, profile: int
    ) -> list[PodManifest]:
        """The claims Spark's template of the profile carries, then those of the settings'
        OnDemand volumes. A claim both name (the plugin's sidecar given the application's own
        spark-defaults.conf) is made once, as Spark built it: twice was a 409 on every executor."""
        made = self._from_templates(pod, app_id, executor_id, profile)
        taken = {str(claim["metadata"]["name"]) for claim in made}
        for volume in self._on_demand:
            name = _claim_of(pod, volume.volume_name)
            if name is None or volume.storage_class is None or volume.size is None:
                continue
            if name in taken:
                continue
            made.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {
                        "name": name,
                        "labels": {**volume.labels, self._app_label: app_id},
                    },
                    "spec": {
                        "storageClassName": volume.storage_class,
                        "accessModes": [self._access_mode],
                        "resources": {"requests": {"storage": volume.size}},
                    },
                }
            )
        return made

    def _from_templates(
        self, pod: PodManifest, app_id: str, executor_id: str, profile: int
    ) -> list[PodManifest]:
        names = set(volume_claim_names((pod.get("spec") or {}).get("volumes")))
        made: list[PodManifest] = []
        for template in self._templates_of.get(profile, ()):
            claim: dict[str, Any] = copy.deepcopy(dict(template))
            meta = claim.setdefault("metadata", {})
            name = str(meta["name"]).replace(_TEMPLATE_INFIX, f"-exec-{executor_id}-pvc-")
            if name not in names:
                continue
            meta["name"] = name
            for key in ("uid", "resourceVersion", "ownerReferences", "namespace"):
                meta.pop(key, None)
            meta.setdefault("labels", {})[self._app_label] = app_id
            claim.pop("status", None)
            made.append(claim)
        return made

    def create_claim(self, claim: NeededClaim, *, owner_pod: str | None) -> None:
        manifest: dict[str, Any] = copy.deepcopy(dict(claim.manifest))
        owner = self._owner if owner_pod is None else self._executor_owner(owner_pod)
        if owner is not None:
            manifest.setdefault("metadata", {})["ownerReferences"] = [dict(owner)]
        self._gateway.create_claim(claim.name, manifest)

    def _executor_owner(self, pod_name: str) -> Mapping[str, object] | None:
        """An owner reference to the executor's pod (None when it cannot be read)."""
        try:
            body = self._gateway.read_pod(pod_name)
        except PodNotFound:
            return None
        uid = ((body if isinstance(body, dict) else {}).get("metadata") or {}).get("uid")
        if uid is None:
            return None
        return {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": uid}

    def list_claims(self, app_id: str) -> list[Claim]:
        body = self._gateway.list_claims(f"{self._app_label}={app_id}")
        items = body.get("items") if isinstance(body, dict) else None
        claims = []
        for item in items or []:
            meta, spec = item.get("metadata") or {}, item.get("spec") or {}
            requests = (spec.get("resources") or {}).get("requests") or {}
            try:
                created = parse_timestamp(meta.get("creationTimestamp"), "creationTimestamp")
            except ValueError:
                created = None
            claims.append(
                Claim(
                    name=str(meta.get("name")),
                    storage_class=spec.get("storageClassName"),
                    size=None if requests.get("storage") is None else str(requests["storage"]),
                    created_at=None if created is None else created.timestamp(),
                )
            )
        return claims

    def delete_claims(self, app_id: str) -> int:
        body = self._gateway.delete_claims(f"{self._app_label}={app_id}")
        items = body.get("items") if isinstance(body, dict) else None
        return len(items or [])
