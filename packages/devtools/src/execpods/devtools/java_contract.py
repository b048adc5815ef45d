"""The contract's names as Java constants, so the Spark plugin names no field in a string.

The plugin speaks the contract through protobuf's ``DynamicMessage`` (no Java code generator is
installed here), which looks fields up by name: with the names typed as strings, a field renamed
in ``proto/`` failed only in the real-Spark tests. This module renders ``Contract.java`` from the
contract's descriptors: one nested class per message, holding its name and one constant per
field, per nested enum and per enum value, plus the service and its methods. The plugin build
compiles a fresh rendering of the proto it packs (`spark_plugin.build`), so a renamed field is a
compile error there; ``tools/gen_proto.py`` keeps the committed copy (for readers and IDEs,
``integrations/spark/src/generated/java``) and checks it for drift.

A field ``profile_totals`` is ``PROFILE_TOTALS``; a message ``RequestTotalRequest`` is the
class ``Contract.RequestTotalRequest`` with ``NAME``; a map field's entries use
``Contract.MAP_KEY`` and ``Contract.MAP_VALUE``.
"""

from __future__ import annotations

import re

from google.protobuf import descriptor_pb2

__all__ = ["JAVA_PACKAGE", "PROTO_FILE", "render"]

JAVA_PACKAGE = "io.execpods.spark"
PROTO_FILE = "execpods/v1/allocator.proto"
_HEADER = (
    "// Generated from proto/{proto} by execpods.devtools.java_contract "
    "(python3 tools/dev.py gen). Do not edit.\n"
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _constant(name: str) -> str:
    """``profile_totals`` and ``RequestTotal`` as Java constants: PROFILE_TOTALS, REQUEST_TOTAL."""
    return _CAMEL.sub("_", name).upper()


def _string(name: str, value: str, indent: str) -> str:
    return f'{indent}static final String {name} = "{value}";'


def _enum(enum: descriptor_pb2.EnumDescriptorProto, indent: str) -> list[str]:
    lines = [f"{indent}/** Enum {enum.name}: its value names. */"]
    lines.append(f"{indent}static final class {enum.name} {{")
    lines.append(f"{indent}  private {enum.name}() {{}}")
    lines.append(_string("NAME", enum.name, indent + "  "))
    lines += [_string(value.name, value.name, indent + "  ") for value in enum.value]
    lines.append(f"{indent}}}")
    return lines


def _message(message: descriptor_pb2.DescriptorProto, indent: str) -> list[str]:
    lines = [f"{indent}/** Message {message.name}: its name and its fields' names. */"]
    lines.append(f"{indent}static final class {message.name} {{")
    inner = indent + "  "
    lines.append(f"{inner}private {message.name}() {{}}")
    lines.append(_string("NAME", message.name, inner))
    lines += [_string(_constant(field.name), field.name, inner) for field in message.field]
    for enum in message.enum_type:
        lines += _enum(enum, inner)
    lines.append(f"{indent}}}")
    return lines


def render(descriptor_set: bytes) -> str:
    """``Contract.java`` for the contract in ``descriptor_set`` (``protoc
    --descriptor_set_out``)."""
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
    (contract,) = [f for f in files.file if f.name == PROTO_FILE]
    lines = [
        _HEADER.format(proto=PROTO_FILE).rstrip("\n"),
        f"package {JAVA_PACKAGE};",
        "",
        "/** The names of the execpods contract ({@code " + PROTO_FILE + "}). */",
        "final class Contract {",
        "  private Contract() {}",
        "",
        _string("FILE", contract.name, "  "),
        _string("PACKAGE", contract.package, "  "),
        "  /** A map field's entry: its key and value fields. */",
        _string("MAP_KEY", "key", "  "),
        _string("MAP_VALUE", "value", "  "),
    ]
    for service in contract.service:
        lines.append(f"  /** Service {service.name}: its full name and its methods. */")
        lines.append(f"  static final class {service.name} {{")
        lines.append(f"    private {service.name}() {{}}")
        lines.append(_string("NAME", service.name, "    "))
        lines.append(_string("FULL_NAME", f"{contract.package}.{service.name}", "    "))
        lines += [_string(_constant(m.name), m.name, "    ") for m in service.method]
        lines.append("  }")
    for enum in contract.enum_type:
        lines += _enum(enum, "  ")
    for message in contract.message_type:
        lines += _message(message, "  ")
    lines.append("}")
    return "\n".join(lines) + "\n"
