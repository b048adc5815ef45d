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

Refusals are logged with the method, the peer and the reason, never with the token. The standard
health service is exempt from the token (its answer is not a secret, and Kubernetes' gRPC probes
cannot send headers); it still sits behind TLS on the main port.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from execpods.core import SettingsError
from execpods.core.settingkit import SettingsBase, parse_bool, setting

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


def server_credentials(settings: SecuritySettings) -> Any | None:
    """The server's TLS credentials (mutual when a client CA is set), or None for plaintext."""
    if settings.cert_file is None or settings.key_file is None:
        return None
    cert = _read(settings.cert_file, "execpods.sidecar.tls.certFile")
    key = _read(settings.key_file, "execpods.sidecar.tls.keyFile")
    client_ca = (
        None
        if settings.client_ca_file is None
        else _read(settings.client_ca_file, "execpods.sidecar.tls.clientCaFile")
    )
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def read_token(settings: SecuritySettings) -> bytes | None:
    """The expected token (surrounding whitespace and the file's newline stripped), or None."""
    if settings.token_file is None:
        return None
    token = _read(settings.token_file, "execpods.sidecar.auth.tokenFile").strip()
    if not token:
        raise SettingsError(f"execpods.sidecar.auth.tokenFile: {settings.token_file!r} is empty")
    return token


class Refused(Exception):
    """A call is refused: `code` and a message that never includes a secret."""

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Gate:
    """The checks one call must pass: the token and the client certificate's name."""

    token: bytes | None
    allowed_clients: frozenset[str]

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


def _refuse_log(method: str, context: Any, refused: Refused) -> None:
    logger.warning(
        "Refused %s from %s: %s (%s).",
        method,
        context.peer(),
        refused.code.name,
        refused,
        extra={"reason": refused.code.name},
    )


def _guard_unary(
    gate: Gate, method: str, behaviour: Callable[[Any, Any], Awaitable[Any]]
) -> Callable[[Any, Any], Awaitable[Any]]:
    async def guarded(request: Any, context: Any) -> Any:
        try:
            gate.check(method, context.invocation_metadata() or (), context.auth_context())
        except Refused as refused:
            _refuse_log(method, context, refused)
            await context.abort(refused.code, str(refused))
        return await behaviour(request, context)

    return guarded


def _guard_stream(
    gate: Gate, method: str, behaviour: Callable[[Any, Any], AsyncIterator[Any]]
) -> Callable[[Any, Any], AsyncIterator[Any]]:
    async def guarded(request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            gate.check(method, context.invocation_metadata() or (), context.auth_context())
        except Refused as refused:
            _refuse_log(method, context, refused)
            await context.abort(refused.code, str(refused))
        async for response in behaviour(request, context):
            yield response

    return guarded


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Checks every call against a `Gate` before its handler runs.

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
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _guard_unary(gate, method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _guard_stream(gate, method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        # The contract has no client-streaming calls; refuse rather than let one through unchecked.
        logger.error("Refused %s: a streaming-request method has no authentication guard.", method)
        return None


def interceptors(settings: SecuritySettings) -> list[AuthInterceptor]:
    """The interceptors the server needs for these settings (none when nothing is checked)."""
    gate = Gate(token=read_token(settings), allowed_clients=frozenset(settings.allowed_clients))
    return [AuthInterceptor(gate)] if gate.active else []


def describe(settings: SecuritySettings) -> str:
    """How the port is protected, for the start-up log line (never a secret)."""
    parts = ["mutual TLS" if settings.client_ca_file else "TLS"] if settings.tls else ["plaintext"]
    if settings.allowed_clients:
        parts.append(f"clients {', '.join(settings.allowed_clients)}")
    if settings.token_file is not None:
        parts.append("bearer token")
    return ", ".join(parts)
