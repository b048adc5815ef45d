"""The one place every API call goes through: timeouts, raw responses, typed errors.

Every call is made with `_preload_content=False`, so the client never builds its (slow) models: the
caller gets the urllib3 response and parses the bytes with orjson. Every call gets a timeout, and
every failure leaves here as one of the core's `PodOperationError`s (see `errors.py`). With a
`rate_limiter`, every call first takes a start from it, and the limiter hears every answer (the
static token bucket of `ratelimit.py` ignores them; the adaptive one of `congestion.py` learns its
rate from them). With a `backoff` gate, no call is sent while a 5xx back-off runs
(`backoff.py`). A 429 with a Retry-After holds back only the call it refused: with
`throttle_retries`, that call waits its Retry-After and is sent again (taking a new start from the
limiter), up to that many times, while every other call goes on, as client-go retries a refused
request (`maxRetries` 10). A Retry-After longer than `THROTTLE_WAIT_LIMIT` is not waited out here:
the caller hears the 429 at once (a driver's KillExecutors answers RESOURCE_EXHAUSTED rather than
hanging; the allocator pauses its creates for that long).

Creates, the one call made thousands of times in a row, go through `transport.CreateTransport`
when the client's configuration allows it (see that module for why); the watch, the lists and
every other call use the official client.

The gateway offers one typed method per pod call the adapter makes (`create_pod`, `list_pods`,
`watch_pods`, ...), each naming its query parameters, so no caller passes a client method's name
as a string and mypy checks every call.
"""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import orjson
from execpods.core import ApiThrottled, ApiUnavailable, PodOperationError
from execpods.k8s.backoff import ApiBackoffGate, ApiHeldBack
from execpods.k8s.clienttypes import KubernetesApiClient
from execpods.k8s.errors import error_of_answer, map_error
from execpods.k8s.ratelimit import RateLimiter
from execpods.k8s.telemetry import HTTP_METHODS, SUCCESS, ApiCall, ApiCallListener
from execpods.k8s.transport import Answer, CreateTransport
from kubernetes import client as k8s_client
from kubernetes.client import V1ConfigMap, V1PersistentVolumeClaim, V1Pod
from pydantic import ValidationError
from urllib3 import BaseHTTPResponse

DEFAULT_CONNECT_TIMEOUT = 5.0
THROTTLE_WAIT_LIMIT = 5.0
"""The longest Retry-After a refused call waits out before it is sent again."""

T = TypeVar("T")

Timeout = float | tuple[float, float]


@contextlib.contextmanager
def _typed_errors(what: str) -> Iterator[None]:
    """Re-raise an API or transport failure as the core's typed error; anything else as is."""
    try:
        yield
    except Exception as error:
        mapped = map_error(error, what=what)
        if mapped is None:
            raise
        raise mapped from error


def _selected(label_selector: str, field_selector: str | None) -> str:
    return f"{label_selector!r}" + (f" with {field_selector!r}" if field_selector else "")


def pod_problem(manifest: Mapping[str, object]) -> str | None:
    """Why the client's own model refuses `manifest` (None when it takes it): what `create_pod`
    would raise for it before sending anything (a list given as a string, a field the model does
    not know), said once where the pod is declared instead of at every create."""
    try:
        V1Pod.model_validate(dict(manifest))
    except ValidationError as error:  # the client's models are pydantic's
        found = error.errors()
        if not found:
            return str(error)
        first = found[0]
        where = ".".join(str(part) for part in first["loc"])
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        return f"{where}: {first['msg']}{more}"
    return None


