"""The committed gRPC code is exactly what tools/gen_proto.py makes from proto/, in its own
distribution (`packages/contract`, import `execpods.v1`), and the drift check notices a change."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import execpods.v1

from tests.generators import assert_not_stale, load_tool

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "packages" / "contract" / "src" / "execpods" / "v1"


def _gen_proto() -> ModuleType:
    return load_tool("gen_proto.py")


def test_generated_code_has_not_drifted_from_the_proto() -> None:
    assert_not_stale("gen_proto.py")


def test_the_contract_is_imported_from_its_own_distribution() -> None:
    assert Path(execpods.v1.__file__).resolve().parent == COMMITTED
    assert _gen_proto().GENERATED == COMMITTED


def test_the_drift_check_notices_an_edited_a_missing_and_an_extra_file(tmp_path: Path) -> None:
    copy = tmp_path / "v1"
    shutil.copytree(COMMITTED, copy, ignore=shutil.ignore_patterns("__pycache__"))
    gen = _gen_proto()
    assert gen.drift(COMMITTED, copy) == []
    (copy / "allocator_pb2.pyi").write_text("# edited by hand\n")
    (copy / "allocator_pb2_grpc.py").unlink()
    (copy / "stale_pb2.py").write_text("")
    assert gen.drift(COMMITTED, copy) == [
        "differs from what the .proto files generate: allocator_pb2.pyi",
        "missing from the committed code: allocator_pb2_grpc.py",
        "committed but no longer generated: stale_pb2.py",
    ]
