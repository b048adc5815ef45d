"""Containers' resource names and quantities, checked as the API server checks them.

- A quantity that does not parse is a decoding error (400 BadRequest, before any validation),
  as apimachinery's `ParseQuantity` fails the whole body: `quantities must match the regular
  expression ...`.
- A quantity beyond 2^63-1 in magnitude is clamped to it (apimachinery caps rather than fails),
  and is stored so: a test sees what a cluster would keep.
- A resource name must be a standard one (`cpu`, `memory`, `ephemeral-storage`, `hugepages-*`)
  or fully qualified (`example.com/gpu`); quantities may not be negative, and a request may not
  exceed its limit (422 Invalid, one cause each).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from execpods.kubesim.bodies import StatusCause
from execpods.kubesim.errors import ApiError
from execpods.kubesim.store import Obj

__all__ = ["QUANTITY_PATTERN", "check_resources", "parse_quantity"]

QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
"""The expression the API server names in its error (the grammar below is the exact one)."""
_GRAMMAR = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
MAX_QUANTITY = Decimal(2**63 - 1)
_STANDARD = frozenset({"cpu", "memory", "ephemeral-storage"})
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


_SUFFIX_CHARS = frozenset("eEinumkKMGTP")


def _quantity_error(text: str) -> str:
    """apimachinery's error for a quantity that does not parse: its scan (sign, digits,
    fraction, suffix letters, an exponent's sign and digits) fails on a stray character with
    ErrFormatWrong, and an unknown suffix with ErrSuffix."""
    i, end = 0, len(text)
    if i < end and text[i] in "+-":
        i += 1
    while i < end and text[i].isdigit():
        i += 1
    if i < end and text[i] == ".":
        i += 1
        while i < end and text[i].isdigit():
            i += 1
    while i < end and text[i] in _SUFFIX_CHARS:
        i += 1
    if i < end and text[i] in "+-":
        i += 1
    while i < end and text[i].isdigit():
        i += 1
    if i < end or not text:
        return f"quantities must match the regular expression '{QUANTITY_PATTERN}'"
    return "unable to parse quantity's suffix"


def parse_quantity(text: object) -> Decimal:
    """The value of a quantity (a JSON string or number); ValueError when it does not parse."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    match = _GRAMMAR.match(str(text).strip())
    if match is None:
        raise ValueError(_quantity_error(str(text).strip()))
    try:
        number = Decimal(match["number"])
    except InvalidOperation as error:  # pragma: no cover - the grammar admits only decimals
        raise ValueError(str(error)) from None
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * Decimal(2 ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    return number.scaleb(int(suffix[1:])) if suffix else number


def _valid_resource_name(name: str) -> bool:
    if name in _STANDARD or name.startswith("hugepages-"):
        return True
    prefix, slash, part = name.partition("/")
    return (
        bool(slash)
        and bool(_PREFIX.match(prefix))
        and len(part) <= 63
        and bool(_NAME_PART.match(part))
    )


def _resource_name_message(name: str) -> str:
    """kube-apiserver's first complaint about a resource name: its characters, else that it is
    neither standard nor qualified."""
    part = name.rpartition("/")[2]
    if not _NAME_PART.match(part) or len(part) > 63:
        return (
            f'Invalid value: "{name}": name part must consist of alphanumeric characters, '
            "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
            "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return f'Invalid value: "{name}": must be a standard resource type or fully qualified'


def _cause(field: str, message: str) -> StatusCause:
    return {"reason": "FieldValueInvalid", "message": message, "field": field}


def check_resources(container: Obj, path: str) -> list[StatusCause]:
    """The causes to refuse a container's `resources` for; clamps overflowing quantities in place.

    Raises a 400 ApiError for a quantity that does not parse (a decoding error).
    """
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return []
    causes: list[StatusCause] = []
    values: dict[str, dict[str, Decimal]] = {}
    for section in ("limits", "requests"):
        amounts = resources.get(section)
        if amounts is None:
            continue
        if not isinstance(amounts, dict):
            causes.append(_cause(f"{path}.resources.{section}", "must be a map of quantities"))
            continue
        for name, text in amounts.items():
            field = f"{path}.resources.{section}[{name}]"
            try:
                value = parse_quantity(text)
            except ValueError as error:
                raise ApiError.bad_request(
                    f'Pod in version "v1" cannot be handled as a Pod: {error}'
                ) from None
            if abs(value) > MAX_QUANTITY:
                value = MAX_QUANTITY.copy_sign(value)
                amounts[name] = str(int(value))
            if not _valid_resource_name(name):
                causes.append(_cause(field, _resource_name_message(name)))
            if value < 0:
                causes.append(
                    _cause(
                        field, f"Invalid value: {str(text)!r}: must be greater than or equal to 0"
                    )
                )
            values.setdefault(section, {})[name] = value
    for name, request in values.get("requests", {}).items():
        limit = values.get("limits", {}).get(name)
        if limit is not None and request > limit:
            causes.append(
                _cause(
                    f"{path}.resources.requests",
                    f"Invalid value: {str(resources['requests'][name])!r}: must be less than or "
                    f"equal to {name} limit of {resources['limits'][name]}",
                )
            )
    return causes
