"""Fault injection and the request log.

Faults are what make the simulator useful for testing a controller: expired resourceVersions,
dropped watches, server errors, throttling, slow requests and admission failures. Periods are
measured on the simulator's clock, so in deterministic mode a test decides when an outage ends.
The request log lets tests assert on the calls made and count API load.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter, deque
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass

from execpods.kubesim.clock import Clock
from execpods.kubesim.errors import ApiError

__all__ = ["Faults", "RequestLog", "RequestRecord"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord:
    """One served API request (control-endpoint calls are not recorded). ``at`` is the
    simulator's clock (virtual or real) when it was logged, as its answer went out."""

    method: str
    path: str
    query: dict[str, str]
    status: int
    verb: str
    duration: float
    at: float = 0.0
    user_agent: str = ""
    """The client's User-Agent header (who asked: Spark's fabric8, the sidecar's client...)."""
    body: bytes | None = None
    """The request body as sent, kept only while the log keeps bodies (`RequestLog.keep_bodies`):
    a side-by-side comparison reads what each client wrote, other runs keep no copies."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class RequestLog:
    """A bounded log of requests plus unbounded counters per Kubernetes verb."""

    def __init__(self, maxlen: int = 100_000, *, clock: Clock | None = None) -> None:
        self._clock = clock
        self.keep_bodies = False
        """Whether records keep their request bodies (off: benchmarks log thousands of pods)."""
        self._lock = threading.Lock()
        self._records: deque[RequestRecord] = deque(maxlen=maxlen)
        self._verbs: Counter[str] = Counter()

    def add(self, record: RequestRecord) -> None:
        if self._clock is not None:
            record = dataclasses.replace(record, at=self._clock.now())
        if not self.keep_bodies and record.body is not None:
            record = dataclasses.replace(record, body=None)
        with self._lock:
            self._records.append(record)
            self._verbs[record.verb] += 1

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def counts(self) -> dict[str, int]:
        """Requests per verb (get, list, watch, create, update, patch, delete, ...)."""
        with self._lock:
            return dict(self._verbs)

    def peak_rate(self, window: float = 1.0, verbs: Collection[str] | None = None) -> float:
        """The most requests (of ``verbs``, default all) logged within any ``window`` seconds
        of clock time, per second: what a client-side rate limit must keep under its QPS."""
        if window <= 0:
            raise ValueError("window must be > 0")
        with self._lock:
            times = sorted(r.at for r in self._records if verbs is None or r.verb in verbs)
        best, first = 0, 0
        for last, t in enumerate(times):
            while t - times[first] >= window:
                first += 1
            best = max(best, last - first + 1)
        return best / window

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
            self._verbs.clear()


@dataclass(slots=True, kw_only=True)
class _DeleteDenial:
    """Deletes of pods whose labels include `labels` fail with `code` (`count` more times, or
    for ever when None), as an admission webhook or a ValidatingAdmissionPolicy denies them."""

    labels: dict[str, str]
    code: int
    message: str
    count: int | None


class Faults:
    """The currently armed faults; the server consults it on every API request."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.keep_bodies = False
        """Whether records keep their request bodies (off: benchmarks log thousands of pods)."""
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Disarm every fault."""
        with self._lock:
            self._expire_next = 0
            self._expire_until: float | None = None
            self._throttle_until: float | None = None
            self._error_code = 0
            self._error_until: float | None = None
            self._error_count: int | None = None
            self._bursts: tuple[int, float, float, float] | None = None
            self._throttle_count = 0
            self._retry_after = 1
            self._latency = 0.0
            self._reject_code = 0
            self._reject_count = 0
            self._reject_message = ""
            self._deny_deletes: list[_DeleteDenial] = []

    @property
    def latency(self) -> float:
        """Seconds added to every API request (real time, even under the virtual clock)."""
        return self._latency

    def set_latency(self, seconds: float) -> None:
        with self._lock:
            self._latency = max(0.0, seconds)

    def expire_next(self, count: int = 1, *, seconds: float | None = None) -> None:
        """Answer the next ``count`` list or watch requests with 410 Gone, or with ``seconds``
        every list and watch for that long (a storm of 410s: nothing a client resumes from is
        still there)."""
        with self._lock:
            if seconds is None:
                self._expire_next += count
            else:
                self._expire_until = self._clock.now() + seconds

    def take_expire(self) -> bool:
        with self._lock:
            if self._within(self._expire_until):
                return True
            if self._expire_next > 0:
                self._expire_next -= 1
                return True
            return False

    def fail_requests(
        self, code: int = 503, *, seconds: float | None = None, count: int | None = None
    ) -> None:
        """Answer API requests with ``code`` (500 or 503) for ``seconds`` of clock time or for
        ``count`` requests, whichever ends first (forever if neither is given)."""
        if code not in (500, 503):
            raise ValueError("fail_requests takes 500 or 503")
        with self._lock:
            self._error_code = code
            self._error_until = None if seconds is None else self._clock.now() + seconds
            self._error_count = count

    def fail_in_bursts(self, code: int = 503, *, every: float, lasting: float) -> None:
        """Answer API requests with ``code`` (500 or 503) for ``lasting`` seconds out of every
        ``every``, from now until the faults are cleared: a server (or what is behind it: etcd,
        a webhook) that fails in short bursts and recovers on its own."""
        if code not in (500, 503):
            raise ValueError("fail_in_bursts takes 500 or 503")
        if not 0 < lasting < every:
            raise ValueError("a burst must last more than 0 s and less than its period")
        with self._lock:
            self._bursts = (code, every, lasting, self._clock.now())

    def _in_burst(self) -> int:
        """The code of the burst failing requests now, else 0. Caller holds the lock."""
        if self._bursts is None:
            return 0
        code, every, lasting, since = self._bursts
        return code if (self._clock.now() - since) % every < lasting else 0

    def throttle(
        self, count: int = 1, *, retry_after: int = 1, seconds: float | None = None
    ) -> None:
        """Answer the next ``count`` API requests with 429 and a Retry-After header, or with
        ``seconds`` every API request for that long of clock time."""
        with self._lock:
            if seconds is None:
                self._throttle_count += count
            else:
                self._throttle_until = self._clock.now() + seconds
            self._retry_after = retry_after

    def _within(self, until: float | None) -> bool:
        """Whether a fault armed for a period (ending at ``until`` on the clock) is on now."""
        return until is not None and self._clock.now() < until

    def _throttled(self) -> bool:
        # Caller holds the lock.
        if self._within(self._throttle_until):
            return True
        if self._throttle_count > 0:
            self._throttle_count -= 1
            return True
        return False

    def reject_creates(self, code: int = 403, *, count: int = 1, message: str = "") -> None:
        """Fail the next ``count`` creates in admission: 403 forbidden or 422 quota exceeded."""
        if code not in (403, 422):
            raise ValueError("reject_creates takes 403 or 422")
        with self._lock:
            self._reject_code = code
            self._reject_count = count
            self._reject_message = message

    def deny_deletes(
        self,
        labels: Mapping[str, str],
        *,
        code: int = 403,
        message: str = "",
        count: int | None = None,
    ) -> None:
        """Deny deletes of the pods whose labels include ``labels`` (all pods with ``{}``): 403
        as an admission webhook denies them, 400 or 422 as a policy may; the next ``count`` such
        deletes, or every one until the faults are cleared. A deletecollection deletes the
        other matches and then fails with the denial, as the API server's does."""
        if code not in (400, 403, 422):
            raise ValueError("deny_deletes takes 400, 403 or 422")
        with self._lock:
            self._deny_deletes.append(
                _DeleteDenial(labels=dict(labels), code=code, message=message, count=count)
            )

    def check_delete(self, name: str, labels: Mapping[str, str]) -> None:
        """Raise the denial armed for deleting this pod, if any."""
        with self._lock:
            for rule in self._deny_deletes:
                if rule.count == 0 or any(labels.get(k) != v for k, v in rule.labels.items()):
                    continue
                if rule.count is not None:
                    rule.count -= 1
                code, message = rule.code, rule.message
                break
            else:
                return
        text = message or "deleting executor pods is not allowed by policy"
        if code == 403:
            raise ApiError(
                403,
                "Forbidden",
                f'admission webhook "deny-delete.kubesim.execpods.io" denied the request: {text}',
                name=name,
            )
        if code == 422:
            raise ApiError(422, "Invalid", f'pods "{name}" is invalid: {text}', name=name)
        raise ApiError(400, "BadRequest", f'pods "{name}" cannot be deleted: {text}', name=name)

    def check_request(self) -> None:
        """Raise the error an armed throttle or outage imposes on this request, if any."""
        with self._lock:
            if self._throttled():
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                    retry_after=self._retry_after,
                )
            burst = self._in_burst()
            if burst:
                code = burst
            elif not self._error_code:
                return
            else:
                code = self._armed_error()
                if not code:
                    return
        if code == 503:
            raise ApiError(503, "ServiceUnavailable", "the server is currently unable to handle it")
        raise ApiError(500, "InternalError", "Internal error occurred: injected by kubesim")

    def _armed_error(self) -> int:
        """The code of the armed outage for this request (counting it down), else 0. Caller
        holds the lock."""
        if self._error_until is not None and self._clock.now() >= self._error_until:
            self._error_code = 0
            return 0
        if self._error_count is not None:
            if self._error_count <= 0:
                self._error_code = 0
                return 0
            self._error_count -= 1
        return self._error_code

    def check_create(self, name: str) -> None:
        """Raise an admission failure for this create if one is armed."""
        with self._lock:
            if self._reject_count <= 0:
                return
            self._reject_count -= 1
            code, message = self._reject_code, self._reject_message
        if code == 403:
            raise ApiError(
                403,
                "Forbidden",
                f'pods "{name}" is forbidden: {message or "denied by admission webhook"}',
                name=name,
            )
        raise ApiError(
            422,
            "Invalid",
            f'pods "{name}" is forbidden: {message or "exceeded quota: compute-resources"}',
            name=name,
            causes=[{"reason": "FieldValueForbidden", "message": "exceeded quota", "field": ""}],
        )
