"""Query parameters as the API server reads them."""

from __future__ import annotations

__all__ = ["FALSE", "TRUE", "parse_bool"]

TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
"""Spellings of true that Go's ParseBool knows (kube-apiserver takes any value but 0/false)."""
FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(value: str | None, name: str) -> bool:
    """A query boolean as kube-apiserver converts it (apimachinery's
    ``Convert_Slice_string_To_bool``): absent, empty, ``0`` and ``false`` in any case are false,
    anything else is true (``watch=yes`` is a watch; checked on a real v1.36 server)."""
    del name  # every value converts: no error to name it in
    if value is None or value == "":
        return False
    return not (value == "0" or value.lower() == "false")
