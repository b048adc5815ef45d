"""What the telemetry of API calls is told: the verb, the outcome and the latency of each call.

The gateway reports every call it makes to one optional listener, so metrics and health can follow
the API without the adapter knowing about either, and without wrapping the client library. The
verb is Kubernetes' own (`create`, `list`, `watch`, `deletecollection`...), the method the HTTP
one (`POST`, `GET`...: client-go's metrics label by it), the host the API server's `host:port`,
and the outcome is `success` or the typed error the call failed with (`ApiUnavailable`,
`PodForbidden`...); a watch's latency is the time to its response headers, not the stream's life.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SUCCESS = "success"

HTTP_METHODS = {
    "create": "POST",
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "patch": "PATCH",
    "update": "PUT",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}
"""The HTTP method of each Kubernetes verb."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiCall:
    """One finished API call."""

    verb: str
    outcome: str
    seconds: float
    code: int = 200
    """The HTTP status of the answer (0: none came, the connection failed or timed out)."""
    waited: float = 0.0
    """Seconds the call waited for the rate limiter before it was sent."""
    method: str = ""
    """The HTTP method (`http_method(verb)` when not given)."""
    host: str = ""
    """The API server's `host:port`, as client-go's `host` label."""
    detail: str = ""
    """What went wrong, for a call that failed (the typed error's message)."""

    @property
    def http_method(self) -> str:
        return self.method or HTTP_METHODS.get(self.verb, "GET")

    @property
    def answered(self) -> bool:
        """The API server answered (any HTTP status, a refusal included)."""
        return self.code > 0

    @property
    def succeeded(self) -> bool:
        return self.outcome == SUCCESS

    @property
    def unreachable(self) -> bool:
        """The API server could not be reached or could not answer (not a refusal or a 4xx)."""
        return self.outcome == "ApiUnavailable"


ApiCallListener = Callable[[ApiCall], None]
