"""Simulated nodes for any Kubernetes API server (kwok's idea, kubesim's code).

:class:`NodeSimulator` runs the very node simulation kubesim runs in process
(:class:`~execpods.kubesim.nodes.NodeSimulation`: scheduler, kubelets, graceful termination,
image pulls, crash loops) against a real kube-apiserver over HTTPS: it registers Node objects
with their capacity, lists and watches the pods of one namespace (all, if none is named),
binds pods through the ``binding`` subresource, writes container and pod status through
``pods/status`` (optimistic concurrency, retried on conflict), records core/v1 Events, and
deletes finished pods with grace period 0 as the kubelet does. Only the standard library is used.

Scoping a simulator to namespaces gives each test its own nodes on a shared server. Timing runs
on the wall clock (:class:`~execpods.kubesim.clock.RealClock`) by default; with a
:class:`~execpods.kubesim.clock.VirtualClock` a test moves time itself, as with a deterministic
kubesim: :meth:`NodeSimulator.advance` and :meth:`NodeSimulator.run_until_idle` first wait until
the watch has caught up with the server (:meth:`NodeSimulator.sync`), then run the nodes' due
actions one instant at a time, catching up again after each, so what the nodes do follows from
the API's state alone and not from thread timing.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from execpods.kubesim.affinity import fits_node, node_labels
from execpods.kubesim.clock import Clock, RealClock, VirtualClock
from execpods.kubesim.mounts import VolumeMounts
from execpods.kubesim.nodes import ClusterConfig, NodeSimulation
from execpods.kubesim.pods import rfc3339
from execpods.kubesim.store import Event, Obj

__all__ = ["HttpPort", "NodeSimulator"]

_log = logging.getLogger(__name__)

_Key = tuple[str, str]


class _Http:
    """Requests to one API server as one bearer token; a connection per thread."""

    def __init__(self, url: str, token: str, context: ssl.SSLContext | None) -> None:
        parsed = urllib.parse.urlsplit(url)
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self._tls = parsed.scheme == "https"
        self._context = context
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()

    def connect(self, timeout: float | None = 30.0) -> http.client.HTTPConnection:
        if self._tls:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self._context
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def request(
        self, method: str, path: str, body: object = None, *, content_type: str = ""
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if content_type:
            headers["Content-Type"] = content_type
        for attempt in (0, 1):
            conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self.connect()
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
                continue
            try:
                return response.status, json.loads(raw) if raw else None
            except ValueError:
                return response.status, None
        raise AssertionError("unreachable")

    def stream(self, path: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self.connect(timeout=None)
        conn.request("GET", path, headers=self._headers)
        return conn, conn.getresponse()


class HttpPort:
    """The node simulation's :class:`~execpods.kubesim.nodes.PodPort` over HTTP: reads from
    the watch's cache, writes to the API server."""

    def __init__(self, http: _Http, cache: dict[_Key, Obj], lock: threading.Lock) -> None:
        self._http = http
        self._cache = cache
        self._lock = lock
        #: Events already recorded: (pod uid, reason, message) -> (name, count). A repeat is
        #: counted up on the same Event, as client-go's event correlator does for the kubelet.
        self._events: dict[tuple[str, str, str], tuple[str, int]] = {}

    def find(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._cache.get((namespace, name))

    def _pod_path(self, namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{namespace}/pods/{name}"

    def write_status(
        self, namespace: str, name: str, uid: str, mutate: Callable[[Obj], Obj | None]
    ) -> Obj | None:
        path = self._pod_path(namespace, name)
        for _ in range(8):
            code, pod = self._http.request("GET", path)
            if code != 200 or pod["metadata"].get("uid") != uid:
                return None
            pod.setdefault("status", {})
            changed = mutate(pod)
            if changed is None:
                return None
            code, written = self._http.request("PUT", path + "/status", changed)
            if code == 200:
                with self._lock:  # the watch brings it too; the cache must not go backwards
                    self._remember(written)
                return dict(written)
            if code != 409:
                _log.warning("status write of %s/%s refused (%s): %s", namespace, name, code,
                             (written or {}).get("message"))  # fmt: skip
                return None
        return None

    def _remember(self, pod: Obj) -> None:
        """Keep a write's result, so the nodes' next step reads it even before the watch
        brings it; never for a pod the watch has already seen go (that would resurrect it),
        nor over a newer version."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        known = self._cache.get(key)
        if (
            known is not None
            and known["metadata"].get("uid") == pod["metadata"].get("uid")
            and int(known["metadata"]["resourceVersion"]) <= int(pod["metadata"]["resourceVersion"])
        ):
            self._cache[key] = pod

    def bind(self, namespace: str, name: str, uid: str, node: str, now: str) -> Obj | None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        code, answer = self._http.request(
            "POST", self._pod_path(namespace, name) + "/binding", body
        )
        if code != 201:
            _log.info("binding %s/%s to %s refused (%s): %s", namespace, name, node, code,
                      (answer or {}).get("message"))  # fmt: skip
            return None
        with self._lock:  # the kubelet must see the binding before the watch brings it
            known = self._cache.get((namespace, name))
            if known is not None and known["metadata"].get("uid") == uid:
                self._cache[(namespace, name)] = {
                    **known,
                    "spec": {**known["spec"], "nodeName": node},
                }
        return {"metadata": {"namespace": namespace, "name": name, "uid": uid}}

    def remove(self, namespace: str, name: str, uid: str) -> None:
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        self._http.request("DELETE", self._pod_path(namespace, name), body)

    def record_event(
        self, pod: Obj, *, type_: str, reason: str, message: str, component: str
    ) -> None:
        meta = pod["metadata"]
        now = rfc3339(time.time())
        namespace = meta["namespace"]
        key = (str(meta.get("uid", "")), reason, message)
        with self._lock:
            seen = self._events.get(key)
        if seen is not None:
            name, count = seen
            code, _ = self._http.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/events/{name}",
                {"count": count + 1, "lastTimestamp": now},
                content_type="application/merge-patch+json",
            )
            if code == 200:
                with self._lock:
                    self._events[key] = (name, count + 1)
                return
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        code, answer = self._http.request("POST", f"/api/v1/namespaces/{namespace}/events", body)
        if code != 201:
            _log.info("event %s refused (%s): %s", reason, code, (answer or {}).get("message"))
            return
        with self._lock:
            self._events[key] = (answer["metadata"]["name"], 1)


class NodeSimulator:
    """Simulated nodes driving an API server; a context manager.

    ``simulation`` is the shared :class:`NodeSimulation`: its control methods (``evict``,
    ``oom_kill``, ``terminate``, ``lose_node``, ``pause_kubelet``...) work here as in kubesim.
    """

    def __init__(
        self,
        *,
        url: str,
        token: str = "",
        ca_file: str | None = None,
        namespaces: tuple[str, ...] = (),
        config: ClusterConfig | None = None,
        clock: Clock | None = None,
        keep_nodes: bool = False,
    ) -> None:
        context = ssl.create_default_context(cafile=ca_file) if url.startswith("https") else None
        self._http = _Http(url, token, context)
        #: The namespaces whose pods these nodes run (empty: every namespace).
        self.namespaces = namespaces
        self.config = config or ClusterConfig(
            node_prefix=f"{namespaces[0]}-node-" if namespaces else "sim-node-"
        )
        self.clock = clock or RealClock()
        #: Leave the Node objects when stopping (a harness that brings the same nodes back).
        self.keep_nodes = keep_nodes
        self._busy = 0
        self._handled: dict[_Key, int] = {}
        self._cache: dict[_Key, Obj] = {}
        self._lock = threading.Lock()
        self.port = HttpPort(self._http, self._cache, self._lock)
        self.simulation = NodeSimulation(self.port, self.clock, self.config)
        self.simulation.node_filters.append(fits_node)
        self.simulation.on_node_change = self._register
        # The kubelet waits for the Secrets and ConfigMaps a pod mounts, as in kubesim.
        self.mounts = VolumeMounts(exists=self._object_exists, record=self._failed_mount)
        self.simulation.start_checks.append(self.mounts.start_check)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch_conn: http.client.HTTPConnection | None = None
        self._seen_rv = 0
        self._seen = threading.Condition()

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> NodeSimulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> NodeSimulator:
        for node in self.simulation.node_names():
            self._register(node, True)
        rv = self._relist()
        self.clock.start()
        self._thread = threading.Thread(
            target=self._watch_loop, args=(rv,), name="nodesim-watch", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        conn = self._watch_conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.clock.stop()
        if not self.keep_nodes:
            for node in self.simulation.node_names():
                self._http.request("DELETE", f"/api/v1/nodes/{node}")

    def _object_exists(self, kind: str, namespace: str, name: str) -> bool:
        code, _ = self._http.request("GET", f"/api/v1/namespaces/{namespace}/{kind}s/{name}")
        return code == 200

    def _failed_mount(self, pod: Obj, message: str) -> None:
        self.port.record_event(
            pod, type_="Warning", reason="FailedMount", message=message, component="kubelet"
        )

    # -- nodes ----------------------------------------------------------------------------------

    def _register(self, node: str, ready: bool) -> None:
        """Create the Node object if missing, then write its capacity and Ready condition."""
        c = self.config
        capacity = {
            "pods": str(c.pods_per_node),
            "cpu": c.node_cpu or "1000",
            "memory": c.node_memory or "4Ti",
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": node_labels(node)},
        }
        code, answer = self._http.request("POST", "/api/v1/nodes", body)
        if code not in (201, 409):
            _log.warning("node %s could not be registered (%s): %s", node, code, answer)
            return
        now = rfc3339(self.clock.now())
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "Unknown",
                    "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                    "message": "simulated node" if ready else "Kubelet stopped posting status.",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "192.168.0.1"}],
            "nodeInfo": {
                "kubeletVersion": "simulated",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "simulated://0",
                "kernelVersion": "",
                "osImage": "",
                "kubeProxyVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }
        self._http.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

    # -- the pods' list and watch ---------------------------------------------------------------

    def _pods_path(self) -> str:
        if len(self.namespaces) == 1:
            return f"/api/v1/namespaces/{self.namespaces[0]}/pods"
        return "/api/v1/pods"

    def _ours(self, pod: Obj) -> bool:
        return not self.namespaces or pod["metadata"]["namespace"] in self.namespaces

    def _list(self) -> tuple[int, dict[_Key, Obj]]:
        code, listing = self._http.request("GET", self._pods_path())
        if code != 200:
            raise RuntimeError(f"listing pods failed ({code}): {listing}")
        rv = int(listing["metadata"]["resourceVersion"])
        return rv, {
            (p["metadata"]["namespace"], p["metadata"]["name"]): p
            for p in listing["items"]
            if self._ours(p)
        }

    def _relist(self) -> int:
        """List, and turn the difference from the cache into events (a re-list after 410)."""
        rv, current = self._list()
        events: list[Event] = []
        with self._lock:
            for key, pod in current.items():
                old = self._cache.get(key)
                if old is None or old["metadata"]["uid"] != pod["metadata"]["uid"]:
                    if old is not None:
                        events.append(Event(rv=rv, type="DELETED", old=old, new=old))
                    events.append(Event(rv=rv, type="ADDED", old=None, new=pod))
                elif old["metadata"]["resourceVersion"] != pod["metadata"]["resourceVersion"]:
                    events.append(Event(rv=rv, type="MODIFIED", old=old, new=pod))
                self._cache[key] = pod
            for key in [k for k in self._cache if k not in current]:
                gone = self._cache.pop(key)
                events.append(Event(rv=rv, type="DELETED", old=gone, new=gone))
        for event in events:
            self._dispatch(event)
        self._mark_seen(rv)
        return rv

    def _watch_loop(self, rv: int) -> None:
        while not self._stop.is_set():
            try:
                rv = self._watch_once(rv)
            except Exception:
                if self._stop.is_set():
                    return
                _log.info("pod watch broke; re-listing", exc_info=True)
                self._stop.wait(0.5)
                with contextlib.suppress(Exception):
                    rv = self._relist()

    def _watch_once(self, rv: int) -> int:
        query = urllib.parse.urlencode(
            {
                "watch": "1",
                "resourceVersion": str(rv),
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "240",
            }
        )
        conn, response = self._http.stream(f"{self._pods_path()}?{query}")
        self._watch_conn = conn
        try:
            if response.status != 200:
                response.read()
                return self._relist()
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    return rv
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    _log.info("pod watch ended: %s", obj.get("message"))
                    return self._relist()
                rv = int(obj["metadata"]["resourceVersion"])
                if kind != "BOOKMARK":
                    self._apply(kind, obj, rv)
                self._mark_seen(rv)
            return rv
        finally:
            conn.close()
            self._watch_conn = None

    def _apply(self, kind: str, pod: Obj, rv: int) -> None:
        if not self._ours(pod):
            return
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        with self._lock:
            old = self._cache.get(key)
            if kind == "DELETED":
                self._cache.pop(key, None)
            else:
                known = old is not None and int(old["metadata"]["resourceVersion"]) > rv
                if not known:
                    self._cache[key] = pod
        if kind == "ADDED" and old is not None and old["metadata"]["uid"] == pod["metadata"]["uid"]:
            kind = "MODIFIED"  # a status write we cached before its event arrived
        self._dispatch(Event(rv=rv, type=kind, old=old, new=pod))

    def _dispatch(self, event: Event) -> None:
        with self._seen:
            self._busy += 1
        try:
            self.simulation.on_event(event)
            meta = event.new["metadata"]
            key = (meta["namespace"], meta["name"])
            with self._lock:  # what the nodes have handled, for sync (not what was written)
                if event.type == "DELETED":
                    self._handled.pop(key, None)
                else:
                    rv = int(meta.get("resourceVersion") or 0)
                    self._handled[key] = max(rv, self._handled.get(key, 0))
        except Exception:
            _log.exception("node simulation failed on %s %s", event.type,
                           event.new["metadata"].get("name"))  # fmt: skip
        finally:
            with self._seen:
                self._busy -= 1
                self._seen.notify_all()

    def _mark_seen(self, rv: int) -> None:
        with self._seen:
            self._seen_rv = max(self._seen_rv, rv)
            self._seen.notify_all()

    def wait_seen(self, rv: int, timeout: float = 10.0) -> bool:
        """Wait until the watch has delivered resourceVersion ``rv`` (a test's barrier)."""
        with self._seen:
            return self._seen.wait_for(lambda: self._seen_rv >= rv, timeout)

    # -- moving a virtual clock ----------------------------------------------------------------

    def sync(self, timeout: float = 15.0) -> None:
        """Wait until the nodes have handled every change the server holds for these
        namespaces: each pod of a fresh list was delivered by the watch at that version (or
        later) and acted on, no pod gone from the list is still known, and no event is being
        handled. A barrier between a test's writes and the nodes' next step."""
        deadline = time.monotonic() + timeout
        while True:
            with self._seen:
                self._seen.wait_for(lambda: self._busy == 0, max(0.0, deadline - time.monotonic()))
            _, current = self._list()
            with self._lock:
                handled = dict(self._handled)
            with self._seen:
                idle = self._busy == 0
            # Compared with the events the nodes handled, not with the cache: a status write
            # puts its result in the cache before its event arrives and is acted on.
            caught_up = set(handled) <= set(current) and all(
                handled.get(k, -1) >= int(p["metadata"]["resourceVersion"])
                for k, p in current.items()
            )
            if idle and caught_up:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the node simulator's watch did not catch up in {timeout} s")
            time.sleep(0.01)

    def _virtual(self) -> VirtualClock:
        if not isinstance(self.clock, VirtualClock):
            raise RuntimeError("time can only be moved with a VirtualClock")
        return self.clock

    def advance(self, seconds: float) -> int:
        """Move the virtual clock forward ``seconds``, one due instant at a time, catching up
        with the server before each; returns how many actions ran."""
        clock = self._virtual()
        target = clock.now() + max(0.0, seconds)
        ran = 0
        self.sync()
        while (due := clock.next_due()) is not None and due <= target:
            ran += clock.advance(max(0.0, due - clock.now()))
            self.sync()
        clock.advance(max(0.0, target - clock.now()))
        return ran

    def step(self) -> bool:
        """Run the next due instant's actions; False if none is pending."""
        clock = self._virtual()
        self.sync()
        due = clock.next_due()
        if due is None:
            return False
        clock.advance(max(0.0, due - clock.now()))
        self.sync()
        return True

    def run_until_idle(self, max_seconds: float = 3600.0) -> int:
        """Run the nodes' actions until none is pending (at most ``max_seconds``)."""
        clock = self._virtual()
        limit = clock.now() + max_seconds
        ran = 0
        self.sync()
        while (due := clock.next_due()) is not None and due <= limit:
            ran += clock.advance(max(0.0, due - clock.now()))
            self.sync()
        return ran
