"""The Spark plugin names the contract's fields through constants generated from the proto, so a
renamed field fails the plugin's build (issue 28), not only the real-Spark tests."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from execpods.devtools.java_contract import render
from execpods.devtools.spark_plugin import PROTO_ROOT, build, descriptor_set

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "integrations/spark/src/generated/java/io/execpods/spark/Contract.java"


def _rendered(proto_root: Path, tmp_path: Path) -> str:
    target = tmp_path / "allocator.desc"
    descriptor_set(target, proto_root=proto_root)
    return render(target.read_bytes())


def test_every_message_field_enum_value_and_method_has_its_constant(tmp_path: Path) -> None:
    java = _rendered(PROTO_ROOT, tmp_path)
    block = java[java.index("class RequestTotalRequest {") :]
    block = block[: block.index("\n  }")]
    assert 'static final String TOTAL = "total";' in block
    assert 'static final String PROFILE_TOTALS = "profile_totals";' in block
    assert 'static final String UPDATE_DRIVER_EXECUTORS = "UpdateDriverExecutors";' in java
    assert 'static final String STATE_DELETED = "STATE_DELETED";' in java
    assert 'static final String FULL_NAME = "execpods.v1.ExecutorAllocator";' in java
    assert "class AllocatorNotice {" in java
    assert 'static final String KIND_RECOVERY_MODE = "KIND_RECOVERY_MODE";' in java


def test_the_committed_copy_is_what_the_proto_generates(tmp_path: Path) -> None:
    """`tools/gen_proto.py --check` (in the lint) holds the same."""
    assert COMMITTED.read_text() == _rendered(PROTO_ROOT, tmp_path)


def test_the_plugin_names_no_field_in_a_string() -> None:
    sources = ROOT / "integrations/spark/src/main/java/io/execpods/spark"
    text = "\n".join(p.read_text() for p in sorted(sources.glob("*.java")))
    assert not re.findall(r'findFieldByName\("', text)
    assert not re.findall(r'(?:type|unary|methods\.get)\("', text)


@pytest.mark.skipif(shutil.which("javac") is None, reason="javac is not installed")
def test_a_field_renamed_in_the_proto_fails_the_plugin_build(tmp_path: Path) -> None:
    """RequestTotalRequest.total renamed total_executors: the build regenerates the constants
    from that proto, and javac refuses the plugin, which still says
    `Contract.RequestTotalRequest.TOTAL`."""
    proto_root = tmp_path / "proto"
    shutil.copytree(PROTO_ROOT, proto_root)
    proto = next(proto_root.rglob("allocator.proto"))
    text = proto.read_text()
    start = text.index("message RequestTotalRequest {")
    renamed = text[start:].replace("int32 total = 1;", "int32 total_executors = 1;", 1)
    assert renamed != text[start:]
    proto.write_text(text[:start] + renamed)
    with pytest.raises(RuntimeError, match="javac failed") as failure:
        build(tmp_path / "out", proto_root=proto_root)
    assert "TOTAL" in str(failure.value)
    assert "cannot find symbol" in str(failure.value)
    assert not (tmp_path / "out" / "execpods-spark.jar").exists()
