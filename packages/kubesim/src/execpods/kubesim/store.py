"""The object store: pods, resourceVersions, a bounded event window and watch fan-out.

Stored objects are never mutated after a commit; writers work on a copy. That lets lists and watch
events share objects by reference, and lets each event be serialised once for every watcher.
All commits happen under one lock, so every watcher sees events in resourceVersion order.
"""

from __future__ import annotations

import builtins
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import orjson
from execpods.kubesim.bodies import Pod, Status, WatchEvent
from execpods.kubesim.errors import ApiError

__all__ = ["Event", "Obj", "PodStore", "SavedState", "Watcher", "copy_obj", "watch_line"]

_log = logging.getLogger(__name__)

Obj = dict[str, Any]
_Json = TypeVar("_Json", bound=Mapping[str, object])
Key = tuple[str, str]
Predicate = Callable[[Obj], bool]


def copy_obj(obj: _Json) -> _Json:
    """A deep copy (orjson round trip: faster than ``copy.deepcopy`` for JSON data)."""
    result: _Json = orjson.loads(orjson.dumps(obj))
    return result


def watch_line(event_type: str, obj: Obj | Pod | Status) -> bytes:
    """One watch event as the stream carries it: a JSON object and a newline."""
    event: WatchEvent = {"type": event_type, "object": cast("Pod | Status", obj)}
    return orjson.dumps(event) + b"\n"


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (meta["namespace"], meta["name"])


@dataclass(slots=True)
class Event:
    """A committed change. ``old`` is None for ADDED; for DELETED ``new`` is the final object."""

    rv: int
    type: str
    old: Obj | None
    new: Obj
    _encoded: dict[str, bytes] = field(default_factory=dict)

    def encode(self, event_type: str) -> bytes:
        """The watch line for this event as ``event_type``, serialised once and shared."""
        data = self._encoded.get(event_type)
        if data is None:
            obj = self.new
            if event_type == "DELETED" and self.type == "MODIFIED" and self.old is not None:
                # An update that moves the object out of a filtered watch: kube-apiserver's
                # watch cache sends the object as it last matched, at the event's version.
                obj = copy_obj(self.old)
                obj["metadata"]["resourceVersion"] = str(self.rv)
            data = watch_line(event_type, obj)
            self._encoded[event_type] = data
        return data


class Watcher:
    """One open watch: a queue the store appends every event to, filtered by its consumer.

    Filtering happens in the consumer so the watcher knows the newest resourceVersion it has
    processed even when nothing matched, which is what a BOOKMARK must carry.
    """

    def __init__(self, *, namespace: str | None, predicate: Predicate, start_rv: int) -> None:
        self.namespace = namespace
        self.predicate = predicate
        self.last_rv = start_rv
        self._after = start_rv  # a watch from a version not reached yet skips events up to it
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[Event] = deque()
        self.closed = False
        self.abrupt = False
        self.error: Status | None = None

    def push(self, event: Event) -> None:
        with self._cond:
            self._queue.append(event)
            self._cond.notify()

    def close(self, *, abrupt: bool = False, error: Status | None = None) -> None:
        """End the watch: ``abrupt`` drops the connection instead of ending the stream cleanly;
        ``error`` (a Status) is sent as an ERROR event first, as for a 410 mid-watch."""
        with self._cond:
            self.closed = True
            self.abrupt = self.abrupt or abrupt
            if error is not None and self.error is None:
                self.error = error
            self._cond.notify_all()

    def wait(self, timeout: float | None) -> list[Event]:
        """Return queued events, waiting up to ``timeout`` for the first one."""
        with self._cond:
            if not self._queue and not self.closed:
                self._cond.wait(timeout)
            batch = list(self._queue)
            self._queue.clear()
            return batch

    def translate(self, event: Event) -> str | None:
        """The event type this watcher must send for ``event``, or None to skip it.

        An update that moves an object out of the selection is a DELETED, into it an ADDED.
        """
        self.last_rv = max(self.last_rv, event.rv)
        if event.rv <= self._after:
            return None
        new = event.new
        if self.namespace is not None and new["metadata"]["namespace"] != self.namespace:
            return None
        if event.type == "ADDED":
            return "ADDED" if self.predicate(new) else None
        if event.type == "DELETED":
            return "DELETED" if self.predicate(event.old or new) else None
        was = event.old is not None and self.predicate(event.old)
        now = self.predicate(new)
        if was and now:
            return "MODIFIED"
        if was:
            return "DELETED"
        return "ADDED" if now else None


