"""The HTTP/1.1 server: routing, keep-alive, Status errors and chunked watch streams.

Built on ``http.server`` so the simulator needs nothing but the standard library and orjson. Each
connection gets a thread (a watch holds its connection); the server keeps track of them so that
``close`` can end every connection and join every thread, leaving nothing behind.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
from execpods.kubesim import kindroutes, resources
from execpods.kubesim.apf import FairQueues
from execpods.kubesim.applykinds import NamespaceApi
from execpods.kubesim.control import AnswerThen
from execpods.kubesim.errors import ApiError
from execpods.kubesim.faults import RequestRecord
from execpods.kubesim.kindroutes import json_body
from execpods.kubesim.mediatypes import check_media_types
from execpods.kubesim.objects import ObjectApi
from execpods.kubesim.params import parse_bool
from execpods.kubesim.watchserve import WatchSource, serve_watch

__all__ = ["ApiServer", "ServerContext", "parse_bool"]

_log = logging.getLogger(__name__)

_POD = re.compile(
    r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+)(/status|/eviction|/binding|/resize)?)?$"
)
_METRICS = re.compile(r"^/apis/metrics\.k8s\.io/v1beta1/namespaces/([^/]+)/pods(?:/([^/]+))?$")
_WATCH = re.compile(r"^/api/v1/watch/(?:namespaces/([^/]+)/)?pods(?:/([^/]+))?$")

ControlHandler = Callable[[str, str, Any], tuple[int, Any]]


@functools.lru_cache(maxsize=2)
def _http_date(second: int) -> str:
    """The Date header for a second, formatted once per second however many requests come."""
    return email.utils.formatdate(second, usegmt=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerContext:
    """What the request handlers need: the API implementations and the control endpoint.

    ``objects`` serves the resources other than pods, by plural name; ``websocket_watch``
    False answers WebSocket watch upgrades with 503, the refusal that makes fabric8 fall back
    to an HTTP watch (as against a proxy that cannot pass WebSockets).
    """

    api: resources.PodApi
    control: ControlHandler
    bookmark_interval: float
    objects: dict[str, ObjectApi] = field(default_factory=dict)
    websocket_watch: bool = True
    apf: FairQueues | None = None
    namespaces: NamespaceApi | None = None


def _verb(method: str, path: str, query: dict[str, str]) -> str:
    """The Kubernetes verb of a request, for the request log's counters."""
    if path in resources.DISCOVERY_PATHS:
        return "discovery"
    parts = path.rstrip("/").split("/")
    collection = (len(parts) == 4 and parts[:3] == ["", "api", "v1"]) or (
        len(parts) == 6 and parts[3] == "namespaces"
    )
    if method == "GET":
        if "/watch/" in path or parse_bool(query.get("watch"), "watch"):
            return "watch"
        return "list" if collection else "get"
    if method == "DELETE":
        return "deletecollection" if collection else "delete"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "other")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "kubesim"
    sys_version = ""
    server: ApiServer
    _headers: dict[str, str]
    # The request being served, until it is in the request log: method, path, query, verb, start.
    _pending: tuple[str, str, dict[str, str], str, float, bytes] | None = None

    # Silence the default stderr access log; requests go to the request log and DEBUG logging.
    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s - %s", self.address_string(), format % args)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass

    def handle_one_request(self) -> None:
        """Read one request and dispatch it.

        Replaces the base class's parsing, which builds an ``email.message.Message`` per request
        and cost about a third of a simple request's time; the reply semantics stay the same.
        """
        try:
            line = self.rfile.readline(65537)
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        if not line:
            self.close_connection = True
            return
        self.raw_requestline = line
        text = line.decode("latin-1")
        parts = text.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/") or len(line) > 65536:
            self._reject(400, "malformed request line")
            return
        method, target, version = parts
        headers: dict[str, str] = {}
        while True:
            raw = self.rfile.readline(65537)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, sep, value = raw.decode("latin-1").partition(":")
            if not sep or len(headers) >= 200:
                self._reject(400, "malformed or too many headers")
                return
            headers[name.strip().lower()] = value.strip()
        self.command, self.path, self.request_version = method, target, version
        self.requestline = text.rstrip("\r\n")
        self._headers = headers
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            self.close_connection = connection != "keep-alive"
        else:
            self.close_connection = connection == "close"
        if headers.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            try:
                self._read_body()
            except ApiError:
                self.close_connection = True
            self._send_error(ApiError(405, "MethodNotAllowed", f"{method} is not supported"))
            return
        self._dispatch(method)

    def _reject(self, code: int, message: str) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self._send_error(ApiError(code, "BadRequest", message))

    def authorize(self, method: str, path: str) -> None:
        """A second authorization of this request as another verb (an apply that creates is
        also a create, for kube-apiserver's RBAC)."""
        self.server.context.api.authorizer.check(method, path, {}, self.header("Authorization"))

    def header(self, name: str, default: str = "") -> str:
        """A request header by case-insensitive name."""
        return self._headers.get(name.lower(), default)

    @staticmethod
    def _date() -> str:
        return _http_date(int(time.time()))

    # -- plumbing ------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        """The whole request body; a body whose framing cannot be read is a 400 (ApiError)."""
        try:
            return self._read_framed_body()
        except ValueError:
            raise ApiError.bad_request("malformed request body length or chunking") from None

    def _read_framed_body(self) -> bytes:
        length = self.header("Content-Length")
        if length:
            size = int(length)
            if size < 0:
                raise ValueError(length)
            return self.rfile.read(size)
        if self.header("Transfer-Encoding").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size < 0:
                    raise ValueError(size)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts)
        return b""

    def _send(
        self,
        code: int,
        body: bytes,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        lines = [
            f"HTTP/1.1 {code} {self.responses.get(code, ('',))[0]}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            f"Date: {self._date()}",
        ]
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self._log_once(code)
        self.wfile.write(head + body)

    def _send_error(self, err: ApiError) -> None:
        """Answer with ``err`` as a v1 Status (and its headers, such as Retry-After)."""
        self._send(err.code, orjson.dumps(err.status()), headers=err.headers)

    def _log_once(self, status: int) -> None:
        """Put this request in the request log, once, before its answer goes out.

        A client that has read the answer must find the request in the log (tests assert on it
        right after a call), so the record cannot wait until after the write.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return
        method, path, query, verb, started, body = pending
        elapsed = time.perf_counter() - started
        self.server.context.api.log.add(
            RequestRecord(
                method=method,
                path=path,
                query=query,
                status=status,
                verb=verb,
                duration=elapsed,
                user_agent=self.header("User-Agent"),
                body=body or None,
            )
        )
        _log.debug("%s %s -> %d (%.1f ms)", method, self.path, status, elapsed * 1000)

    def _dispatch(self, method: str) -> None:
        started = time.perf_counter()
        self._pending = None
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        try:
            body = self._read_body()
        except ApiError as err:
            # The rest of the stream cannot be framed: answer, then end the connection.
            self._reject(err.code, err.message)
            return
        except OSError:
            self.close_connection = True
            return
        ctx = self.server.context
        if path.startswith("/_kubesim/"):
            self._control(method, path, body, ctx)
            return
        verb = _verb(method, path, query)
        self._pending = (method, path, query, verb, started, body)
        status = 500
        try:
            with self._seat(ctx, verb):
                status = self._api(method, path, query, body, ctx)
        except ApiError as err:
            status = err.code
            self._send_error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            _log.exception("kubesim: internal error serving %s %s", method, self.path)
            self._send_error(ApiError(500, "InternalError", "Internal error occurred in kubesim"))
        self._log_once(status)  # when no answer went out (the client hung up)

    def _seat(self, ctx: ServerContext, verb: str) -> contextlib.AbstractContextManager[float]:
        """An APF seat for the request (watches and discovery hold none), or a 429."""
        if ctx.apf is None or not ctx.apf.enabled or verb in ("watch", "discovery"):
            return contextlib.nullcontext(0.0)
        # The flow: who is asking (the bearer token), else the client's User-Agent.
        flow = self.header("Authorization") or self.header("User-Agent") or "anonymous"
        return ctx.apf.seat(flow)

    def _control(self, method: str, path: str, body: bytes, ctx: ServerContext) -> None:
        try:
            data = orjson.loads(body) if body.strip() else {}
            code, result = ctx.control(method, path[len("/_kubesim/") :], data)
            if isinstance(result, AnswerThen):
                self._send(code, orjson.dumps(result.reply))
                threading.Thread(target=result.then, name=result.name, daemon=True).start()
                return
            self._send(code, orjson.dumps(result))
        except ApiError as err:
            self._send_error(err)
        except RuntimeError as exc:
            self._send_error(ApiError(409, "Conflict", f"kubesim control: {exc}"))
        except (orjson.JSONDecodeError, TypeError, ValueError, KeyError) as exc:
            self._send_error(ApiError.bad_request(f"kubesim control: {exc}"))

    # -- API routing ---------------------------------------------------------------------------

    def _api(
        self, method: str, path: str, query: dict[str, str], body: bytes, ctx: ServerContext
    ) -> int:
        api = ctx.api
        api.authorizer.check(method, path, query, self.header("Authorization"))
        check_media_types(
            content_type=self.header("Content-Type"), accept=self.header("Accept"), body=body
        )
        kindroutes.check_namespace(method, path, ctx.namespaces, self.header("Content-Type"))
        found = kindroutes.discovery(method, path, ctx.objects, self.server.server_address)
        if found is not None:
            return self.reply(200, found)
        code = kindroutes.serve(
            self, method, path, query, body, objects=ctx.objects, namespaces=ctx.namespaces
        )
        if code is not None:
            return code
        namespace: str | None
        name: str | None
        subresource = False
        watch_path = False
        if m := _METRICS.match(path):
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {path}")
            return self.reply(200, api.pod_metrics(m.group(1), query, name=m.group(2)))
        if path == "/api/v1/pods":
            namespace, name = None, None
        elif m := _POD.match(path):
            namespace, name, subresource = m.group(1), m.group(2), m.group(3) is not None
            if m.group(3) == "/eviction":
                api.faults.check_request()
                if method != "POST":
                    raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {path}")
                return self.reply(201, api.evict(m.group(1), m.group(2), json_body(body)))
            if m.group(3) == "/binding":
                if method != "POST":
                    raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {path}")
                return self.reply(201, api.bind(m.group(1), m.group(2), json_body(body)))
            if m.group(3) == "/resize" and method in ("PATCH", "PUT"):
                api.faults.check_request()
                ctype = self.header("Content-Type")
                return self.reply(
                    200,
                    api.resize(
                        m.group(1), m.group(2), ctype, json_body(body), patch=method == "PATCH"
                    ),
                )
        elif m := _WATCH.match(path):
            namespace, name, watch_path = m.group(1), m.group(2), True
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if api.faults.latency:
            time.sleep(api.faults.latency)
        api.faults.check_request()
        if name is None or watch_path:
            if method == "GET":
                if self.watched(namespace, name, query, api, watch_path=watch_path):
                    return 200
                return self.reply(200, self._maybe_table(api.list(namespace, query), api))
            if namespace is None:
                raise ApiError(405, "MethodNotAllowed", f"{method} needs a namespace")
            if method == "POST":
                return self.reply(201, api.create(namespace, json_body(body)))
            if method == "DELETE":
                options = json_body(body) if body.strip() else {}
                return self.reply(200, api.delete_collection(namespace, query, options))
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        assert namespace is not None
        if method == "GET":
            return self.reply(200, self._maybe_table(api.get(namespace, name), api))
        if method == "PUT":
            return self.reply(
                200, api.replace(namespace, name, json_body(body), status=subresource)
            )
        if method == "PATCH":
            ctype = self.header("Content-Type")
            return self.reply(
                200, api.patch(namespace, name, ctype, json_body(body), status=subresource)
            )
        if method == "DELETE" and not subresource:
            options = json_body(body) if body.strip() else {}
            return self.reply(200, api.delete(namespace, name, query, options))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")

    def watched(
        self,
        namespace: str | None,
        name: str | None,
        query: dict[str, str],
        api: WatchSource,
        *,
        watch_path: bool,
    ) -> bool:
        """Serve a watch if the GET asks for one (`?watch=true` or the legacy /watch/ path);
        a watch of one named object is, as in kube-apiserver, a field selector on its name."""
        if not (watch_path or parse_bool(query.get("watch"), "watch")):
            return False
        if name is not None:
            sel = query.get("fieldSelector")
            extra = f"metadata.name={name}"
            query["fieldSelector"] = f"{sel},{extra}" if sel else extra
        self._watch(namespace, query, api)
        return True

    def _watch(self, namespace: str | None, query: dict[str, str], api: WatchSource) -> None:
        ctx = self.server.context
        serve_watch(
            self,
            namespace,
            query,
            api,
            bookmark_interval=ctx.bookmark_interval,
            websocket_watch=ctx.websocket_watch,
        )

    def log_once(self, status: int) -> None:
        self._log_once(status)

    def http_date(self) -> str:
        return self._date()

    def _maybe_table(self, result: Any, api: resources.PodApi) -> Any:
        """kubectl asks for a Table (``Accept: ...;as=Table;...``) to print its columns."""
        if "as=Table" in self.header("Accept"):
            return resources.as_table(result, api.cluster.clock.now())
        return result

    def reply(self, code: int, obj: Any) -> int:
        self._send(code, orjson.dumps(obj))
        return code


class ApiServer(ThreadingHTTPServer):
    """A threading HTTP server that tracks its connections so ``close`` leaves nothing behind."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, host: str, port: int, context: ServerContext) -> None:
        self.context = context
        self._conn_lock = threading.Lock()
        self._conns: dict[threading.Thread, socket.socket] = {}
        self._serial = 0
        self._serve_thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._serve_thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="kubesim-server",
            daemon=True,
        )
        self._serve_thread.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conn_lock:
            self._serial += 1
            thread = threading.Thread(
                target=self._serve_connection,
                args=(request, client_address),
                name=f"kubesim-conn-{self._serial}",
                daemon=True,
            )
            self._conns[thread] = request
        thread.start()

    def _serve_connection(self, request: socket.socket, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except (ConnectionError, OSError):
            pass
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self._conn_lock:
                self._conns.pop(threading.current_thread(), None)

    def connection_count(self) -> int:
        with self._conn_lock:
            return len(self._conns)

    def close(self, timeout: float = 10.0) -> None:
        """Stop accepting, end every connection (watches included) and join every thread."""
        if self._serve_thread is not None:
            self.shutdown()
            self._serve_thread.join(timeout)
            self._serve_thread = None
        self.server_close()
        self.context.api.store.close_watchers()
        for api in self.context.objects.values():
            api.store.close_watchers()
        with self._conn_lock:
            conns = list(self._conns.items())
        for _, sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for thread, _ in conns:
            thread.join(max(0.0, deadline - time.monotonic()))
