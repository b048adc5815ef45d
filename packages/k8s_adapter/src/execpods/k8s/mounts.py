"""Secrets and volumes of the executor pods, from Spark's properties.

Spark's executor feature steps read three families, all applied to the executor container:

- `spark.kubernetes.executor.secrets.SECRET=/path`: the secret mounted at the path;
- `spark.kubernetes.executor.secretKeyRef.ENV=secret:key`: an environment variable from a secret;
- `spark.kubernetes.executor.volumes.TYPE.NAME.KEY=value`: a volume of TYPE (`hostPath`,
  `emptyDir`, `nfs`, `persistentVolumeClaim`) mounted by `mount.path` (required), with
  `mount.readOnly`, `mount.subPath`, `mount.subPathExpr`, and the type's `options.*`.

They do not change from one executor to the next, so they are applied to the pod template once,
when the builder is made; a mistake is a `SettingsError` naming the property, at start-up.
`persistentVolumeClaim` with `claimName=OnDemand` stays `OnDemand` in the template: the builder
names each executor's claim, and `execpods.k8s.claims` makes it (`on_demand_volumes`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from execpods.core import EXECUTOR_CONTAINER_NAME, PodManifest, SettingsError
from execpods.k8s.claims import ON_DEMAND, OnDemandVolume

SECRETS_PREFIX = "spark.kubernetes.executor.secrets."
SECRET_KEY_REF_PREFIX = "spark.kubernetes.executor.secretKeyRef."
VOLUMES_PREFIX = "spark.kubernetes.executor.volumes."

_OPTIONS = {
    "hostPath": {"path", "type"},
    "emptyDir": {"medium", "sizeLimit"},
    "nfs": {"path", "server"},
    "persistentVolumeClaim": {"claimName", "storageClass", "sizeLimit"},
}
_REQUIRED = {
    "hostPath": {"path"},
    "nfs": {"path", "server"},
    "persistentVolumeClaim": {"claimName"},
}
_MOUNT = {"path", "readOnly", "subPath", "subPathExpr"}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def volume_key_problem(rest: str) -> str | None:
    """Why `TYPE.NAME.KEY` (what follows the volumes prefix) is not a volume property, or None."""
    parts = rest.split(".")
    if len(parts) < 4 or parts[2] not in ("mount", "options", "label"):
        return "must be TYPE.NAME.mount.KEY, TYPE.NAME.options.KEY or TYPE.NAME.label.KEY"
    kind, _, section, key = parts[0], parts[1], parts[2], ".".join(parts[3:])
    if kind not in _OPTIONS:
        return f"has volume type {kind!r}; use one of {', '.join(_OPTIONS)}"
    if section == "label":  # the labels of an OnDemand claim (Spark 4)
        return None if kind == "persistentVolumeClaim" else "only claims take label.KEY"
    allowed = _MOUNT if section == "mount" else _OPTIONS[kind]
    if key not in allowed:
        takes = ", ".join(f"{section}.{name}" for name in sorted(allowed))
        return f"has {section}.{key!r}; {kind} volumes take {takes}"
    return None


@dataclass(slots=True)
class _Volume:
    kind: str
    name: str
    mount: dict[str, str] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def source(self) -> dict[str, Any]:
        options = self.options
        if self.kind == "emptyDir":
            return {k: options[k] for k in ("medium", "sizeLimit") if k in options}
        if self.kind == "hostPath":
            return {k: options[k] for k in ("path", "type") if k in options}
        if self.kind == "nfs":
            return {"path": options["path"], "server": options["server"]}
        return {"claimName": options["claimName"], "readOnly": _flag(self.mount, "readOnly")}

    def volume_mount(self) -> dict[str, Any]:
        mounted: dict[str, Any] = {"name": self.name, "mountPath": self.mount["path"]}
        mounted["readOnly"] = _flag(self.mount, "readOnly")
        for key in ("subPath", "subPathExpr"):
            if key in self.mount:
                mounted[key] = self.mount[key]
        return mounted


def _flag(values: Mapping[str, str], key: str) -> bool:
    return values.get(key, "false").strip().lower() == "true"


def _volumes(properties: Mapping[str, str]) -> list[_Volume]:
    found: dict[tuple[str, str], _Volume] = {}
    for rest, value in sorted(properties.items()):
        kind, name, section, *key = rest.split(".")
        volume = found.setdefault((kind, name), _Volume(kind=kind, name=name))
        sections = {"mount": volume.mount, "label": volume.labels}
        sections.get(section, volume.options)[".".join(key)] = value
    for (kind, name), volume in found.items():
        where = f"{VOLUMES_PREFIX}{kind}.{name}"
        if _DNS_LABEL.match(name) is None:
            raise SettingsError(f"{where}: the volume name must be a DNS-1123 label")
        if "path" not in volume.mount:
            raise SettingsError(f"{where}.mount.path is required")
        missing = sorted(_REQUIRED.get(kind, set()) - set(volume.options))
        if missing:
            raise SettingsError(f"{where}.options.{missing[0]} is required")
    return list(found.values())


def on_demand_volumes(properties: Mapping[str, str]) -> list[OnDemandVolume]:
    """The `persistentVolumeClaim` volumes with `claimName=OnDemand`, numbered by their position
    among all executor volumes (the `i` of Spark's `<pod>-pvc-<i>`)."""
    return [
        OnDemandVolume(
            volume_name=v.name,
            index=i,
            storage_class=v.options.get("storageClass"),
            size=v.options.get("sizeLimit"),
            labels=dict(v.labels),
        )
        for i, v in enumerate(_volumes(properties))
        if v.kind == "persistentVolumeClaim" and v.options["claimName"] == ON_DEMAND
    ]


def _secret_key_ref(env: str, value: str) -> dict[str, Any]:
    secret, sep, key = value.partition(":")
    if not sep or not secret.strip() or not key.strip():
        raise SettingsError(f"{SECRET_KEY_REF_PREFIX}{env}={value!r} is invalid: use secret:key")
    return {
        "name": env,
        "valueFrom": {"secretKeyRef": {"name": secret.strip(), "key": key.strip()}},
    }


def with_mounts(
    template: PodManifest,
    *,
    secrets: Mapping[str, str],
    secret_key_refs: Mapping[str, str],
    volumes: Mapping[str, str],
) -> PodManifest:
    """The template with the secrets and volumes added to its executor container (the one named
    `spark-kubernetes-executor`, else the first; made when the template has none)."""
    if not (secrets or secret_key_refs or volumes):
        return template
    pod: dict[str, Any] = copy.deepcopy(dict(template))
    spec = pod.setdefault("spec", {})
    containers = spec.setdefault("containers", [])
    if not containers:
        containers.append({"name": EXECUTOR_CONTAINER_NAME})
    named = [c for c in containers if c.get("name") == EXECUTOR_CONTAINER_NAME]
    container = named[0] if named else containers[0]
    pod_volumes = spec.setdefault("volumes", [])
    mounts = container.setdefault("volumeMounts", [])
    for secret, path in sorted(secrets.items()):
        pod_volumes.append({"name": f"{secret}-volume", "secret": {"secretName": secret}})
        mounts.append({"name": f"{secret}-volume", "mountPath": path})
    for volume in _volumes(volumes):
        pod_volumes.append({"name": volume.name, volume.kind: volume.source()})
        mounts.append(volume.volume_mount())
    env = container.setdefault("env", [])
    env.extend(_secret_key_ref(name, value) for name, value in sorted(secret_key_refs.items()))
    return pod
