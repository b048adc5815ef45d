"""How a client proves itself to a secured sidecar: TLS (optionally mutual) and a bearer token.

    tls = TlsOptions.from_files(ca_file="ca.pem", cert_file="client.pem", key_file="client.key")
    client = AllocatorClient("sidecar:50551", tls=tls, token=read_token_file("/run/token"))

`ca_file` verifies the sidecar's certificate (the system's roots when omitted); `cert_file` and
`key_file` present a client certificate (mutual TLS). The token goes with every call as
`authorization: Bearer <token>`; read it from a file rather than a command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from execpods.v1 import allocator_pb2_grpc as pb_grpc


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsOptions:
    """PEM bytes for a TLS channel; `server_name` overrides the name checked in the certificate."""

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ValueError("a client certificate needs its private key, and the other way round")

    @classmethod
    def from_files(
        cls,
        *,
        ca_file: str | Path | None = None,
        cert_file: str | Path | None = None,
        key_file: str | Path | None = None,
        server_name: str | None = None,
    ) -> TlsOptions:
        def read(path: str | Path | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return cls(
            root_certificates=read(ca_file),
            certificate_chain=read(cert_file),
            private_key=read(key_file),
            server_name=server_name,
        )

    def credentials(self) -> Any:
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        if self.server_name is None:
            return []
        return [("grpc.ssl_target_name_override", self.server_name)]


class Connection:
    """What both clients hold: the channel (TLS or not), its stub, the per-call metadata."""

    def __init__(
        self,
        target: str,
        *,
        timeout: float,
        tls: TlsOptions | None,
        token: str | None,
        channels: Any,
    ) -> None:
        """`channels` is `grpc` or `grpc.aio`: the module whose channels this client uses."""
        self._timeout = timeout
        self._metadata = call_metadata(token)
        self._channel: Any = (
            channels.insecure_channel(target)
            if tls is None
            else channels.secure_channel(target, tls.credentials(), options=tls.channel_options())
        )
        self._stub = pb_grpc.ExecutorAllocatorStub(self._channel)


def read_token_file(path: str | Path) -> str:
    """A bearer token from a file, without the surrounding whitespace; an empty file is an error."""
    token = Path(path).read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"the token file {str(path)!r} is empty")
    return token


def call_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    """The metadata every call carries (None without a token)."""
    return None if token is None else (("authorization", f"Bearer {token}"),)
