"""The defaults kube-apiserver writes into a pod before storing it.

Clients read stored pods as the API server returns them, and some rely on its defaults: `kubectl
describe` dereferences a gRPC probe's `service` and prints every probe's thresholds, so a pod
stored without them makes it crash. The rules are those of Kubernetes' own defaulting for core/v1
(`SetObjectDefaults_Pod` in pkg/apis/core/v1: `SetDefaults_Pod`, `SetDefaults_PodSpec`,
`SetDefaults_Container`, `SetDefaults_Probe`, `SetDefaults_HTTPGetAction`, the volume sources'
`defaultMode`, the declarative `+default` markers such as a gRPC probe's `service: ""`), for
every field a Spark pod or the shipped manifests use; the ServiceAccount admission plugin's
`serviceAccountName: default` is applied here too. A field the client set is never changed.

`admit_pod_spec` adds, to a new pod only, what two admission plugins every cluster runs add:
Priority (`priority: 0`, `preemptionPolicy: PreemptLowerPriority` without a priority class) and
DefaultTolerationSeconds (tolerate `node.kubernetes.io/not-ready` and `unreachable` for 300 s).
Compared field by field with kube-apiserver v1.36 on the shipped overlays' pods, the one
difference left is the service account token volume (`kube-api-access-*`) that the
ServiceAccount plugin mounts: kubesim mounts none.
"""

from __future__ import annotations

from typing import Any

__all__ = ["admit_pod_spec", "default_pod_spec", "image_pull_policy"]

Obj = dict[str, Any]

PROBE_DEFAULTS = (
    ("timeoutSeconds", 1),
    ("periodSeconds", 10),
    ("successThreshold", 1),
    ("failureThreshold", 3),
)
"""`SetDefaults_Probe`: a zero (unset) value takes these."""

VOLUME_FILE_MODE = 0o644
"""The `defaultMode` of secret, configMap, downwardAPI and projected volumes (420)."""

TOKEN_EXPIRATION_SECONDS = 3600
"""A projected service account token's `expirationSeconds` when unset (one hour)."""

_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def image_pull_policy(image: object) -> str:
    """`Always` for an image tagged `latest`, or with neither tag nor digest (which means
    `latest`); else `IfNotPresent` (the kubelet's `ParseImageName` rule)."""
    if not isinstance(image, str):
        return "IfNotPresent"
    reference, digest_sep, _ = image.partition("@")
    tag = reference.rsplit("/", 1)[-1].partition(":")[2]
    if not tag and not digest_sep:
        tag = "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _is_zero(value: object) -> bool:
    return value is None or value == 0


def _default_http_get(handler: object) -> None:
    if isinstance(handler, dict) and isinstance(action := handler.get("httpGet"), dict):
        if not action.get("path"):
            action["path"] = "/"
        if not action.get("scheme"):
            action["scheme"] = "HTTP"


def _default_probe(probe: Obj) -> None:
    for field, value in PROBE_DEFAULTS:
        if _is_zero(probe.get(field)):
            probe[field] = value
    _default_http_get(probe)
    grpc = probe.get("grpc")
    if isinstance(grpc, dict) and grpc.get("service") is None:
        grpc["service"] = ""


def _default_field_ref(holder: object) -> None:
    ref = holder.get("fieldRef") if isinstance(holder, dict) else None
    if isinstance(ref, dict) and not ref.get("apiVersion"):
        ref["apiVersion"] = "v1"


def _default_container(container: Obj) -> None:
    if not container.get("imagePullPolicy"):
        container["imagePullPolicy"] = image_pull_policy(container.get("image"))
    if not container.get("terminationMessagePath"):
        container["terminationMessagePath"] = "/dev/termination-log"
    if not container.get("terminationMessagePolicy"):
        container["terminationMessagePolicy"] = "File"
    if container.get("resources") is None:
        container["resources"] = {}
    for port in container.get("ports") or ():
        if isinstance(port, dict) and not port.get("protocol"):
            port["protocol"] = "TCP"
    for env in container.get("env") or ():
        if isinstance(env, dict):
            _default_field_ref(env.get("valueFrom"))
    for name in _PROBES:
        if isinstance(probe := container.get(name), dict):
            _default_probe(probe)
    if isinstance(lifecycle := container.get("lifecycle"), dict):
        for hook in ("postStart", "preStop"):
            _default_http_get(lifecycle.get(hook))


