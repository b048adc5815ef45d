"""What a gRPC caller may ask for in a pod template: the sidecar is a privilege boundary.

The sidecar creates pods with its own service account; a pod template sent in `RequestTotal` would
otherwise let anybody who can reach the port run a privileged pod, on the host's namespaces, with
the node's root file system mounted, under any service account. Every template is therefore
checked against a policy before any pod is built (`execpods.sidecar.templatePolicy`):

- `baseline` (the default): Kubernetes' Pod Security Standards *baseline* level: no privileged
  containers, no host namespaces or host ports, no hostPath volumes, no capabilities beyond the
  baseline's default set, no unconfined seccomp or AppArmor, no custom SELinux user or role, no
  unmasked /proc, only the safe sysctls;
- `restricted`: the PSS *restricted* level on top (non-root, no privilege escalation, every
  capability dropped but NET_BIND_SERVICE, a RuntimeDefault or Localhost seccomp profile, only
  the volume types restricted allows);
- `refuse`: no template over gRPC at all (the sidecar's own podTemplateFile still applies);
- `none`: no check, for a cluster whose own admission control (Pod Security Admission, a policy
  engine) decides; logged at WARNING at start-up.

Under every policy but `none`, the template's service account and namespace, when given, must be
the sidecar's own (its settings fix them), and three scheduling fields that the Pod Security
Standards leave out, but that would let a caller escape where the cluster's operators put its
pods, are refused (issue 32): `spec.nodeName` (it skips the scheduler, its taints and its fit
checks), a toleration of every taint (no key, operator Exists) or of the control plane's
(`node-role.kubernetes.io/control-plane`, `.../master`), and a `system-` priority class (the
cluster's own, which preempts anything). Other tolerations, node selectors, affinities and
priority classes stay allowed: a GPU or spot node pool is what pod templates are for, and a
ResourceQuota can limit priority classes per namespace. A refusal names the field, e.g.
`spec.containers[0].securityContext.privileged`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

POLICY_KEY = "execpods.sidecar.templatePolicy"


class TemplatePolicyLevel(Enum):
    BASELINE = "baseline"
    RESTRICTED = "restricted"
    REFUSE = "refuse"
    NONE = "none"


def parse_policy(text: str) -> TemplatePolicyLevel:
    try:
        return TemplatePolicyLevel(text.strip().lower())
    except ValueError:
        choices = ", ".join(level.value for level in TemplatePolicyLevel)
        raise ValueError(f"must be one of {choices}") from None


class PolicyRefusal(ValueError):
    """The template asks for something the policy forbids; the message names the field."""


# Pod Security Standards, baseline: capabilities a container may add, safe sysctls, SELinux types.
_BASELINE_CAPABILITIES = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)
_SAFE_SYSCTLS = frozenset(
    [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    ]
)
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
_RESTRICTED_VOLUMES = frozenset(
    [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ]
)
_SECCOMP_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplatePolicy:
    """The policy with what the sidecar's settings fix: its namespace and service account."""

    level: TemplatePolicyLevel = TemplatePolicyLevel.BASELINE
    namespace: str = "default"
    service_account: str | None = None

    def check(self, template: Mapping[str, Any]) -> None:
        """Raise `PolicyRefusal` naming the first field the policy forbids."""
        if self.level is TemplatePolicyLevel.NONE:
            return
        if self.level is TemplatePolicyLevel.REFUSE:
            raise PolicyRefusal(
                f"pod templates are not accepted over gRPC ({POLICY_KEY}=refuse): the sidecar's "
                "own spark.kubernetes.executor.podTemplateFile applies"
            )
        for field, problem in self._problems(template):
            raise PolicyRefusal(f"{field} {problem} ({POLICY_KEY}={self.level.value})")

    def _problems(self, template: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
        metadata = _mapping(template.get("metadata"))
        spec = _mapping(template.get("spec"))
        namespace = metadata.get("namespace")
        if namespace not in (None, self.namespace):
            yield (
                "metadata.namespace",
                f"is {namespace!r}; this sidecar creates pods in {self.namespace!r}",
            )
        allowed_account = self.service_account or "default"
        for key in ("serviceAccountName", "serviceAccount"):
            account = spec.get(key)
            if account not in (None, "", allowed_account):
                yield (
                    f"spec.{key}",
                    f"is {account!r}; executor pods run as {allowed_account!r} "
                    "(spark.kubernetes.authenticate.executor.serviceAccountName)",
                )
        yield from _baseline_pod(spec, metadata)
        yield from _scheduling(spec)
        containers = list(_containers(spec))
        for path, container in containers:
            yield from _baseline_container(path, _mapping(container.get("securityContext")))
            for index, port in enumerate(_list(container.get("ports"))):
                if _mapping(port).get("hostPort"):
                    yield f"{path}.ports[{index}].hostPort", "is set (host ports are not allowed)"
        if self.level is TemplatePolicyLevel.RESTRICTED:
            yield from _restricted(spec, containers)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for kind in _CONTAINER_LISTS:
        for index, container in enumerate(_list(spec.get(kind))):
            yield f"spec.{kind}[{index}]", _mapping(container)


def _baseline_pod(
    spec: Mapping[str, Any], metadata: Mapping[str, Any]
) -> Iterator[tuple[str, str]]:
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            yield f"spec.{key}", "is true (host namespaces are not allowed)"
    for index, volume in enumerate(_list(spec.get("volumes"))):
        if "hostPath" in _mapping(volume):
            yield f"spec.volumes[{index}].hostPath", "is set (hostPath volumes are not allowed)"
    pod_context = _mapping(spec.get("securityContext"))
    yield from _baseline_context("spec.securityContext", pod_context)
    for index, sysctl in enumerate(_list(pod_context.get("sysctls"))):
        name = _mapping(sysctl).get("name")
        if name not in _SAFE_SYSCTLS:
            yield f"spec.securityContext.sysctls[{index}]", f"{name!r} is not a safe sysctl"
    for key, value in _mapping(metadata.get("annotations")).items():
        if str(key).startswith("container.apparmor.security.beta.kubernetes.io/") and (
            value == "unconfined"
        ):
            yield f"metadata.annotations[{key!r}]", "is 'unconfined'"


_CONTROL_PLANE_TAINTS = frozenset(
    {"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}
)


def _scheduling(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Where a pod may go: what the Pod Security Standards leave to the cluster's operators."""
    if spec.get("nodeName"):
        yield "spec.nodeName", "is set (it skips the scheduler, its taints and its fit checks)"
    for index, toleration in enumerate(_list(spec.get("tolerations"))):
        entry = _mapping(toleration)
        key = entry.get("key")
        if not key and entry.get("operator") == "Exists":
            yield f"spec.tolerations[{index}]", "tolerates every taint (no key, operator Exists)"
        elif key in _CONTROL_PLANE_TAINTS:
            yield f"spec.tolerations[{index}].key", f"{key!r}: executors stay off control planes"
    priority = spec.get("priorityClassName")
    if isinstance(priority, str) and priority.startswith("system-"):
        yield "spec.priorityClassName", f"{priority!r} is the cluster's own priority class"


def _baseline_context(path: str, context: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    if _mapping(context.get("windowsOptions")).get("hostProcess"):
        yield f"{path}.windowsOptions.hostProcess", "is true"
    selinux = _mapping(context.get("seLinuxOptions"))
    if selinux.get("type", "") not in _SELINUX_TYPES:
        yield f"{path}.seLinuxOptions.type", f"{selinux.get('type')!r} is not allowed"
    for key in ("user", "role"):
        if selinux.get(key):
            yield (
                f"{path}.seLinuxOptions.{key}",
                "is set (custom SELinux users and roles are not allowed)",
            )
    if _mapping(context.get("seccompProfile")).get("type") == "Unconfined":
        yield f"{path}.seccompProfile.type", "is 'Unconfined'"
    if _mapping(context.get("appArmorProfile")).get("type") == "Unconfined":
        yield f"{path}.appArmorProfile.type", "is 'Unconfined'"


def _baseline_container(path: str, context: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    where = f"{path}.securityContext"
    if context.get("privileged"):
        yield f"{where}.privileged", "is true (privileged containers are not allowed)"
    yield from _baseline_context(where, context)
    if context.get("procMount", "Default") != "Default":
        yield f"{where}.procMount", f"{context.get('procMount')!r} is not allowed"
    added = _list(_mapping(context.get("capabilities")).get("add"))
    for index, capability in enumerate(added):
        if str(capability).removeprefix("CAP_") not in _BASELINE_CAPABILITIES:
            yield f"{where}.capabilities.add[{index}]", f"{capability!r} is not allowed"


def _restricted(
    spec: Mapping[str, Any], containers: list[tuple[str, Mapping[str, Any]]]
) -> Iterator[tuple[str, str]]:
    for index, volume in enumerate(_list(spec.get("volumes"))):
        kinds = set(_mapping(volume)) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            yield f"spec.volumes[{index}]", f"of type {sorted(kinds)} is not allowed"
    pod = _mapping(spec.get("securityContext"))
    for path, container in containers:
        where = f"{path}.securityContext"
        context = _mapping(container.get("securityContext"))
        if context.get("allowPrivilegeEscalation") is not False:
            yield f"{where}.allowPrivilegeEscalation", "must be false"
        if context.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            yield f"{where}.runAsNonRoot", "must be true (here or in spec.securityContext)"
        if context.get("runAsUser", pod.get("runAsUser")) == 0:
            yield f"{where}.runAsUser", "must not be 0"
        seccomp = _mapping(context.get("seccompProfile")) or _mapping(pod.get("seccompProfile"))
        if seccomp.get("type") not in _SECCOMP_ALLOWED:
            yield f"{where}.seccompProfile.type", "must be RuntimeDefault or Localhost"
        capabilities = _mapping(context.get("capabilities"))
        if "ALL" not in _list(capabilities.get("drop")):
            yield f"{where}.capabilities.drop", "must include ALL"
        for index, capability in enumerate(_list(capabilities.get("add"))):
            if str(capability).removeprefix("CAP_") != "NET_BIND_SERVICE":
                yield f"{where}.capabilities.add[{index}]", f"{capability!r} is not allowed"
