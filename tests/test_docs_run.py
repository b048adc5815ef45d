"""The documented commands run as written: the fenced shell blocks marked runnable.

A block whose info string is `bash runnable` (optionally `needs=TOOL`, skipped without that tool
on PATH, or `needs=root`) in README.md or docs/*.md runs here, with `bash -euo pipefail`, from
the repository root, on a PATH *without* `.venv/bin` (as a reader's shell would be: the 127 of a
command that is not there fails the test). The ports the docs show (6443 for kubesim, 50551 for
the sidecar, 9464 for metrics) become free ports, so runs never collide; background jobs a block
starts are stopped with its process group when it ends. Drift between the docs and the commands
fails the check.

A block may name itself (`id=NAME`) and the test that runs it instead (`tested-by=PATH`): that
test runs the same text with `run_block` and checks more than its exit code, so the block is not
run twice; here it is only checked that the test exists and names the block.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
_PORTS = ("6443", "50551", "9464")
_TESTED_SPARK = "4.3.0"


def block_attributes(info: str) -> dict[str, str]:
    """The `key=value` words of a block's info string (`id`, `tested-by`)."""
    return dict(
        w.split("=", 1) for w in info.split()[2:] if "=" in w and not w.startswith("needs=")
    )


def block_by_id(name: str) -> tuple[str, str, list[str]]:
    """(where, script, needs) of the runnable block whose info string says `id=name`."""
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            words = match["info"].split()
            if (
                words[:2] == ["bash", "runnable"]
                and block_attributes(match["info"]).get("id") == name
            ):
                needs = [w.removeprefix("needs=") for w in words[2:] if w.startswith("needs=")]
                return f"{path.relative_to(ROOT)}#{name}", match["body"], needs
    raise LookupError(f"no runnable block with id={name}")


def runnable_blocks() -> list[tuple[str, str, list[str]]]:
    """(where, script, tools needed) of every runnable block, in file order."""
    blocks = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            words = match["info"].split()
            if words[:2] != ["bash", "runnable"]:
                continue
            line = text.count("\n", 0, match.start()) + 1
            needs = [w.removeprefix("needs=") for w in words[2:] if w.startswith("needs=")]
            attributes = block_attributes(match["info"])
            if "tested-by" in attributes:
                needs.append(f"tested-by={attributes['tested-by']}#{attributes.get('id', '')}")
            blocks.append((f"{path.relative_to(ROOT)}:{line}", match["body"], needs))
    return blocks


BLOCKS = runnable_blocks()


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def _environment(tmp: Path) -> dict[str, str]:
    venv = str(ROOT / ".venv")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if not p.startswith(venv)]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return {**env, "PATH": os.pathsep.join(path), "TMPDIR": str(tmp)}


def test_the_readme_and_the_spark_doc_have_runnable_commands() -> None:
    where = {block[0].split(":")[0] for block in BLOCKS}
    assert {"README.md", "docs/spark.md", "docs/sidecar.md"} <= where


def test_the_docs_use_the_default_port() -> None:
    """The sidecar's default port is 50551; 50051 (gRPC's usual example) was a stale default."""
    for path in DOCS:
        assert "50051" not in path.read_text(encoding="utf-8"), path.name


def test_the_docs_name_one_spark_version() -> None:
    """Images and pins in the docs and the example manifests are the tested Spark (pyspark 4.3.0,
    the `spark` dependency group)."""
    for path in [*DOCS, ROOT / "BUILD.md", *sorted((ROOT / "deploy").glob("**/*.yaml"))]:
        text = path.read_text(encoding="utf-8")
        for version in re.findall(r"(?:apache/spark:|pyspark[ =]=*)(\d+\.\d+\.\d+)", text):
            assert version == _TESTED_SPARK, f"{path.name} names Spark {version}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "script", "needs"),
    [pytest.param(*b, id=b[0], marks=[pytest.mark.jvm] if "java" in b[2] else []) for b in BLOCKS],
)
def test_a_documented_command_runs(
    where: str, script: str, needs: list[str], tmp_path: Path
) -> None:
    if tested_by := [n for n in needs if n.startswith("tested-by=")]:
        path, _, name = tested_by[0].removeprefix("tested-by=").partition("#")
        test = ROOT / path
        assert test.is_file(), f"{where}: {path} does not exist"
        assert f'block_by_id("{name}")' in test.read_text(encoding="utf-8"), where
        pytest.skip(f"{where} is run by {path}")
    missing = [tool for tool in needs if not _have(tool)]
    if missing:
        pytest.skip(f"{where} needs {', '.join(missing)}")
    code, output = run_block(script, tmp_path)
    assert code == 0, f"{where} exited {code}:\n{script}\n{output}"


def _have(tool: str) -> bool:
    return os.geteuid() == 0 if tool == "root" else shutil.which(tool) is not None


def missing_needs(needs: list[str]) -> list[str]:
    """What a block needs that this machine lacks (`root` is the user, anything else a tool)."""
    return [tool for tool in needs if not _have(tool)]


def run_block(
    script: str, tmp_path: Path, *, timeout: float = 100, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run a documented block as the docs test does: (exit code, its output)."""
    for port in _PORTS:
        script = re.sub(rf"\b{port}\b", _free_port(), script)
    log = tmp_path / "output.log"
    # Output to a file, not a pipe: background jobs would hold a pipe open after the block ends.
    with (
        log.open("w") as out,
        subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=ROOT,
            env={**_environment(tmp_path), **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ) as process,
    ):
        try:
            process.wait(timeout=timeout)
        finally:
            _stop_group(process.pid)
    return process.returncode, log.read_text()


def _stop_group(pgid: int) -> None:
    """What the block left running in the background: SIGTERM, then SIGKILL after 10 s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)  # bounded: processes of another session cannot be joined
    os.killpg(pgid, signal.SIGKILL)
