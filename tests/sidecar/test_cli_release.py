"""What an operator meets first: JSON logs that stay JSON, `--version`, flags in any place, pipes.

The JSON test is a real TLS start-up hit by a plaintext client: gRPC core then writes its own
"Handshake failed" line from C++, past Python's logging, and that line (and every other one the
process writes, stdout included) must still be one JSON object carrying the app id.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import grpc
import pytest
import trustme
from execpods.kubesim import KubeSim
from execpods.sidecar.cli import main

from tests.sidecar.conftest import wait_for
from tests.sidecar.serve_process import SIDECAR, serve

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _tls_files(folder: Path) -> tuple[Path, Path]:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = folder / "server.pem", folder / "server.key"
    issued.private_key_pem.write_to_path(str(key))
    for index, blob in enumerate(issued.cert_chain_pems):
        blob.write_to_path(str(cert), append=index > 0)
    return cert, key


def test_every_line_of_a_tls_start_up_with_a_plaintext_client_is_json(
    sim: KubeSim, tmp_path: Path
) -> None:
    cert, key = _tls_files(tmp_path)
    stderr_path = tmp_path / "stderr.log"
    with (
        stderr_path.open("w") as stderr,
        serve(
            sim,
            "tls-json",
            "--image",
            "spark:4.3.0",
            "--conf",
            f"execpods.sidecar.tls.certFile={cert}",
            "--conf",
            f"execpods.sidecar.tls.keyFile={key}",
            options=("--log-format", "json"),
            stderr=stderr,
        ) as (process, address),
    ):
        # A plaintext channel to the TLS port: it never becomes ready.
        with grpc.insecure_channel(address) as channel, pytest.raises(grpc.FutureTimeoutError):
            grpc.channel_ready_future(channel).result(timeout=1.5)
        wait_for(lambda: "Handshake failed" in stderr_path.read_text(), what="gRPC core's line")
        process.terminate()
        assert process.wait(30) == 0
        assert process.stdout is not None
        stdout = process.stdout.read()
    text = stderr_path.read_text()
    lines = [*text.splitlines(), *stdout.splitlines()]
    records = [json.loads(line) for line in lines]  # every line, or this fails
    assert len(records) > 5
    assert all(record["app_id"] == "tls-json" for record in records)
    native = [r for r in records if r["logger"] == "grpc.core"]
    assert native, text
    assert "Handshake failed" in native[0]["message"]
    assert native[0]["source"].startswith("ssl_transport_security")


@pytest.mark.parametrize(
    ("program", "name"),
    [("execpods-sidecar", "execpods-sidecar"), ("kubesim", "kubesim"), ("execpods-demo", "demo")],
)
def test_every_command_line_tool_says_its_version(program: str, name: str) -> None:
    completed = subprocess.run(
        [str(BIN / program), "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip().endswith(f" {VERSION}"), completed.stdout
    assert name in completed.stdout


def test_the_log_flags_work_after_the_command_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`serve --log-format json` as much as `--log-format json serve`; a bad value still exits
    2; and a flag before the command is not reset by the command's parser."""
    argv = ["serve", "--app-id", "a", "--api-url", "http://127.0.0.1:1", "--listen", "nonsense"]
    assert main([*argv, "--log-format", "yaml"], environ={}) == 2
    assert "--log-format 'yaml'" in capsys.readouterr().err
    assert main([*argv, "--log-level", "LOUD"], environ={}) == 2
    assert "--log-level 'LOUD'" in capsys.readouterr().err
    assert main(["--log-level", "LOUD", *argv], environ={}) == 2
    assert "--log-level 'LOUD'" in capsys.readouterr().err


def test_settings_piped_into_head_ends_quietly() -> None:
    completed = subprocess.run(
        f"'{SIDECAR}' settings --log-level WARNING | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0
    assert completed.stdout.count("\n") == 1
    assert completed.stderr == "", completed.stderr
