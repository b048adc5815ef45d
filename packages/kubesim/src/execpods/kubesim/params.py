"""Query parameters as the API server reads them."""

from __future__ import annotations

from execpods.kubesim.errors import ApiError

__all__ = ["FALSE", "TRUE", "parse_bool"]

TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(value: str | None, name: str) -> bool:
    """Go's ``strconv.ParseBool``, which is how the API server reads query booleans."""
    if value is None or value == "":
        return False
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ApiError.bad_request(f'invalid boolean value for "{name}": {value!r}')
