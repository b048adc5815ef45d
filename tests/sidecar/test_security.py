"""TLS, mutual TLS and the bearer token, end to end with certificates the test makes (trustme).

Every case is a real sidecar on the simulator and a real gRPC channel from the Python client: what
a driver would see, including the refusals' codes and messages, and what the sidecar logs about
them (never the token).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from execpods.client import AllocatorClient, ExecutorState, TlsOptions, read_token_file
from execpods.core import SettingsError
from execpods.sidecar.config.settings import Settings
from grpc_health.v1 import health_pb2

from tests.sidecar.conftest import SidecarFactory
from tests.sidecar.test_observability import health_status

TOKEN = "s3cr3t-token-0123456789abcdef"


class Pki:
    """A CA, a server certificate for 127.0.0.1, and client certificates, as files."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = trustme.CA()
        self.ca_file = folder / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.server_cert = folder / "server.pem"
        self.server_key = folder / "server.key"
        server.private_key_pem.write_to_path(str(self.server_key))
        for index, blob in enumerate(server.cert_chain_pems):
            blob.write_to_path(str(self.server_cert), append=index > 0)

    def client(self, name: str, ca: trustme.CA | None = None) -> TlsOptions:
        """TLS options of a client holding a certificate for `name` (signed by `ca`)."""
        issued = (ca or self.ca).issue_cert(name, common_name=name)
        return TlsOptions(
            root_certificates=self.ca.cert_pem.bytes(),
            certificate_chain=b"".join(blob.bytes() for blob in issued.cert_chain_pems),
            private_key=issued.private_key_pem.bytes(),
        )

    def server_only(self) -> TlsOptions:
        return TlsOptions(root_certificates=self.ca.cert_pem.bytes())

    def tls_conf(self, *, mutual: bool = False) -> dict[str, str]:
        conf = {
            "execpods.sidecar.tls.certFile": str(self.server_cert),
            "execpods.sidecar.tls.keyFile": str(self.server_key),
        }
        if mutual:
            conf["execpods.sidecar.tls.clientCaFile"] = str(self.ca_file)
        return conf


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n", encoding="utf-8")
    return path