def _requests_from_limits(container: Obj) -> None:
    """`SetDefaults_Pod`: a resource with a limit and no request is requested at its limit."""
    resources = container.get("resources")
    if not isinstance(resources, dict) or not isinstance(limits := resources.get("limits"), dict):
        return
    requests = resources.get("requests")
    if not isinstance(requests, dict):
        requests = resources["requests"] = {}
    for resource, quantity in limits.items():
        requests.setdefault(resource, quantity)


_MODE_SOURCES = ("secret", "configMap", "downwardAPI", "projected")


def _default_volume(volume: Obj) -> None:
    if all(key == "name" for key in volume):
        volume["emptyDir"] = {}  # `SetDefaults_Volume`: a volume without a source is an emptyDir
    for source in _MODE_SOURCES:
        if isinstance(body := volume.get(source), dict) and body.get("defaultMode") is None:
            body["defaultMode"] = VOLUME_FILE_MODE
    if isinstance(downward := volume.get("downwardAPI"), dict):
        for item in downward.get("items") or ():
            _default_field_ref(item)
    if isinstance(projected := volume.get("projected"), dict):
        for part in projected.get("sources") or ():
            if not isinstance(part, dict):
                continue
            if isinstance(downward := part.get("downwardAPI"), dict):
                for item in downward.get("items") or ():
                    _default_field_ref(item)
            token = part.get("serviceAccountToken")
            if isinstance(token, dict) and token.get("expirationSeconds") is None:
                token["expirationSeconds"] = TOKEN_EXPIRATION_SECONDS
    if isinstance(host_path := volume.get("hostPath"), dict) and host_path.get("type") is None:
        host_path["type"] = ""
    ephemeral = volume.get("ephemeral")
    template = ephemeral.get("volumeClaimTemplate") if isinstance(ephemeral, dict) else None
    if isinstance(template, dict) and template.get("metadata") is None:
        template["metadata"] = {}  # a struct, not a pointer: the API server always writes it
    claim = template.get("spec") if isinstance(template, dict) else None
    if isinstance(claim, dict) and claim.get("volumeMode") is None:
        claim["volumeMode"] = "Filesystem"


def default_pod_spec(spec: Obj) -> Obj:
    """Fill in a pod spec's defaults in place (and return it), as the API server does on every
    create and update, so that reads, updates and kubectl see what a cluster would store."""
    if not spec.get("dnsPolicy"):
        spec["dnsPolicy"] = "ClusterFirst"
    if not spec.get("restartPolicy"):
        spec["restartPolicy"] = "Always"
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    if spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = 30
    if not spec.get("schedulerName"):
        spec["schedulerName"] = "default-scheduler"
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = account  # the ServiceAccount admission plugin
    spec["serviceAccount"] = account  # the deprecated alias, kept equal by the API server
    for field in _CONTAINER_LISTS:
        for container in spec.get(field) or ():
            if not isinstance(container, dict):
                continue
            _default_container(container)
            if field != "ephemeralContainers":
                _requests_from_limits(container)
            if spec.get("hostNetwork") is True:
                for port in container.get("ports") or ():
                    if isinstance(port, dict) and not port.get("hostPort"):
                        port["hostPort"] = port.get("containerPort")
    for volume in spec.get("volumes") or ():
        if isinstance(volume, dict):
            _default_volume(volume)
    return spec


DEFAULT_TOLERATION_SECONDS = 300
"""DefaultTolerationSeconds' `--default-not-ready-toleration-seconds` and `--default-unreachable-
toleration-seconds`."""
TOLERATED_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _tolerates(tolerations: list[Any], key: str) -> bool:
    """Whether a toleration already covers the NoExecute taint `key` (the plugin's own test)."""
    return any(
        isinstance(t, dict)
        and t.get("key", "") in ("", key)
        and t.get("effect", "") in ("", "NoExecute")
        for t in tolerations
    )


def admit_pod_spec(spec: Obj) -> Obj:
    """What the Priority and DefaultTolerationSeconds admission plugins add to a new pod."""
    if not spec.get("priorityClassName"):
        if spec.get("priority") is None:
            spec["priority"] = 0  # no class, no global default class in kubesim
        if not spec.get("preemptionPolicy"):
            spec["preemptionPolicy"] = "PreemptLowerPriority"
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        tolerations = []
    for key in TOLERATED_TAINTS:
        if not _tolerates(tolerations, key):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )
    spec["tolerations"] = tolerations
    return spec
