"""Where a watch starts: the rules kube-apiserver applies before it streams anything.

A watch without a version starts from the current state (a synthetic ADDED per match); from a
version, strictly after it (410 once the event window no longer reaches back); from a version
the server has not reached, after it too: kube-apiserver accepts such a watch and only a client
that asked for the initial events (``sendInitialEvents``, the streaming list) is told "too large
resource version", after the store had ``fresh_timeout`` seconds to catch up. Every resource's
API that offers these few members can be watched this way.
"""

from __future__ import annotations

from typing import Protocol

from execpods.kubesim.bodies import Status, StatusCause
from execpods.kubesim.errors import ApiError
from execpods.kubesim.faults import Faults
from execpods.kubesim.params import parse_bool
from execpods.kubesim.store import Obj, PodStore, Predicate, Watcher, watch_line

__all__ = [
    "INITIAL_EVENTS_END",
    "WatchStarter",
    "bookmark_line",
    "open_watch",
    "send_initial_events",
    "wait_fresh",
]

#: The annotation on the BOOKMARK that ends a watch's initial events (``sendInitialEvents``).
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class WatchStarter(Protocol):
    """What a resource's API offers a watch: its store, faults, selectors, versions and the
    BOOKMARK line of its kind."""

    store: PodStore
    faults: Faults
    fresh_timeout: float

    def predicate(self, query: dict[str, str]) -> Predicate: ...
    def watch_start(self, query: dict[str, str]) -> int | None: ...
    def bookmark(self, rv: int, *, initial_events_end: bool = False) -> bytes: ...


def bookmark_line(rv: int, *, kind: str = "Pod", initial_events_end: bool = False) -> bytes:
    """A BOOKMARK event: an object of the watched kind carrying only a resourceVersion."""
    meta: Obj = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return watch_line("BOOKMARK", {"kind": kind, "apiVersion": "v1", "metadata": meta})


def wait_fresh(store: PodStore, rv: int, timeout: float) -> None:
    """Wait (at most ``timeout`` real seconds) until the store reaches ``rv``; 504 "too large
    resource version" if it does not, as kube-apiserver's watch cache answers."""
    if rv > store.resource_version and not store.wait_for_resource_version(rv, timeout):
        raise ApiError.too_large_resource_version(rv, store.resource_version)


def _forbidden(field: str, message: str) -> StatusCause:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {message}", "field": field}


def send_initial_events(query: dict[str, str]) -> bool | None:
    """The watch's ``sendInitialEvents`` (None when unset), checked as the API server's
    ListOptions validation does (422 for a combination it forbids)."""
    text = query.get("sendInitialEvents")
    match = query.get("resourceVersionMatch", "")
    problems: list[StatusCause] = []
    value = None if text is None else parse_bool(text, "sendInitialEvents")
    if value is None and match:
        problems.append(
            _forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )
        )
    if value is not None and match != "NotOlderThan":
        problems.append(
            _forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )
        )
    bookmarks = parse_bool(query.get("allowWatchBookmarks"), "allowWatchBookmarks")
    if value is not None and not bookmarks:
        problems.append(
            _forbidden(
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true",
            )
        )
    if problems:
        text = ", ".join(f"{c['field']}: {c['message']}" for c in problems)
        raise ApiError(
            422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {text}', causes=problems
        )
    return value


def open_watch(
    api: WatchStarter, namespace: str | None, query: dict[str, str]
) -> tuple[Watcher | None, list[bytes], Status | None]:
    """Open a watch: the watcher and the lines to send first, or instead the Status an ERROR
    event carries (410 Expired; too large resource version). Bad parameters raise, an HTTP
    error before the stream starts. Initial events end with a BOOKMARK annotated
    ``k8s.io/initial-events-end``."""
    predicate = api.predicate(query)
    since = api.watch_start(query)
    initial = send_initial_events(query)
    if api.faults.take_expire():
        gone = ApiError.gone("too old resource version (injected by kubesim)")
        return None, [], gone.status()
    store = api.store
    try:
        if initial:
            if since is not None:
                wait_fresh(store, since, api.fresh_timeout)
            watcher, lines = store.watch(namespace, predicate, None)
            lines.append(api.bookmark(watcher.last_rv, initial_events_end=True))
            return watcher, lines, None
        if initial is False and since is None:
            since = store.resource_version  # from now on, without the current state
        watcher, lines = store.watch(namespace, predicate, since)
    except ApiError as err:
        return None, [], err.status()
    return watcher, lines, None
