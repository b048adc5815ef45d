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
from typing import Any

from execpods.core import PodManifest, SettingsError
from execpods.core.claims import Claim
from execpods.k8s.convert import parse_timestamp, volume_claim_names
from execpods.k8s.gateway import ApiGateway

__all__ = [
    "CLAIMS_ANNOTATION",
    "KubernetesClaims",
    "OnDemandVolume",
    "name_claims",
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


def _claim_of(pod: PodManifest, volume_name: str) -> str | None:
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if isinstance(volume, dict) and volume.get("name") == volume_name:
            source = volume.get("persistentVolumeClaim") or {}
            name = source.get("claimName")
            return name if isinstance(name, str) else None
    return None


class KubernetesClaims:
    """`ClaimOperations` and `ClaimTemplates` over the API (the core's `ExecutorClaims` uses it)."""

    def __init__(
        self,
        gateway: ApiGateway,
        *,
        app_label: str,
        executor_id_label: str,
        profile_label: str,
        on_demand: Sequence[OnDemandVolume],
        driver_owner: Mapping[str, object] | None,
        templates_of: Mapping[int, Sequence[PodManifest]] | None = None,
        access_mode: str = ACCESS_MODE,
    ) -> None:
        self._gateway = gateway
        self._app_label = app_label
        self._executor_id_label = executor_id_label
        self._profile_label = profile_label
        self._on_demand = list(on_demand)
        self._owner = driver_owner
        self._access_mode = access_mode
        self._templates_of: Mapping[int, Sequence[PodManifest]] = (
            templates_of if templates_of is not None else {}  # the builder fills it later
        )

    @property
    def driver_owner(self) -> Mapping[str, object] | None:
        return self._owner

    def claims_for(self, pod: PodManifest) -> list[PodManifest]:
        """The claims to make for ``pod``: those of the Spark-built template of its profile,
        then those of the settings' OnDemand volumes. A claim both name (the plugin's sidecar
        given the application's own spark-defaults.conf) is made once, as Spark built it."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        app_id = str(labels.get(self._app_label, ""))
        executor_id = str(labels.get(self._executor_id_label, ""))
        made = self._from_templates(pod, labels, app_id=app_id, executor_id=executor_id)
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
        self, pod: PodManifest, labels: Mapping[str, Any], *, app_id: str, executor_id: str
    ) -> list[PodManifest]:
        try:
            profile = int(labels.get(self._profile_label, "0"))
        except ValueError:
            profile = 0
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

    def create_claim(self, manifest: PodManifest) -> None:
        self._gateway.create_claim(str(manifest["metadata"]["name"]), manifest)

    def delete_claims(self, app_id: str) -> int:
        body = self._gateway.delete_claims(f"{self._app_label}={app_id}")
        items = body.get("items") if isinstance(body, dict) else None
        return len(items or [])
