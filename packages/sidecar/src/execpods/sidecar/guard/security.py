"""Who may talk to the sidecar: TLS, mutual TLS, a bearer token, and the refusals.

The default stays what a sidecar beside its driver needs: plaintext on loopback or a Unix socket,
which only the pod itself can reach. When the port must be reachable from elsewhere, or the pod is
shared, these settings add, each on its own:

- **TLS** from a certificate and key file (`execpods.sidecar.tls.certFile`/`keyFile`);
- **mutual TLS**: with `execpods.sidecar.tls.clientCaFile` every client must present a certificate
  signed by that CA (the handshake fails otherwise), and `execpods.sidecar.tls.allowedClients`
  may further limit which of those certificates (by common name or DNS/IP subject alternative
  name) may call: another CA-signed client is authenticated but refused, PERMISSION_DENIED;
- **a bearer token** read from a file (`execpods.sidecar.auth.tokenFile`), never from the command
  line, where `ps` would show it: every call must carry `authorization: Bearer <token>`, compared
  in constant time; a missing or wrong one is UNAUTHENTICATED.

Refusals are logged with the method, the peer and the reason, never with the token, and at a
bounded rate (`RefusalLog`: a peer that keeps knocking cannot fill the disk; the refusals not
logged are counted in a metric and summed up in the next line logged). Every kind of
method is guarded, server reflection (a bidirectional stream) included: with the token, grpcurl's
reflection works; without, it is UNAUTHENTICATED like any call. The standard health service is
exempt from the token (its answer is not a secret, and Kubernetes' gRPC probes cannot send
headers); it still sits behind TLS on the main port.

A listener beyond loopback with neither TLS nor a token does not start without
`execpods.sidecar.insecure` (`check_listener`); one beyond loopback with a token but no TLS starts
with a warning (the token crosses the network in the clear); a token that is short, or is not one
line of printable ASCII (what gRPC metadata can carry), is refused (`read_token`).
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from execpods.core import SettingsError
from execpods.core.settingkit import SettingsBase, parse_bool, setting
from execpods.sidecar.guard.templatepolicy import POLICY_KEY, TemplatePolicyLevel, parse_policy

logger = logging.getLogger(__name__)

HEALTH_SERVICE_PREFIX = "/grpc.health.v1.Health/"
AUTHORIZATION = "authorization"
BEARER = "bearer "


def _optional_path(text: str) -> str | None:
    return text.strip() or None


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _if_file(value: str | None) -> str | None:
    if value is None or Path(value).is_file():
        return None
    return "must name a readable file"


@dataclass(frozen=True, slots=True, kw_only=True)
class SecuritySettings(SettingsBase):
    """TLS, mutual TLS and the bearer token of the gRPC port; everything off by default."""

    cert_file: str | None = setting(
        "execpods.sidecar.tls.certFile",
        None,
        "PEM certificate (chain) of the gRPC server; with keyFile it switches TLS on.",
        parse=_optional_path,
        rule=_if_file,
    )
    key_file: str | None = setting(
        "execpods.sidecar.tls.keyFile",
        None,
        "PEM private key of the gRPC server's certificate.",
        parse=_optional_path,
        rule=_if_file,
    )
    client_ca_file: str | None = setting(
        "execpods.sidecar.tls.clientCaFile",
        None,
        "PEM CA certificates: when set, every client must present a certificate they signed "
        "(mutual TLS).",
        parse=_optional_path,
        rule=_if_file,
    )
    allowed_clients: tuple[str, ...] = setting(
        "execpods.sidecar.tls.allowedClients",
        (),
        "Comma-separated client certificate names (common name or subject alternative name) "
        "allowed to call; empty = any certificate the client CA signed. Others get "
        "PERMISSION_DENIED.",
        parse=_names,
        render=",".join,
    )
    token_file: str | None = setting(
        "execpods.sidecar.auth.tokenFile",
        None,
        "File holding the bearer token every call must send (authorization: Bearer <token>); "
        "read at start-up, never taken from the command line.",
        parse=_optional_path,
        rule=_if_file,
    )

    template_policy: TemplatePolicyLevel = setting(  # noqa: RUF009 (an enum: immutable)
        POLICY_KEY,
        TemplatePolicyLevel.BASELINE,
        "What pod templates sent over gRPC (RequestTotal's profiles) may ask for: baseline "
        "(Pod Security Standards baseline: no privileged, host namespaces, hostPath, added "
        "capabilities), restricted (PSS restricted), refuse (no templates over gRPC) or none "
        "(the cluster's admission control decides). Except under none, a template's service "
        "account and namespace must be the sidecar's.",
        parse=parse_policy,
        render=lambda level: level.value,
    )
    insecure: bool = setting(
        "execpods.sidecar.insecure",
        False,
        "Allow a listen address beyond loopback with neither TLS nor a token (anybody who "
        "reaches the port may create pods); without it such a sidecar refuses to start.",
        parse=parse_bool,
    )
    check_permissions: bool = setting(
        "execpods.sidecar.checkPermissions",
        True,
        "At start-up, check that the service account may use every verb on pods the sidecar "
        "needs, and stop with a message naming the missing ones.",
        parse=parse_bool,
    )

    def __post_init__(self) -> None:
        SettingsBase.__post_init__(self)
        if (self.cert_file is None) != (self.key_file is None):
            raise SettingsError(
                "execpods.sidecar.tls.certFile and execpods.sidecar.tls.keyFile go together: "
                "set both to switch TLS on, or neither"
            )
        if self.client_ca_file is not None and self.cert_file is None:
            raise SettingsError(
                "execpods.sidecar.tls.clientCaFile needs TLS: set execpods.sidecar.tls.certFile "
                "and keyFile too"
            )
        if self.allowed_clients and self.client_ca_file is None:
            raise SettingsError(
                "execpods.sidecar.tls.allowedClients needs client certificates: set "
                "execpods.sidecar.tls.clientCaFile too"
            )

    @property
    def tls(self) -> bool:
        return self.cert_file is not None


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise SettingsError(f"{key}: cannot read {path!r}: {error.strerror or error}") from None


class _CertificateFiles:
    """The server's certificate, key and client CA, read again when a file changes.

    gRPC asks (`fetch`) at each new connection; an unchanged set of files answers None (keep the
    current one). cert-manager rotates a Secret's files in place, so a long-running sidecar
    serves the new certificate from the next connection on, without a restart. A file caught
    half-written (unreadable) keeps the current certificate and is retried at the next connection.
    """

    def __init__(self, settings: SecuritySettings) -> None:
        assert settings.cert_file is not None
        assert settings.key_file is not None
        self._files = {
            "execpods.sidecar.tls.certFile": settings.cert_file,
            "execpods.sidecar.tls.keyFile": settings.key_file,
        }
        if settings.client_ca_file is not None:
            self._files["execpods.sidecar.tls.clientCaFile"] = settings.client_ca_file
        self._stamp = self._stamps()
        self.initial = self._configuration()

    def _stamps(self) -> tuple[tuple[int, int], ...]:
        stamps = []
        for path in self._files.values():
            try:
                stat = Path(path).stat()
            except OSError:
                stamps.append((0, 0))
            else:
                stamps.append((stat.st_mtime_ns, stat.st_ino))
        return tuple(stamps)

    def _configuration(self) -> Any:
        blobs = {key: _read(path, key) for key, path in self._files.items()}
        return grpc.ssl_server_certificate_configuration(
            [(blobs["execpods.sidecar.tls.keyFile"], blobs["execpods.sidecar.tls.certFile"])],
            root_certificates=blobs.get("execpods.sidecar.tls.clientCaFile"),
        )

    def fetch(self) -> Any:
        stamp = self._stamps()
        if stamp == self._stamp:
            return None
        try:
            configuration = self._configuration()
        except (SettingsError, grpc.RpcError, ValueError) as error:
            logger.warning("Keeping the current TLS certificate: %s", error)
            return None
        self._stamp = stamp
        logger.info("TLS certificate files changed: serving the new certificate.")
        return configuration


def server_credentials(settings: SecuritySettings) -> Any | None:
    """The server's TLS credentials (mutual when a client CA is set), or None for plaintext;
    the files are read again when they change (`_CertificateFiles`)."""
    if settings.cert_file is None or settings.key_file is None:
        return None
    files = _CertificateFiles(settings)
    return grpc.dynamic_ssl_server_credentials(
        files.initial,
        files.fetch,
        require_client_authentication=settings.client_ca_file is not None,
    )


MIN_TOKEN_LENGTH = 16
"""Shorter tokens are refused: a bearer token is the only thing between a caller and pod creation,
and `openssl rand -hex 32` (deploy/) gives 64 characters."""


def read_token(settings: SecuritySettings) -> bytes | None:
    """The expected token (surrounding whitespace and the file's newline stripped), or None.

    A token shorter than `MIN_TOKEN_LENGTH` is refused; a file that every user of the machine
    may read is accepted with a warning (a Kubernetes Secret volume's default mode is 0644,
    where only the pod's own containers see it)."""
    if settings.token_file is None:
        return None
    key = "execpods.sidecar.auth.tokenFile"
    token = _read(settings.token_file, key).strip()
    if not token:
        raise SettingsError(f"{key}: {settings.token_file!r} is empty")
    if not all(0x21 <= byte <= 0x7E for byte in token):
        what = "more than one line" if b"\n" in token else "characters beyond printable ASCII"
        raise SettingsError(
            f"{key}: the token in {settings.token_file!r} holds {what}: a bearer token must be "
            "one line of printable ASCII without spaces (what a client can send in gRPC "
            "metadata; e.g. openssl rand -hex 32), else every call would be refused"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise SettingsError(
            f"{key}: the token in {settings.token_file!r} has {len(token)} characters; at least "
            f"{MIN_TOKEN_LENGTH} are needed (e.g. openssl rand -hex 32)"
        )
    mode = Path(settings.token_file).stat().st_mode
    if mode & 0o004:
        logger.warning(
            "%s: %r is readable by every user (mode %o); make it 0400 or 0440.",
            key,
            settings.token_file,
            mode & 0o777,
        )
    return token


_LOOPBACK_HOSTS = frozenset({"localhost", "::1", "[::1]"})


def is_loopback_listen(listen: str) -> bool:
    """Whether only this host (or pod) can reach `listen`: a Unix socket or a loopback address."""
    if listen.startswith("unix:"):
        return True
    host = listen.rsplit(":", 1)[0]
    return host in _LOOPBACK_HOSTS or host.startswith("127.")


def check_listener(listen: str, settings: SecuritySettings) -> None:
    """Refuse to serve anonymous callers beyond loopback unless `execpods.sidecar.insecure` says
    so (then warn): whoever reaches the port could create pods under the sidecar's account."""
    if is_loopback_listen(listen) or settings.tls:
        return
    if settings.token_file is not None:
        logger.warning(
            "Serving on %s beyond this host in plaintext with a bearer token: the token crosses "
            "the network in the clear, and anybody who sees the traffic may replay it to create "
            "and delete this application's pods; add TLS (execpods.sidecar.tls.certFile/keyFile) "
            "or listen on 127.0.0.1 or a Unix socket.",
            listen,
        )
        return
    if not settings.insecure:
        raise SettingsError(
            f"execpods.sidecar.listen={listen} is reachable beyond this host, with neither TLS "
            "(execpods.sidecar.tls.certFile/keyFile) nor a token "
            "(execpods.sidecar.auth.tokenFile): set one, listen on 127.0.0.1, or pass --insecure "
            "(execpods.sidecar.insecure=true) to serve anonymous callers anyway"
        )
    logger.warning(
        "Serving anonymous plaintext callers on %s (--insecure): anybody who reaches the port "
        "may create and delete this application's pods.",
        listen,
    )


class Refused(Exception):
    """A call is refused: `code` and a message that never includes a secret."""

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(message)
        self.code = code


class RefusalLog:
    """Refusal log lines at a bounded rate: a burst of `burst` per peer host, then one every
    `interval` seconds per host, and never more than `total_burst` lines in `interval` over all
    hosts (an attacker may vary its source address). A refusal not logged is told to
    `on_unlogged` (a metric) and counted into the next line logged for that host."""

    MAX_HOSTS = 1024
    """Hosts remembered; beyond, the longest quiet is forgotten (its next refusal logs)."""

    def __init__(
        self,
        *,
        burst: int = 5,
        interval: float = 10.0,
        total_burst: int = 20,
        on_unlogged: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst = burst
        self._interval = interval
        self._total_burst = total_burst
        self.on_unlogged = on_unlogged
        self._clock = clock
        self._lock = threading.Lock()
        self._hosts: dict[str, list[float]] = {}  # host -> [tokens, last refill, unlogged]
        self._total = [float(total_burst), clock()]
        self.unlogged = 0

    def refused(self, method: str, peer: str, refused: Refused) -> None:
        host = _peer_host(peer)
        with self._lock:
            skipped = self._take(host)
        if skipped is None:
            self.unlogged += 1
            if self.on_unlogged is not None:
                self.on_unlogged(refused.code.name)
            return
        logger.warning(
            "Refused %s from %s: %s (%s).%s",
            method,
            peer,
            refused.code.name,
            refused,
            f" {skipped} more refusals from {host} were not logged." if skipped else "",
            extra={"reason": refused.code.name},
        )

    def _take(self, host: str) -> int | None:
        """The refusals not logged for `host` since its last line, or None: do not log."""
        now = self._clock()
        rate = 1.0 / self._interval
        tokens, last = self._total
        tokens = min(float(self._total_burst), tokens + (now - last) * rate * self._total_burst)
        state = self._hosts.pop(host, None)
        if state is None:
            state = [float(self._burst), now, 0.0]
            if len(self._hosts) >= self.MAX_HOSTS:
                del self._hosts[next(iter(self._hosts))]
        self._hosts[host] = state  # most recent last
        state[0] = min(float(self._burst), state[0] + (now - state[1]) * rate)
        state[1] = now
        if state[0] < 1.0 or tokens < 1.0:
            state[2] += 1
            self._total = [tokens, now]
            return None
        state[0] -= 1.0
        self._total = [tokens - 1.0, now]
        skipped, state[2] = int(state[2]), 0.0
        return skipped


def _peer_host(peer: str) -> str:
    """`ipv4:10.0.0.7:51234` -> `ipv4:10.0.0.7` (the port changes with every connection)."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rsplit(":", 1)[0]
    return peer


@dataclass(frozen=True, slots=True)
class Gate:
    """The checks one call must pass: the token and the client certificate's name."""

    token: bytes | None
    allowed_clients: frozenset[str]
    log: RefusalLog = field(default_factory=RefusalLog)

    @property
    def active(self) -> bool:
        return self.token is not None or bool(self.allowed_clients)

    def check(self, method: str, metadata: Sequence[tuple[str, Any]], auth: dict[str, Any]) -> None:
        """Raise `Refused` when the call may not go on."""
        if self.token is not None and not method.startswith(HEALTH_SERVICE_PREFIX):
            self._check_token(metadata)
        if self.allowed_clients:
            names = {
                value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                for prop in ("x509_common_name", "x509_subject_alternative_name")
                for value in auth.get(prop, ())
            }
            if not names & self.allowed_clients:
                shown = ", ".join(sorted(names)) or "no name"
                raise Refused(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"the client certificate ({shown}) is not allowed to call this sidecar "
                    "(execpods.sidecar.tls.allowedClients)",
                )

    def _check_token(self, metadata: Sequence[tuple[str, Any]]) -> None:
        values = [value for key, value in metadata if key == AUTHORIZATION]
        if not values:
            raise Refused(
                grpc.StatusCode.UNAUTHENTICATED,
                "missing bearer token: send the metadata 'authorization: Bearer <token>'",
            )
        value = values[0]
        text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        if not text.lower().startswith(BEARER):
            raise Refused(
                grpc.StatusCode.UNAUTHENTICATED,
                "the authorization metadata is not a bearer token ('Bearer <token>')",
            )
        presented = text[len(BEARER) :].strip().encode("latin-1", "replace")
        expected = self.token
        assert expected is not None
        if not hmac.compare_digest(presented, expected):
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, "invalid bearer token")


def _check(gate: Gate, method: str, context: Any) -> Refused | None:
    try:
        gate.check(method, context.invocation_metadata() or (), context.auth_context())
    except Refused as refused:
        gate.log.refused(method, context.peer(), refused)
        return refused
    return None


def _guard_unary_response(
    gate: Gate, method: str, behaviour: Callable[[Any, Any], Awaitable[Any]]
) -> Callable[[Any, Any], Awaitable[Any]]:
    """Unary-unary and stream-unary: the request (or the request iterator) passes through."""

    async def guarded(request: Any, context: Any) -> Any:
        refused = _check(gate, method, context)
        if refused is not None:
            await context.abort(refused.code, str(refused))
        return await behaviour(request, context)

    return guarded


def _guard_stream_response(
    gate: Gate, method: str, behaviour: Callable[[Any, Any], Any]
) -> Callable[[Any, Any], AsyncIterator[Any]]:
    """Unary-stream and stream-stream (server reflection is one): checked before the first
    message either way."""

    async def guarded(request: Any, context: Any) -> AsyncIterator[Any]:
        refused = _check(gate, method, context)
        if refused is not None:
            await context.abort(refused.code, str(refused))
        responses = behaviour(request, context)
        if hasattr(responses, "__aiter__"):
            async for response in responses:
                yield response
        else:  # a synchronous generator (grpcio-reflection's servicer is one)
            for response in responses:
                yield response

    return guarded


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Checks every call against a `Gate` before its handler runs, whatever its kind: unary,
    server streaming, client streaming and bidirectional (server reflection).

    The check runs inside the handler (wrapped here) rather than in the interceptor itself,
    because only a handler's context holds the TLS peer's certificate names.
    """

    def __init__(self, gate: Gate) -> None:
        self._gate = gate

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        gate = self._gate
        kinds = (
            (handler.unary_unary, grpc.unary_unary_rpc_method_handler, _guard_unary_response),
            (handler.stream_unary, grpc.stream_unary_rpc_method_handler, _guard_unary_response),
            (handler.unary_stream, grpc.unary_stream_rpc_method_handler, _guard_stream_response),
            (handler.stream_stream, grpc.stream_stream_rpc_method_handler, _guard_stream_response),
        )
        for behaviour, make, guard in kinds:
            if behaviour is not None:
                return make(
                    guard(gate, method, behaviour),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return None  # a handler with no behaviour: grpc answers UNIMPLEMENTED


def interceptors(
    settings: SecuritySettings, *, log: RefusalLog | None = None
) -> list[AuthInterceptor]:
    """The interceptors the server needs for these settings (none when nothing is checked);
    refusals are logged through `log` (a default `RefusalLog` when None)."""
    gate = Gate(
        token=read_token(settings),
        allowed_clients=frozenset(settings.allowed_clients),
        log=log if log is not None else RefusalLog(),
    )
    return [AuthInterceptor(gate)] if gate.active else []


def describe(settings: SecuritySettings) -> str:
    """How the port is protected, for the start-up log line (never a secret)."""
    parts = ["mutual TLS" if settings.client_ca_file else "TLS"] if settings.tls else ["plaintext"]
    if settings.allowed_clients:
        parts.append(f"clients {', '.join(settings.allowed_clients)}")
    if settings.token_file is not None:
        parts.append("bearer token")
    return ", ".join(parts)
