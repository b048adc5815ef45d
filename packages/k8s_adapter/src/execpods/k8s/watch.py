"""The watch source: list, replace the snapshot, then watch from that list's resourceVersion.

Spark's watch simply dies on "too old resource version" and leaves the poll to paper over it. This
loop does what Kubernetes controllers do instead:

1. list the app's executor pods and `replace_snapshot` (level-triggered: a full list repairs
   anything missed), remembering the list's resourceVersion;
2. watch from that version with `timeoutSeconds` and bookmarks, pushing every pod event into the
   store and keeping the latest resourceVersion seen (bookmarks included);
3. when the server ends the stream, watch again from the latest version;
4. on 410 Gone (an HTTP 410 or an ERROR event), or on 504 "Too large resource version" (the server
   has not reached the version: a lagging cache, another API server), forget the version and go
   back to 1, as client-go's reflector does;
5. when told the API server went back in time (`relist`: the poll's full list is older than the
   watch's version, as after a restore of the server's state from a backup), forget the version
   and go back to 1 at once, instead of watching from a version the server will reach only
   later, which would hide every change until it does;
6. on a dropped connection, a timeout, a 5xx or a 429, back off with jitter (at least Retry-After)
   and resume from the latest version. The back-off resets as soon as a list or a watch is
   answered, so an outage long past does not slow the recovery from the next dropped connection;
   and a retry wait ends early once any other API call succeeds again (the gateway's back-off
   gate tells of the recovery), so the watch does not sleep through the end of an outage.

It uses its own loop over the raw response rather than `kubernetes.watch.Watch`, whose reconnects
can spin in a tight loop and which deserialises every event into client models (slow). Any failure
is logged with its cause and retried: nothing kills the thread but `stop()`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import orjson
import urllib3
from execpods.core import (
    ApiThrottled,
    Clock,
    CoreSettings,
    ExecutorLabels,
    ExecutorPod,
    PodOperationError,
    PodSelector,
    SnapshotsWriter,
    SystemClock,
)
from execpods.k8s.backoff import Backoff, EventWaiter, Waiter
from execpods.k8s.convert import pod_from_dict
from execpods.k8s.errors import ResourceExpired, ResourceVersionTooLarge, status_event_error
from execpods.k8s.operations import KubernetesPodOperations
from execpods.k8s.settings import KubernetesSettings
from execpods.k8s.warnings import PodWarnings
from urllib3 import BaseHTTPResponse

logger = logging.getLogger(__name__)

READ_SIZE = 256 * 1024
READ_TIMEOUT_MARGIN = 10.0
STOP_JOIN_TIMEOUT = 0.9
HEALTHY_WATCH = 1.0
REPEAT_WARNING_AFTER = 60.0
"""Seconds between the WARNINGs of one streak of failures (the others are DEBUG)."""
"""A watch open this long (seconds) before it broke counted as working: its back-off resets."""


@dataclasses.dataclass(slots=True)
class WatchStats:
    """Counters for tests and diagnostics (read without a lock: indicative only)."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    expired: int = 0
    too_large: int = 0
    failures: int = 0
    recoveries: int = 0
    """Retry waits cut short because another API call succeeded again."""
    relists: int = 0
    """Fresh lists asked for because the server's versions went back (`relist`)."""


def iter_lines(response: BaseHTTPResponse) -> Iterator[bytes]:
    """The newline-terminated lines of a streaming response, as they arrive."""
    pending = b""
    while True:
        data = response.read1(READ_SIZE)
        if not data:
            break
        if b"\n" not in data:
            pending += data
            continue
        lines = (pending + data).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if line:
                yield line
    if pending.strip():
        yield pending