def _code(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error = caught.value
    return error.code(), error.details() or ""


def _request(address: str, **options: object) -> Callable[[], object]:
    def call() -> object:
        with AllocatorClient(address, timeout=5.0, **options) as client:  # type: ignore[arg-type]
            return client.request_total(0)

    return call


def test_tls_serves_clients_that_trust_the_ca_and_no_plaintext(
    pki: Pki, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("tls", conf=pki.tls_conf())
    with AllocatorClient(sidecar.address, tls=pki.server_only()) as client:
        assert client.request_total(2).total == 2
        with client.stream_snapshots(batch_interval_ms=50) as stream:
            for update in stream:
                if update.latest is not None and update.latest.count(ExecutorState.RUNNING) == 2:
                    break
    code, _ = _code(_request(sidecar.address))  # plaintext to a TLS port
    assert code == grpc.StatusCode.UNAVAILABLE
    stranger = TlsOptions(root_certificates=trustme.CA().cert_pem.bytes())
    code, _ = _code(_request(sidecar.address, tls=stranger))  # a server it cannot verify
    assert code == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_needs_a_client_certificate_the_ca_signed(
    pki: Pki, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("mtls", conf=pki.tls_conf(mutual=True))
    with AllocatorClient(sidecar.address, tls=pki.client("driver")) as client:
        assert client.request_total(1).total == 1
    code, _ = _code(_request(sidecar.address, tls=pki.server_only()))  # no certificate
    assert code == grpc.StatusCode.UNAVAILABLE
    forged = pki.client("driver", ca=trustme.CA())  # the right name, another CA
    code, _ = _code(_request(sidecar.address, tls=forged))
    assert code == grpc.StatusCode.UNAVAILABLE


def test_allowed_clients_refuses_other_certificates_with_permission_denied(
    pki: Pki, make_sidecar: SidecarFactory, caplog: pytest.LogCaptureFixture
) -> None:
    conf = {**pki.tls_conf(mutual=True), "execpods.sidecar.tls.allowedClients": "driver, other"}
    sidecar = make_sidecar("allowed", conf=conf)
    with AllocatorClient(sidecar.address, tls=pki.client("driver")) as client:
        assert client.request_total(0).total == 0
    with caplog.at_level(logging.WARNING, logger="execpods.sidecar.guard.security"):
        code, message = _code(_request(sidecar.address, tls=pki.client("intruder")))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "intruder" in message
    assert "allowedClients" in message
    assert any("PERMISSION_DENIED" in r.getMessage() for r in caplog.records)


def test_a_bearer_token_is_required_and_refusals_never_log_it(
    token_file: Path, make_sidecar: SidecarFactory, caplog: pytest.LogCaptureFixture
) -> None:
    sidecar = make_sidecar("token", conf={"execpods.sidecar.auth.tokenFile": str(token_file)})
    with caplog.at_level(logging.WARNING, logger="execpods.sidecar.guard.security"):
        code, message = _code(_request(sidecar.address))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert "missing bearer token" in message
        wrong = "not-the-token-987"
        code, message = _code(_request(sidecar.address, token=wrong))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert message == "invalid bearer token"
        almost = TOKEN[:-1]  # a prefix of the real token is still wrong
        code, _ = _code(_request(sidecar.address, token=almost))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        with AllocatorClient(sidecar.address) as bad_stream:
            code, _ = _code(lambda: next(iter(bad_stream.stream_snapshots())))
            assert code == grpc.StatusCode.UNAUTHENTICATED
        with AllocatorClient(sidecar.address, token=wrong) as bad_stream:
            code, _ = _code(lambda: next(iter(bad_stream.stream_snapshots())))
            assert code == grpc.StatusCode.UNAUTHENTICATED
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged.count("UNAUTHENTICATED") == 5
    assert TOKEN not in logged
    assert TOKEN[:-1] not in logged
    assert wrong not in logged
    with AllocatorClient(sidecar.address, token=read_token_file(token_file)) as client:
        assert client.request_total(1).total == 1
        with client.stream_snapshots(batch_interval_ms=50) as stream:
            for update in stream:
                if update.latest is not None and update.latest.count(ExecutorState.RUNNING) == 1:
                    break
    # Health answers without the token (probes cannot send one); it reveals no more than that.
    assert health_status(sidecar.address) == health_pb2.HealthCheckResponse.SERVING


def test_tls_with_client_certificates_and_a_token_together(
    pki: Pki, token_file: Path, make_sidecar: SidecarFactory
) -> None:
    conf = {**pki.tls_conf(mutual=True), "execpods.sidecar.auth.tokenFile": str(token_file)}
    sidecar = make_sidecar("all", conf=conf)
    with AllocatorClient(sidecar.address, tls=pki.client("driver"), token=TOKEN) as client:
        assert client.request_total(1).total == 1
    code, _ = _code(_request(sidecar.address, tls=pki.client("driver")))
    assert code == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    ("conf", "named"),
    [
        ({"execpods.sidecar.tls.certFile": "CERT"}, "execpods.sidecar.tls.keyFile"),
        ({"execpods.sidecar.tls.clientCaFile": "CERT"}, "execpods.sidecar.tls.clientCaFile"),
        ({"execpods.sidecar.tls.allowedClients": "a"}, "execpods.sidecar.tls.clientCaFile"),
        ({"execpods.sidecar.auth.tokenFile": "/nonexistent/token"}, "tokenFile"),
    ],
)
def test_inconsistent_security_settings_fail_naming_the_property(
    pki: Pki, conf: dict[str, str], named: str
) -> None:
    properties = {"spark.app.id": "x"}
    properties.update({k: str(pki.server_cert) if v == "CERT" else v for k, v in conf.items()})
    with pytest.raises(SettingsError, match=named.replace(".", r"\.")):
        Settings.from_properties(properties)


def test_an_empty_token_file_is_refused_at_start(tmp_path: Path) -> None:
    from execpods.sidecar.guard.security import read_token

    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="utf-8")
    settings = Settings.from_properties(
        {"spark.app.id": "x", "execpods.sidecar.auth.tokenFile": str(empty)}
    )
    with pytest.raises(SettingsError, match="is empty"):
        read_token(settings.security)


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call, as grpcurl's -H does."""

    def __init__(self, token: str) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),)

    def _details(self, details: Any) -> Any:
        return details._replace(metadata=tuple(details.metadata or ()) + self._metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def test_server_reflection_lists_the_services_with_the_token_and_refuses_without(
    token_file: Path, make_sidecar: SidecarFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Reflection is a bidirectional stream: the guard covers every method kind, so grpcurl
    (here grpcio-reflection's client) works with the token and gets UNAUTHENTICATED without."""
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    sidecar = make_sidecar("reflect", conf={"execpods.sidecar.auth.tokenFile": str(token_file)})
    with grpc.insecure_channel(sidecar.address) as plain:
        channel = grpc.intercept_channel(plain, _Bearer(TOKEN))
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {"execpods.v1.ExecutorAllocator", "grpc.health.v1.Health"} <= services
    with (
        caplog.at_level(logging.WARNING),
        grpc.insecure_channel(sidecar.address) as anonymous,
        pytest.raises(grpc.RpcError) as caught,
    ):
        ProtoReflectionDescriptorDatabase(anonymous).get_services()
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_rotated_server_certificate_is_served_to_new_connections(
    pki: Pki, make_sidecar: SidecarFactory, tmp_path: Path
) -> None:
    """cert-manager rewrites the Secret's files in place: the next connection gets the new
    certificate without a restart (a client trusting only the new CA connects)."""
    sidecar = make_sidecar("rotate", conf=pki.tls_conf())
    with AllocatorClient(sidecar.address, tls=pki.server_only()) as client:
        assert client.request_total(0).total == 0
    (tmp_path / "next").mkdir()
    rotated = Pki(tmp_path / "next")
    pki.server_key.write_bytes(rotated.server_key.read_bytes())
    pki.server_cert.write_bytes(rotated.server_cert.read_bytes())
    with AllocatorClient(sidecar.address, tls=rotated.server_only()) as client:
        assert client.request_total(0).total == 0
    code, _ = _code(_request(sidecar.address, tls=pki.server_only()))  # the old CA no longer
    assert code == grpc.StatusCode.UNAVAILABLE
