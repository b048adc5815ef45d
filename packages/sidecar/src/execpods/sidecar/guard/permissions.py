"""Does the service account hold every permission on pods the sidecar uses? Asked at start-up.

Without this, a Role missing `deletecollection` would show only when the driver first kills an
executor, and one missing `watch` as a warning inside the watch loop's back-off. The check asks
the API server with the real calls, each made so that it cannot change anything, and relies on
the order in which a Kubernetes API server handles a request: authorization first, so a 403 means
the verb is not granted, while any later answer (404, 422, 200) means it is:

| verb | probe |
| --- | --- |
| list | list this application's executor pods, `limit=1` |
| watch | a watch on the same selection, closed as soon as its headers arrive |
| get, patch, delete | a pod name that cannot exist (the answer is 404), dry run for the writes |
| create | a server-side dry run (`dryRun=All`) of a pod with no containers (invalid: 422) |
| deletecollection | dry run, with a selector that matches no pod |

Without a driver pod the executor id ledger is a ConfigMap (`execpods.k8s.ledger`), so its verbs
are probed too: get and patch (dry run) of a name that cannot exist, and a dry-run create of a
ConfigMap whose name is invalid (422).

A server that ignores `dryRun` still changes nothing: the names and the selector match no pod and
the pod to create is invalid. Every verb is probed before the answer: the error names each missing
verb and the resource, so one fix to the Role covers all. An unreachable API server does not stop
the start (the watch and health deal with it, and `telemetry.contact` says once what to check);
only a refusal does: a 403 as above, a 401 (the credential itself refused: `CredentialsRefused`
names where it came from), and a create refused because the namespace does not exist
(`MissingNamespace`: the dry-run create is admitted like a real one, so the API server's
NamespaceLifecycle answers `namespaces "x" not found`).

`cluster_probe` is the cheap call health uses to see whether the cluster answers.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from execpods.core import (
    ApiThrottled,
    ApiUnavailable,
    ExecpodsError,
    PodAdmissionRejected,
    PodForbidden,
    PodNotFound,
    PodOperationError,
)
from execpods.k8s import ApiGateway, ApiUnauthorized, ClusterAccess
from execpods.sidecar.telemetry.contact import refused_credential

logger = logging.getLogger(__name__)

VERBS = ("get", "list", "watch", "create", "patch", "delete", "deletecollection")
CONFIG_MAP_VERBS = ("get", "create", "patch")
"""The verbs the id ledger needs on configmaps when there is no driver pod to annotate."""
PROBE_LABEL = "execpods.io/permission-probe"


class CredentialsRefused(ExecpodsError):
    """The API server answered 401: it does not accept the credential (none, expired, or another
    cluster's); the message names where the credential came from."""


class MissingNamespace(ExecpodsError):
    """The namespace the executor pods go to does not exist."""

    def __init__(self, namespace: str, said: str) -> None:
        super().__init__(
            f"namespace {namespace!r} does not exist: create it, or set spark.kubernetes.namespace "
            f"(--namespace) to one that does. The API said: {said}"
        )
        self.namespace = namespace


class MissingPermissions(ExecpodsError):
    """The service account may not use some verbs on pods (or on configmaps, for the id
    ledger); the message names them. `missing` holds "verb" for pods, "verb configmaps" else."""

    def __init__(self, namespace: str, missing: dict[str, str]) -> None:
        by_resource: dict[str, list[str]] = {}
        for key in missing:
            verb, _, resource = key.partition(" ")
            by_resource.setdefault(resource or "pods", []).append(verb)
        refused = " and ".join(
            f"{', '.join(verbs)} on resource {resource}" for resource, verbs in by_resource.items()
        )
        details = "; ".join(f"{verb}: {message}" for verb, message in missing.items())
        super().__init__(
            f"the Kubernetes API refused {refused} in namespace {namespace!r}: grant the "
            f"sidecar's service account these verbs (see deploy/rbac.yaml). "
            f"The API said: {details}"
        )
        self.namespace = namespace
        self.missing = tuple(missing)


def _probe_calls(gateway: ApiGateway, selector: str) -> dict[str, Callable[[], object]]:
    absent = f"execpods-permission-probe-{secrets.token_hex(4)}"
    nothing = f"{selector},{PROBE_LABEL}={secrets.token_hex(4)}" if selector else PROBE_LABEL

    def watch() -> None:
        response = gateway.watch_pods(
            selector, resource_version=None, timeout_seconds=1, read_timeout=5.0
        )
        response.close()  # authorized: the stream started; nothing of it is wanted
        response.release_conn()

    invalid = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": absent}}
    invalid["spec"] = {"containers": []}
    return {
        "get": lambda: gateway.read_pod(absent),
        "list": lambda: gateway.list_pods_raw(selector, limit=1),
        "watch": watch,
        "create": lambda: gateway.create_pod(absent, invalid, dry_run=True),
        "patch": lambda: gateway.patch_pod(
            absent, {"metadata": {"labels": {PROBE_LABEL: "x"}}}, what="probe", dry_run=True
        ),
        "delete": lambda: gateway.delete_pod(absent, dry_run=True),
        "deletecollection": lambda: gateway.delete_pods(nothing, dry_run=True),
    }


def _config_map_probes(gateway: ApiGateway) -> dict[str, Callable[[], object]]:
    absent = f"execpods-permission-probe-{secrets.token_hex(4)}"
    invalid = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": absent.upper()}}
    return {
        "get configmaps": lambda: gateway.read_config_map(absent),
        "create configmaps": lambda: gateway.create_config_map(absent, invalid, dry_run=True),
        "patch configmaps": lambda: gateway.patch_config_map(
            absent, {"data": {"probe": "x"}}, dry_run=True
        ),
    }


def check_pod_permissions(
    gateway: ApiGateway,
    *,
    selector: str,
    config_maps: bool = False,
    access: ClusterAccess | None = None,
) -> None:
    """Raise `MissingPermissions` naming every verb on pods the API refuses (and, with
    `config_maps`, every verb the id ledger needs on configmaps), `CredentialsRefused` on a 401
    (naming where the credential came from, with `access`), `MissingNamespace` when the
    namespace does not exist."""
    missing: dict[str, str] = {}
    probes = _probe_calls(gateway, selector)
    if config_maps:
        probes |= _config_map_probes(gateway)
    for verb, call in probes.items():
        try:
            call()
        except PodAdmissionRejected:
            continue  # authorized; an admission policy objected to the probe pod itself
        except PodForbidden as error:
            missing[verb] = str(error)
        except ApiUnauthorized as error:
            if access is None:
                raise CredentialsRefused(
                    f"the Kubernetes API refused the credential: {error}"
                ) from None
            raise CredentialsRefused(refused_credential(access, str(error))) from None
        except PodNotFound as error:
            if verb == "create" and f'namespaces "{gateway.namespace}" not found' in str(error):
                raise MissingNamespace(gateway.namespace, str(error)) from None
            continue  # the probe's pod does not exist: the verb is granted
        except (ApiUnavailable, ApiThrottled) as error:
            # An unreachable server is said once, naming what to check (telemetry.contact).
            logger.info("Did not check the permissions on pods: %s", error)
            return
        except PodOperationError:
            continue  # any answer after authorization (404, 422, 409...) means it is granted
    if missing:
        raise MissingPermissions(gateway.namespace, missing)
    logger.info(
        "The service account may %s pods%s in namespace %s.",
        ", ".join(VERBS),
        f" and {', '.join(CONFIG_MAP_VERBS)} configmaps" if config_maps else "",
        gateway.namespace,
    )


def cluster_probe(gateway: ApiGateway, *, selector: str) -> Callable[[], None]:
    """A call that reaches the API server and costs it little (a list of at most one pod)."""

    def probe() -> None:
        gateway.list_pods_raw(selector, limit=1)

    return probe
