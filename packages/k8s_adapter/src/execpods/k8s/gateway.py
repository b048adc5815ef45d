"""The one place every API call goes through: timeouts, raw responses, typed errors.

Every call is made with `_preload_content=False`, so the client never builds its (slow) models: the
caller gets the urllib3 response and parses the bytes with orjson. Every call gets a timeout, and
every failure leaves here as one of the core's `PodOperationError`s (see `errors.py`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, cast

import orjson
from execpods.core import ApiUnavailable
from execpods.k8s.clienttypes import KubernetesApiClient
from execpods.k8s.errors import map_error
from execpods.k8s.observe import SUCCESS, ApiCall, ApiObserver, verb_of
from kubernetes import client as k8s_client
from urllib3 import BaseHTTPResponse

DEFAULT_CONNECT_TIMEOUT = 5.0

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


class ApiGateway:
    """A namespace-bound `CoreV1Api` whose calls return raw responses or parsed JSON."""

    def __init__(
        self,
        api_client: KubernetesApiClient,
        *,
        namespace: str,
        request_timeout: float = 30.0,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        observer: ApiObserver | None = None,
    ) -> None:
        self._api_client = api_client
        self._observer = observer
        self._core: Any = k8s_client.CoreV1Api(api_client)
        self.namespace = namespace
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout

    @property
    def api_client(self) -> KubernetesApiClient:
        return self._api_client

    def request(
        self,
        what: str,
        method: str,
        *args: object,
        timeout: Timeout | None = None,
        **kwargs: object,
    ) -> BaseHTTPResponse:
        """Call `CoreV1Api.<method>` and return the raw response (the caller must release it)."""
        call = getattr(self._core, method)
        started = time.perf_counter()
        outcome = SUCCESS
        try:
            with _typed_errors(what):
                response = call(
                    *args,
                    _preload_content=False,
                    _request_timeout=timeout or (self.connect_timeout, self.request_timeout),
                    **kwargs,
                )
        except Exception as error:
            outcome = type(error).__name__
            raise
        finally:
            if self._observer is not None:
                seconds = time.perf_counter() - started
                self._observer(
                    ApiCall(verb=verb_of(method, kwargs), outcome=outcome, seconds=seconds)
                )
        return cast(BaseHTTPResponse, response)

    def request_json(
        self,
        what: str,
        method: str,
        *args: object,
        timeout: Timeout | None = None,
        **kwargs: object,
    ) -> object:
        """Call and parse the whole JSON body (None when it is empty)."""
        data = self.request_bytes(what, method, *args, timeout=timeout, **kwargs)
        if not data:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as error:
            raise ApiUnavailable(f"{what} failed: the answer is not JSON ({error})") from None

    def request_bytes(
        self,
        what: str,
        method: str,
        *args: object,
        timeout: Timeout | None = None,
        **kwargs: object,
    ) -> bytes:
        """Call and read the whole body, releasing the connection to the pool."""
        response = self.request(what, method, *args, timeout=timeout, **kwargs)
        try:
            with _typed_errors(what):
                return response.data
        finally:
            response.release_conn()