@dataclass(frozen=True, slots=True)
class SavedState:
    """A store's objects and resourceVersion at one moment (`PodStore.saved`). Committed objects
    are never mutated, so sharing them is a faithful copy."""

    objects: Mapping[Key, Obj]
    rv: int


def _select(
    state: dict[Key, Obj], namespace: str | None, predicate: Predicate | None
) -> list[tuple[Key, Obj]]:
    return [
        (k, o)
        for k, o in state.items()
        if (namespace is None or k[0] == namespace) and (predicate is None or predicate(o))
    ]


def _in_key_order(matches: list[tuple[Key, Obj]]) -> list[Obj]:
    matches.sort(key=lambda item: item[0])
    return [o for _, o in matches]


class PodStore:
    """Pods keyed by (namespace, name) with a global, monotonically increasing resourceVersion.

    Other namespaced resources (ConfigMaps, Services...) use a store of their own, named by
    ``plural`` in its errors, with its own resourceVersion sequence (versions are opaque and
    only ever compared within one resource type).
    """

    def __init__(self, *, event_window: int = 10_000, plural: str = "pods") -> None:
        self.plural = plural
        self._lock = threading.Condition(threading.Lock())
        self._objects: dict[Key, Obj] = {}
        self._by_namespace: dict[str, dict[Key, Obj]] = {}
        self._rv = 1
        self._log: deque[Event] = deque()
        self._window = max(1, event_window)
        self._compacted = 0  # every event with rv <= this is gone from the log
        self._watchers: set[Watcher] = set()
        self._listeners: list[Callable[[Event], None]] = []
        self._rv_waiters = 0

    # -- reading -------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def compacted_rv(self) -> int:
        return self._compacted

    def get(self, namespace: str, name: str) -> Obj:
        obj = self._objects.get((namespace, name))
        if obj is None:
            raise ApiError.not_found(name, self.plural)
        return obj

    def find(self, namespace: str, name: str) -> Obj | None:
        return self._objects.get((namespace, name))

    def __len__(self) -> int:
        return len(self._objects)

    def list(
        self,
        namespace: str | None = None,
        predicate: Predicate | None = None,
        *,
        exact_rv: int | None = None,
    ) -> tuple[builtins.list[Obj], int]:
        """Matching objects in key order and the list's resourceVersion.

        With ``exact_rv`` the state as of that version is rebuilt from the event window, or 410
        if the window no longer reaches back that far.
        """
        with self._lock:
            rv = self._rv
            state: dict[Key, Obj]
            if exact_rv is None or exact_rv >= rv:
                state = self._current(namespace)
            else:
                if exact_rv < self._compacted:
                    raise ApiError.gone(
                        f"The resourceVersion for the provided list is too old: {exact_rv}"
                    )
                state = dict(self._objects)
                for ev in reversed(self._log):
                    if ev.rv <= exact_rv:
                        break
                    k = key_of(ev.new)
                    if ev.old is None:
                        state.pop(k, None)
                    else:
                        state[k] = ev.old
                rv = exact_rv
            matches = _select(state, namespace, predicate)
        return _in_key_order(matches), rv

    def _current(self, namespace: str | None) -> dict[Key, Obj]:
        # Caller holds the lock.
        return self._objects if namespace is None else self._by_namespace.get(namespace, {})

    def freshness_waiters(self) -> int:
        """Requests now waiting for the store to reach the resourceVersion they asked for."""
        return self._rv_waiters

    def wait_for_resource_version(self, rv: int, timeout: float) -> bool:
        """Block until the store has reached ``rv`` or ``timeout`` seconds passed (real time), as
        the API server's watch cache waits to become fresh enough for a request."""
        with self._lock:
            self._rv_waiters += 1
            try:
                return self._lock.wait_for(lambda: self._rv >= rv, timeout)
            finally:
                self._rv_waiters -= 1

    # -- listeners (the simulated cluster) -----------------------------------------------------

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener`` after every commit, outside the store lock, in the writer's thread."""
        self._listeners.append(listener)

    def _notify(self, event: Event) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                _log.exception("kubesim store listener failed")

    # -- writing -------------------------------------------------------------------------------

    def _commit(self, event_type: str, old: Obj | None, new: Obj) -> Event:
        # Caller holds the lock.
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        event = Event(self._rv, event_type, old, new)
        key = key_of(new)
        if event_type == "DELETED":
            del self._objects[key]
            del self._by_namespace[key[0]][key]
        else:
            self._objects[key] = new
            self._by_namespace.setdefault(key[0], {})[key] = new
        if len(self._log) >= self._window:
            self._compacted = self._log.popleft().rv
        self._log.append(event)
        for w in self._watchers:
            w.push(event)
        if self._rv_waiters:
            self._lock.notify_all()
        return event

    def create(self, obj: Obj) -> Obj:
        """Store a new object (its metadata already complete); 409 if the name is taken."""
        with self._lock:
            if key_of(obj) in self._objects:
                name = obj["metadata"]["name"]
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{self.plural} "{name}" already exists',
                    name=name,
                    kind=self.plural,
                )
            event = self._commit("ADDED", None, obj)
        self._notify(event)
        return obj

    def name_taken(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._objects

    def update(self, namespace: str, name: str, mutate: Callable[[Obj], Obj | None]) -> Obj:
        """Apply ``mutate`` to a copy of the object and commit the result.

        A result that equals the stored object (ignoring resourceVersion) commits nothing: a write
        that changes nothing must not bump the resourceVersion or emit an event.
        """
        with self._lock:
            old = self._objects.get((namespace, name))
            if old is None:
                raise ApiError.not_found(name, self.plural)
            new = mutate(copy_obj(old))
            if new is None:
                return old
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if new == old:
                return old
            event = self._commit("MODIFIED", old, new)
        self._notify(event)
        return new

    def remove(self, namespace: str, name: str, uid: str | None = None) -> Obj | None:
        """Delete the object for good (a DELETED event); None if absent or a different uid."""
        with self._lock:
            old = self._objects.get((namespace, name))
            if old is None or (uid is not None and old["metadata"].get("uid") != uid):
                return None
            new = copy_obj(old)
            event = self._commit("DELETED", old, new)
        self._notify(event)
        return new

    # -- watching ------------------------------------------------------------------------------

    def watch(
        self, namespace: str | None, predicate: Predicate, since: int | None
    ) -> tuple[Watcher, builtins.list[bytes]]:
        """Open a watch and return it with the watch lines to send first.

        Without ``since``: one synthetic ADDED per current matching object. With ``since``: every
        retained event after it, or 410 if the window has been compacted past it.
        """
        matches: builtins.list[tuple[Key, Obj]] = []
        with self._lock:
            if since is None:
                watcher = Watcher(namespace=namespace, predicate=predicate, start_rv=self._rv)
                matches = _select(self._current(namespace), namespace, predicate)
            else:
                if since < self._compacted:
                    raise ApiError.gone(f"too old resource version: {since} ({self._compacted})")
                watcher = Watcher(namespace=namespace, predicate=predicate, start_rv=since)
                for ev in self._log:
                    if ev.rv > since:
                        watcher.push(ev)
            self._watchers.add(watcher)
            self._lock.notify_all()
        # Committed objects are never mutated, so they can be encoded outside the lock.
        return watcher, [watch_line("ADDED", obj) for obj in _in_key_order(matches)]

    def unwatch(self, watcher: Watcher) -> None:
        with self._lock:
            self._watchers.discard(watcher)

    def watcher_count(self) -> int:
        """Open watches: a closed one no longer counts, even while its stream is finishing."""
        return len(self._watchers)

    def wait_for_watchers(self, count: int, timeout: float) -> bool:
        """Block until at least ``count`` watches are open (tests use it to avoid races)."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._watchers) >= count, timeout)

    def close_watchers(self, *, abrupt: bool = False, error: Status | None = None) -> int:
        """End every open watch (a fault, or shutdown); returns how many there were.

        They leave the open set at once rather than when their server threads finish writing,
        so that ``wait_for_watchers`` right after this waits for the client's next watch instead
        of counting one that is already over.
        """
        with self._lock:
            watchers = list(self._watchers)
            self._watchers.clear()
        for w in watchers:
            w.close(abrupt=abrupt, error=error)
        return len(watchers)

    def saved(self) -> SavedState:
        """The objects and the resourceVersion now, as a backup of etcd holds them."""
        with self._lock:
            return SavedState(objects=dict(self._objects), rv=self._rv)

    def restore(self, saved: SavedState) -> None:
        """Go back to `saved`, as an API server whose etcd was restored from a backup: the
        objects and the resourceVersion of then, no event history (every watch or exact list
        from an older version gets 410), and every open watch cut."""
        with self._lock:
            self._objects = dict(saved.objects)
            self._by_namespace = {}
            for key, obj in self._objects.items():
                self._by_namespace.setdefault(key[0], {})[key] = obj
            self._rv = saved.rv
            self._log.clear()
            self._compacted = saved.rv
        self.close_watchers(abrupt=True)

    def compact(self) -> int:
        """Forget every retained event: a watch or exact list from any older version gets 410."""
        with self._lock:
            self._log.clear()
            self._compacted = self._rv
            return self._rv