def interrupt(response: BaseHTTPResponse) -> None:
    """Wake a thread blocked reading `response` (shut the socket down, then close)."""
    try:
        response.shutdown()
    except Exception:
        connection = getattr(response, "connection", None)
        sock = getattr(connection, "sock", None)
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class WatchSource:
    """The core's `SnapshotSource` fed by a list -> watch loop on a daemon thread."""

    def __init__(
        self,
        store: SnapshotsWriter,
        operations: KubernetesPodOperations,
        *,
        settings: KubernetesSettings | None = None,
        core_settings: CoreSettings | None = None,
        clock: Clock | None = None,
        waiter: Waiter | None = None,
        rng: random.Random | None = None,
        warnings: PodWarnings | None = None,
    ) -> None:
        self._store = store
        self._operations = operations
        self._warnings = warnings
        """The pods' warnings the poll reads, attached to every pod an event carries."""
        self._gateway = operations.gateway
        self._settings = settings if settings is not None else KubernetesSettings()
        core = core_settings if core_settings is not None else CoreSettings()
        self._enabled = core.enable_api_watcher
        self._labels: ExecutorLabels = core.labels
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._streak = 0
        """Failures in a row, for the log (`_log_failure`)."""
        self._streak_logged = 0.0
        self._waiter: Waiter = waiter if waiter is not None else EventWaiter()
        self._backoff = Backoff(
            initial=self._settings.backoff_initial,
            maximum=self._settings.backoff_max,
            rng=rng if rng is not None else random.Random(),
        )
        # Re-lists after 410s pace themselves separately: each re-list is answered (which resets
        # `_backoff`), yet a storm of 410s must not become a list-watch loop at full speed.
        self._relist_backoff = Backoff(
            initial=self._settings.backoff_initial,
            maximum=self._settings.backoff_max,
            rng=self._backoff.rng,
        )
        self._lock = threading.Lock()
        self._response: BaseHTTPResponse | None = None
        self._thread: threading.Thread | None = None
        self._started = False
        self._resource_version: str | None = None
        self._relist = False  # `relist` asked for a fresh list before the next watch
        self._failing = False  # between a failed list/watch and the next one answered
        gate = self._gateway.backoff
        if gate is not None:
            gate.on_recovery(self._api_recovered)
        self.stats = WatchStats()

    @property
    def resource_version(self) -> str | None:
        """The latest resourceVersion seen (None before the first list or after a 410)."""
        return self._resource_version

    def start(self, app_id: str) -> None:
        with self._lock:
            if self._started:
                raise RuntimeError("Cannot start the watcher twice.")
            self._started = True
        if not self._enabled:
            logger.info("The executor pod watch is disabled (enableApiWatcher=false).")
            return
        selector = PodSelector.active_executors_of(self._labels, app_id).label_selector()
        logger.debug("Starting watch for pods with labels %s.", selector)
        self._thread = threading.Thread(
            target=self._run, args=(selector,), name=f"execpods-watch-{app_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop, interrupting a blocked watch; returns within about a second."""
        self._waiter.stop()
        with self._lock:
            response = self._response
        if response is not None:
            interrupt(response)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_JOIN_TIMEOUT)
            if thread.is_alive():
                logger.warning("The watch thread did not stop within %ss.", STOP_JOIN_TIMEOUT)

    def relist(self) -> None:
        """List again now and watch from there (any thread): the server's versions went back
        (`PollSource` saw a full list older than this watch's version)."""
        with self._lock:
            self._relist = True
            response = self._response
        self.stats.relists += 1
        if response is not None:
            interrupt(response)
        self._waiter.wake()

    def _api_recovered(self) -> None:
        """Another call succeeded after failures: a retry wait of a failing watch ends now.

        The watch's own answers do not count (they end its failing state themselves)."""
        if self._failing and threading.current_thread() is not self._thread:
            self.stats.recoveries += 1
            self._waiter.wake()

    def _run(self, selector: str) -> None:
        expired_streak = 0
        while not self._waiter.stopped:
            delay: float | None = None
            try:
                with self._lock:
                    if self._relist:
                        self._relist = False
                        self._resource_version = None
                if self._resource_version is None:
                    self._list(selector)
                if self._watch(selector):
                    self._recovered()
                    self._backoff.reset()
                    self._relist_backoff.reset()
                    expired_streak = 0
                else:
                    delay = self._backoff.next_delay()
                    logger.debug("The watch ended without progress; waiting %.2fs.", delay)
            except ResourceExpired as error:
                if isinstance(error, ResourceVersionTooLarge):
                    self.stats.too_large += 1
                    logger.info("Watch resourceVersion not reached (%s); re-listing.", error)
                else:
                    self.stats.expired += 1
                    logger.info("Watch resourceVersion expired (%s); re-listing.", error)
                self._resource_version = None
                expired_streak += 1
                if expired_streak > 1:
                    # A fresh list's version expiring again: do not re-list in a tight loop.
                    delay = self._relist_backoff.next_delay()
            except ApiThrottled as error:
                self._failing = True
                self.stats.failures += 1
                delay = self._backoff.next_delay(error.retry_after)
                self._log_failure("Watch throttled (%s); retrying in %.2fs.", error, delay)
            except PodOperationError as error:
                self._failing = True
                self.stats.failures += 1
                delay = self._backoff.next_delay()
                self._log_failure("Watch failed (%s); retrying in %.2fs.", error, delay)
            except Exception:
                self._failing = True
                self.stats.failures += 1
                delay = self._backoff.next_delay()
                logger.exception("Watch loop error; retrying in %.2fs.", delay)
            if delay is not None and self._waiter.wait(delay):
                break
        logger.debug("The watch of %s stopped.", selector)

    def _log_failure(self, message: str, error: Exception, delay: float) -> None:
        """The first failure of a streak at WARNING, then at most one a minute: a server that
        stays unreachable is said once (and health says NOT_SERVING), not on every retry."""
        now = self._clock.monotonic()
        self._streak += 1
        if self._streak > 1 and now - self._streak_logged < REPEAT_WARNING_AFTER:
            logger.debug(message, error, delay)
            return
        self._streak_logged = now
        if self._streak > 1:
            message = f"{message[:-1]} (failing for {self._streak} attempts)."
        logger.warning(message, error, delay)

    def _recovered(self) -> None:
        if self._streak > 1:
            logger.info("The watch works again after %d failed attempts.", self._streak)
        self._streak = 0

    def _list(self, selector: str) -> None:
        self.stats.lists += 1
        pods, version = self._operations.list_with_version(selector)
        self._recovered()
        self._failing = False
        self._backoff.reset()
        if self._warnings is not None:
            pods = self._warnings.annotate_all(pods)
        self._store.replace_snapshot(pods)
        self._resource_version = version or None
        logger.debug("Listed %d executor pods at resourceVersion %s.", len(pods), version)

    def _open(self, selector: str) -> BaseHTTPResponse:
        timeout = int(self._settings.watch_timeout)  # the setting's rule: at least 1 s
        return self._gateway.watch_pods(
            selector,
            resource_version=self._resource_version,
            timeout_seconds=timeout,
            read_timeout=timeout + READ_TIMEOUT_MARGIN,
        )

    def _watch(self, selector: str) -> bool:
        """One watch request; True when it made progress (events, or ran a fair while)."""
        self.stats.watches += 1
        started = self._clock.monotonic()
        response = self._open(selector)
        self._failing = False
        with self._lock:
            self._response = response
        if self._waiter.stopped:
            interrupt(response)
        received = 0
        ended = False
        try:
            for line in iter_lines(response):
                if received == 0:
                    # The watch works: earlier failures must not lengthen the next wait.
                    self._backoff.reset()
                self._handle(line, selector)
                received += 1
            ended = True
        except (urllib3.exceptions.HTTPError, OSError) as error:
            with self._lock:
                relist = self._relist
            if self._waiter.stopped or relist:  # interrupted on purpose
                return True
            if self._clock.monotonic() - started >= HEALTHY_WATCH:
                self._backoff.reset()  # it was up a fair while before it broke
            raise PodOperationError(
                f"watch of {selector!r} broke: {type(error).__name__}: {error}"
            ) from error
        finally:
            with self._lock:
                self._response = None
            if not ended:
                # Left mid-stream (an ERROR event, a broken connection): the rest of the stream
                # is unread, so this connection must not go back to the pool for reuse.
                response.close()
            response.release_conn()
        elapsed = self._clock.monotonic() - started
        return received > 0 or elapsed >= self._settings.watch_timeout / 2

    def _handle(self, line: bytes, selector: str) -> None:
        try:
            event = orjson.loads(line)
            kind = event["type"]
            obj = event["object"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as error:
            logger.warning("Skipping an unreadable watch event (%s): %.200r", error, line)
            return
        if kind == "ERROR":
            raise status_event_error(obj, what=f"watch of {selector!r}")
        metadata = obj.get("metadata") if isinstance(obj, dict) else None
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if kind == "BOOKMARK":
            self.stats.bookmarks += 1
        else:
            pod = pod_from_dict(obj, executor_id_label=self._labels.executor_id)
            if pod is not None:
                if kind == "DELETED":
                    pod = self._as_deleted(pod)
                elif self._warnings is not None:
                    pod = self._warnings.annotate(pod)
                self.stats.events += 1
                self._store.update_pod(pod)
        if isinstance(version, str) and version:
            self._resource_version = version

    def _as_deleted(self, pod: ExecutorPod) -> ExecutorPod:
        """A DELETED pod is gone, even when its last status still read Running (a force delete
        of a terminating pod) or it was removed without grace (no deletion timestamp)."""
        deleted_at = pod.deletion_timestamp or datetime.fromtimestamp(self._clock.time(), UTC)
        return dataclasses.replace(pod, deletion_timestamp=deleted_at, gone=True)