class ApiGateway:
    """A namespace-bound `CoreV1Api`, one typed method per pod call, raw responses or JSON."""

    def __init__(
        self,
        api_client: KubernetesApiClient,
        *,
        namespace: str,
        request_timeout: float = 30.0,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        rate_limiter: RateLimiter | None = None,
        backoff: ApiBackoffGate | None = None,
        telemetry: ApiCallListener | None = None,
        throttle_retries: int = 0,
        create_pool: int = 0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`throttle_retries`: how often a call refused with 429 and a Retry-After is sent again
        after it (0: the caller gets the `ApiThrottled`). `create_pool`: creates in flight at
        once; above 0, creates use the lean `CreateTransport` with a pool of that many kept-alive
        connections (when the client's configuration allows it)."""
        self._api_client = api_client
        self._throttle_retries = throttle_retries
        self._sleep = sleep
        raw: Any = api_client
        self._creates: CreateTransport | None = None
        if create_pool > 0 and CreateTransport.supports(raw.configuration):
            self._creates = CreateTransport(
                raw.configuration,
                headers=self._headers,
                pool_size=create_pool,
                connect_timeout=connect_timeout,
            )
        self._telemetry = telemetry
        self._core = k8s_client.CoreV1Api(api_client)
        self._custom = k8s_client.CustomObjectsApi(api_client)
        core = self._core
        self._verbs: dict[object, str] = {
            core.create_namespaced_pod: "create",
            core.read_namespaced_pod: "get",
            core.list_namespaced_pod: "list",
            core.patch_namespaced_pod: "patch",
            core.delete_namespaced_pod: "delete",
            core.delete_collection_namespaced_pod: "deletecollection",
            core.read_namespaced_config_map: "get",
            core.create_namespaced_config_map: "create",
            core.patch_namespaced_config_map: "patch",
            core.create_namespaced_persistent_volume_claim: "create",
            core.list_namespaced_persistent_volume_claim: "list",
            core.delete_collection_namespaced_persistent_volume_claim: "deletecollection",
            core.patch_namespaced_pod_resize: "patch",
            self._custom.list_namespaced_custom_object: "list",
        }
        self.namespace = namespace
        self.host = urlsplit(str(api_client.configuration.host)).netloc
        """The API server's host:port (client-go's `host` label)."""
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.rate_limiter = rate_limiter
        self.backoff = backoff

    @property
    def create_transport(self) -> CreateTransport | None:
        """The lean transport creates use (None: the official client's)."""
        return self._creates

    def close(self) -> None:
        """Close the create transport's idle connections (the client closes its own)."""
        if self._creates is not None:
            self._creates.close()

    def _headers(self) -> dict[str, str]:
        """The client's default headers (User-Agent) and credentials, as it would send them
        (asked for on every call: a token an exec plugin refreshes stays fresh)."""
        raw: Any = self._api_client
        headers: dict[str, str] = dict(raw.default_headers)
        raw.update_params_for_auth(headers, [], ["BearerToken"], "", "POST", None)
        return headers

    # --- the pod calls ---------------------------------------------------------------------

    def create_pod(
        self, name: str, manifest: Mapping[str, object], *, dry_run: bool = False
    ) -> None:
        """POST a pod (`name` is for messages: the manifest carries it); `dry_run`: validated
        and authorized by the server, never stored."""
        if self._creates is not None:
            query = "?dryRun=All" if dry_run else ""
            path = f"/api/v1/namespaces/{urllib.parse.quote(self.namespace, safe='')}/pods"
            self._post(f"create pod {name}", path + query, orjson.dumps(manifest))
            return
        self._bytes(
            f"create pod {name}",
            # The client sends a plain dict as is; building its V1Pod model would only cost time.
            partial(
                self._core.create_namespaced_pod,
                self.namespace,
                cast(V1Pod, dict(manifest)),
                dry_run=_dry(dry_run),
            ),
        )

    def read_pod(self, name: str) -> object:
        """One pod's JSON."""
        return self._json(
            f"get pod {name}", partial(self._core.read_namespaced_pod, name, self.namespace)
        )

    def patch_pod(
        self, name: str, patch: Mapping[str, object], *, what: str, dry_run: bool = False
    ) -> None:
        """A strategic merge patch of one pod."""
        self._bytes(
            f"{what} of pod {name}",
            partial(
                self._core.patch_namespaced_pod,
                name,
                self.namespace,
                dict(patch),
                dry_run=_dry(dry_run),
            ),
        )

    def delete_pod(
        self, name: str, *, grace_period_seconds: int | None = None, dry_run: bool = False
    ) -> object:
        """DELETE one pod (with the pod's own grace period unless one is given); the answer's
        JSON (the pod as deleted), or None when it is not JSON: the pod was deleted all the
        same."""
        data = self._bytes(
            f"delete pod {name}",
            partial(
                self._core.delete_namespaced_pod,
                name,
                self.namespace,
                grace_period_seconds=grace_period_seconds,
                dry_run=_dry(dry_run),
            ),
        )
        try:
            return orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            return None

    def delete_pods(
        self,
        label_selector: str,
        field_selector: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        what: str | None = None,
        dry_run: bool = False,
    ) -> object:
        """DELETE the matching pods (deletecollection), with the pods' own grace period unless
        one is given; the JSON answer. `what` names the call in errors instead of the selectors
        (a kill's may list 500 ids)."""
        return self._json(
            what or f"delete pods {_selected(label_selector, field_selector)}",
            partial(
                self._core.delete_collection_namespaced_pod,
                self.namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                grace_period_seconds=grace_period_seconds,
                dry_run=_dry(dry_run),
            ),
        )

    def list_pods(
        self,
        label_selector: str,
        field_selector: str | None = None,
        *,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> object:
        """LIST the matching pods; the JSON answer (`resource_version="0"`: from the cache).

        With `limit`, one page of at most that many pods; the next page is asked for with the
        answer's `metadata.continue` as `continue_token` (and no resource version: the token
        carries it)."""
        return parse_json_body(
            self.list_pods_raw(
                label_selector,
                field_selector,
                resource_version=resource_version,
                limit=limit,
                continue_token=continue_token,
            ),
            what=f"list pods {label_selector!r}",
        )

    def list_pods_raw(
        self,
        label_selector: str,
        field_selector: str | None = None,
        *,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> bytes:
        """LIST the matching pods; the body as it came (for a caller that parses it itself)."""
        return self._bytes(
            f"list pods {label_selector!r}",
            partial(
                self._core.list_namespaced_pod,
                self.namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                resource_version=resource_version,
                limit=limit,
                _continue=continue_token,
            ),
        )

    def watch_pods(
        self,
        label_selector: str,
        *,
        resource_version: str | None,
        timeout_seconds: int,
        read_timeout: float,
    ) -> BaseHTTPResponse:
        """Open a watch (with bookmarks) from `resource_version`; the caller reads and releases
        the streaming response. The server ends it after `timeout_seconds`; the read timeout
        guards a connection that went silent."""
        return self._response(
            f"watch pods {label_selector!r}",
            partial(
                self._core.list_namespaced_pod,
                self.namespace,
                label_selector=label_selector,
                watch=True,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                resource_version=resource_version,
            ),
            timeout=(self.connect_timeout, read_timeout),
        )

    def list_events(self, field_selector: str) -> object:
        """The namespace's events that `field_selector` selects, as the list's JSON (the pods'
        warnings, `warnings.py`)."""
        return self._json(
            f"list events {field_selector!r}",
            partial(
                self._core.list_namespaced_event, self.namespace, field_selector=field_selector
            ),
        )

    # --- executors' OnDemand claims (see claims.py) ------------------------------------------

    def create_claim(self, name: str, manifest: Mapping[str, object]) -> object:
        """POST a PersistentVolumeClaim; its JSON as stored."""
        return self._json(
            f"create persistentvolumeclaim {name}",
            partial(
                self._core.create_namespaced_persistent_volume_claim,
                self.namespace,
                cast(V1PersistentVolumeClaim, dict(manifest)),
            ),
        )

    def list_claims(self, label_selector: str) -> object:
        """The matching PersistentVolumeClaims' list JSON."""
        return self._json(
            f"list persistentvolumeclaims {label_selector}",
            partial(
                self._core.list_namespaced_persistent_volume_claim,
                self.namespace,
                label_selector=label_selector,
            ),
        )

    def delete_claims(self, label_selector: str) -> object:
        """DELETE the matching PersistentVolumeClaims (deletecollection); the list JSON."""
        return self._json(
            f"delete persistentvolumeclaims {label_selector}",
            partial(
                self._core.delete_collection_namespaced_persistent_volume_claim,
                self.namespace,
                label_selector=label_selector,
            ),
        )

    # --- the id ledger's ConfigMap (see ledger.py) ----------------------------------------

    def read_config_map(self, name: str) -> object:
        """One ConfigMap's JSON; raises `PodNotFound` (the core's 404) when there is none."""
        return self._json(
            f"get configmap {name}",
            partial(self._core.read_namespaced_config_map, name, self.namespace),
        )

    def create_config_map(
        self, name: str, manifest: Mapping[str, object], *, dry_run: bool = False
    ) -> object:
        """POST a ConfigMap; its JSON as stored (409 `PodConflict` when it exists)."""
        return self._json(
            f"create configmap {name}",
            partial(
                self._core.create_namespaced_config_map,
                self.namespace,
                cast(V1ConfigMap, dict(manifest)),
                dry_run=_dry(dry_run),
            ),
        )

    def patch_config_map(
        self, name: str, patch: Mapping[str, object], *, dry_run: bool = False
    ) -> object:
        """A merge patch of one ConfigMap (a `metadata.resourceVersion` in it is a
        precondition: 409 `PodConflict` when another writer came first); its JSON."""
        return self._json(
            f"patch configmap {name}",
            partial(
                self._core.patch_namespaced_config_map,
                name,
                self.namespace,
                dict(patch),
                dry_run=_dry(dry_run),
            ),
        )

    def patch_pod_json(self, name: str, patch: Mapping[str, object], *, what: str) -> object:
        """A strategic merge patch of one pod; the pod's JSON as stored."""
        return self._json(
            f"{what} of pod {name}",
            partial(self._core.patch_namespaced_pod, name, self.namespace, dict(patch)),
        )

    def resize_pod(self, name: str, patch: Mapping[str, object]) -> None:
        """A strategic merge patch of one pod's `resize` subresource (in-place resize)."""
        self._bytes(
            f"resize of pod {name}",
            partial(self._core.patch_namespaced_pod_resize, name, self.namespace, dict(patch)),
        )

    def list_pod_metrics(self, label_selector: str) -> object:
        """The metrics API's PodMetricsList (metrics.k8s.io/v1beta1) of the matching pods."""
        return self._json(
            f"list pod metrics {label_selector!r}",
            partial(
                self._custom.list_namespaced_custom_object,
                "metrics.k8s.io",
                "v1beta1",
                self.namespace,
                "pods",
                label_selector=label_selector,
            ),
        )

    # --- the machinery -----------------------------------------------------------------------

    def _verb_of(self, call: Callable[..., object]) -> str:
        """The Kubernetes verb of a `partial` over one of the `CoreV1Api` methods used here."""
        func, keywords = (call.func, call.keywords) if isinstance(call, partial) else (call, {})
        verb = self._verbs.get(func, "other")
        return "watch" if verb == "list" and keywords.get("watch") else verb

    def _response(
        self, what: str, call: Callable[..., object], *, timeout: Timeout | None = None
    ) -> BaseHTTPResponse:
        """Make the call for its raw response (the caller must release it)."""
        verb = self._verb_of(call)

        def send() -> tuple[BaseHTTPResponse, int]:
            with _typed_errors(what):
                response = cast(
                    BaseHTTPResponse,
                    call(
                        _preload_content=False,
                        _request_timeout=timeout or (self.connect_timeout, self.request_timeout),
                    ),
                )
            return response, response.status

        return self._guarded(what, verb, send)

    def _post(self, what: str, path: str, body: bytes) -> Answer:
        """POST through the create transport; a non-2xx answer raises its typed error."""
        transport = self._creates
        assert transport is not None

        def send() -> tuple[Answer, int]:
            with _typed_errors(what):
                answer = transport.post(path, body, timeout=self.request_timeout)
            if not 200 <= answer.status <= 299:
                raise error_of_answer(
                    answer.status, answer.body, retry_after=answer.retry_after, what=what
                )
            return answer, answer.status

        return self._guarded(what, "create", send)

    def _guarded(self, what: str, verb: str, send: Callable[[], tuple[T, int]]) -> T:
        """`send` behind the back-off gate and the rate limiter; a 429 with a Retry-After is
        sent again after it (up to `throttle_retries` times); telemetry and the limiter hear of
        every attempt that went out."""
        attempt = 0
        while True:
            try:
                return self._attempt(what, verb, send)
            except ApiThrottled as error:
                wait = error.retry_after
                if (
                    isinstance(error, ApiHeldBack)
                    or wait is None
                    or wait > THROTTLE_WAIT_LIMIT
                    or verb == "watch"
                    or attempt >= self._throttle_retries
                ):
                    raise
                attempt += 1
                self._sleep(wait)

    def _attempt(self, what: str, verb: str, send: Callable[[], tuple[T, int]]) -> T:
        """One attempt; its telemetry, if any, hears of it (verb, outcome, time to the response
        headers; the back-off gate's and the rate limiter's waits not included)."""
        gate = self.backoff
        if gate is not None:
            gate.check(what)  # unsent while the server is failing
        limiter = self.rate_limiter
        # Every call, watches included, waits for its start first.
        waited = limiter.acquire() if limiter is not None else 0.0
        started = time.perf_counter()
        outcome = SUCCESS
        code = 200
        detail = ""
        retry_after: float | None = None
        try:
            result, code = send()
        except PodOperationError as error:
            outcome = type(error).__name__
            code = error.status or 0
            detail = str(error)
            if isinstance(error, ApiThrottled):
                retry_after = error.retry_after
            if gate is not None:
                gate.failed(error)
            raise
        except Exception as error:
            outcome = type(error).__name__
            code = -1  # not an answer: a bug or an interrupt, nothing to learn from
            detail = str(error)
            raise
        finally:
            seconds = time.perf_counter() - started
            if limiter is not None and verb != "watch" and code >= 0:
                limiter.answered(verb=verb, seconds=seconds, status=code, retry_after=retry_after)
            if self._telemetry is not None:
                self._telemetry(
                    ApiCall(
                        verb=verb,
                        outcome=outcome,
                        seconds=seconds,
                        code=max(code, 0),
                        waited=waited,
                        method=HTTP_METHODS.get(verb, "GET"),
                        host=self.host,
                        detail=detail,
                    )
                )
        if gate is not None:
            gate.succeeded()
        return result

    def _bytes(self, what: str, call: Callable[..., object]) -> bytes:
        """Make the call and read the whole body, releasing the connection to the pool."""
        response = self._response(what, call)
        try:
            with _typed_errors(what):
                return response.data
        finally:
            response.release_conn()

    def _json(self, what: str, call: Callable[..., object]) -> object:
        return parse_json_body(self._bytes(what, call), what=what)


def _dry(dry_run: bool) -> str | None:
    return "All" if dry_run else None


def parse_json_body(data: bytes, *, what: str) -> object:
    """The parsed JSON body (None when it is empty); a body that is not JSON is `ApiUnavailable`."""
    if not data:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise ApiUnavailable(f"{what} failed: the answer is not JSON ({error})") from None
