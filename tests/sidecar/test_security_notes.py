"""Issue 32 items 2 and 5 (R10): the token file, a plaintext token listener, refusal logs.

On `128638e` a two-line or non-ASCII token file was accepted, and then every call was refused
(gRPC metadata cannot carry it); a token-only plaintext listener on a wildcard address started
without a word; and a peer that kept sending bad tokens got one WARNING line per call (~290 KB/s).
"""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest
from execpods.client import AllocatorClient
from execpods.core import SettingsError
from execpods.sidecar.config.settings import Settings
from execpods.sidecar.guard.security import RefusalLog, Refused, read_token

from tests.sidecar.conftest import SidecarFactory

TOKEN = "0123456789abcdef0123456789abcdef"


def token_settings(tmp_path: Path, content: bytes, **conf: str) -> Settings:
    path = tmp_path / "token"
    path.write_bytes(content)
    path.chmod(0o400)
    return Settings.from_properties(
        {"spark.app.id": "x", "execpods.sidecar.auth.tokenFile": str(path), **conf}
    )


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (f"{TOKEN}\n{TOKEN}\n".encode(), "more than one line"),
        (f"{TOKEN}\r\nsecond".encode(), "more than one line"),
        (f"{TOKEN}é".encode(), "beyond printable ASCII"),
        (f"{TOKEN} {TOKEN}".encode(), "beyond printable ASCII"),
        (f"{TOKEN}\x00".encode(), "beyond printable ASCII"),
    ],
)
def test_a_token_that_metadata_cannot_carry_is_refused_at_start(
    tmp_path: Path, content: bytes, says: str
) -> None:
    settings = token_settings(tmp_path, content)
    with pytest.raises(SettingsError) as caught:
        read_token(settings.security)
    assert "execpods.sidecar.auth.tokenFile" in str(caught.value)
    assert says in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_one_line_with_its_newline_is_a_token(tmp_path: Path) -> None:
    assert read_token(token_settings(tmp_path, f"  {TOKEN}\n".encode()).security) == TOKEN.encode()


@pytest.mark.parametrize("listen", ["0.0.0.0:50551", "[::]:50551", "10.1.2.3:50551"])
def test_a_plaintext_listener_beyond_loopback_with_a_token_warns(
    tmp_path: Path, listen: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        token_settings(tmp_path, TOKEN.encode(), **{"execpods.sidecar.listen": listen})
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(listen in m and "plaintext" in m and "TLS" in m for m in warned), warned


def test_a_loopback_listener_with_a_token_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        token_settings(tmp_path, TOKEN.encode(), **{"execpods.sidecar.listen": "127.0.0.1:0"})
    assert not [r for r in caplog.records if "plaintext" in r.getMessage()]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_refusal_logs_are_bounded_per_peer_and_overall(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    unlogged: list[str] = []
    log = RefusalLog(
        burst=5, interval=10.0, total_burst=20, on_unlogged=unlogged.append, clock=clock
    )
    refused = Refused(grpc.StatusCode.UNAUTHENTICATED, "invalid bearer token")
    with caplog.at_level(logging.WARNING):
        for _ in range(1000):  # one peer, many connections (the port changes)
            clock.now += 0.001
            log.refused("/m", f"ipv4:10.0.0.1:{40000 + int(clock.now * 1000)}", refused)
    assert len(caplog.records) == 5
    assert len(unlogged) == 995
    assert log.unlogged == 995
    caplog.clear()
    clock.now += 10.0  # a line again, saying how many were left out
    with caplog.at_level(logging.WARNING):
        log.refused("/m", "ipv4:10.0.0.1:1", refused)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "995 more refusals from ipv4:10.0.0.1 were not logged" in line
    caplog.clear()
    clock.now += 100.0
    with caplog.at_level(logging.WARNING):  # many peers: at most 20 lines in 10 s overall
        for host in range(500):
            log.refused("/m", f"ipv4:10.0.{host // 250}.{host % 250}:1", refused)
    assert len(caplog.records) == 20


def test_a_peer_hammering_with_a_bad_token_gets_a_few_lines_and_a_metric(
    tmp_path: Path, make_sidecar: SidecarFactory, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n", encoding="utf-8")
    path.chmod(0o400)
    conf = {
        "execpods.sidecar.auth.tokenFile": str(path),
        "execpods.sidecar.metrics.enabled": "true",
        "execpods.sidecar.metrics.host": "127.0.0.1",
        "execpods.sidecar.metrics.port": "0",
    }
    sidecar = make_sidecar("hammered", conf=conf)
    with (
        caplog.at_level(logging.WARNING),
        AllocatorClient(sidecar.address, token="wrong-token-0000000000") as client,
    ):
        for _ in range(200):
            with pytest.raises(grpc.RpcError):
                client.request_total(0)
    refusals = [r for r in caplog.records if r.getMessage().startswith("Refused ")]
    assert len(refusals) <= 5
    metrics = sidecar.server.ops.metrics
    assert metrics is not None
    value = metrics.registry.get_sample_value(
        "execpods_refusals_unlogged_total", {"code": "UNAUTHENTICATED"}
    )
    assert value == 200 - len(refusals)
