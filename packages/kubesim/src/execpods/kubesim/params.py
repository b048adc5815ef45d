"""Query parameters as the API server reads them."""

from __future__ import annotations

import orjson
from execpods.kubesim.errors import ApiError

__all__ = ["FALSE", "TRUE", "parse_bool", "refuse_dry_run"]

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


_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def refuse_dry_run(method: str, query: dict[str, str], body: bytes) -> None:
    """A write with `dryRun` (a query parameter, or for a delete DeleteOptions' field) is a 400:
    kubesim does not model dry runs, and making the write anyway (as it once did) changes what
    the caller only meant to check (`kubectl apply --dry-run=server`, `kubectl diff`, `kubectl
    delete --dry-run=server`)."""
    if method not in _WRITES:
        return
    asked: object = query.get("dryRun")
    if asked is None and method == "DELETE" and body.strip():
        try:
            options = orjson.loads(body)
        except orjson.JSONDecodeError:
            return  # the delete's own parsing says what is wrong with it
        asked = options.get("dryRun") if isinstance(options, dict) else None
    if not asked:
        return
    shown = ",".join(map(str, asked)) if isinstance(asked, list) else str(asked)
    raise ApiError.bad_request(
        f"kubesim does not serve dry runs (dryRun={shown}): nothing was written or deleted; "
        "check against a real API server, or without the dry run"
    )
