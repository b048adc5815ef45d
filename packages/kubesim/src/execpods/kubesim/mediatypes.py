"""Which encodings kubesim reads and writes: JSON only, and it says so as the API server does.

kube-apiserver decodes request bodies in JSON, YAML or Protobuf (`application/vnd.kubernetes.
protobuf`, what kubectl and client-go send for built-in kinds such as Secrets, ConfigMaps,
Namespaces and ServiceAccounts), and answers a body in an encoding it cannot decode with 415
UnsupportedMediaType, a reply it cannot encode with 406 NotAcceptable. kubesim speaks JSON: a
Protobuf (or CBOR) body gets that 415, worded as the API server words it and naming the encoding,
instead of a "not valid JSON" 400 that leaves the user guessing; an `Accept` header that admits no
JSON gets the 406. Other bodies go on to the handlers (patch types are checked by `patch.py`).
"""

from __future__ import annotations

from execpods.kubesim.errors import ApiError

__all__ = ["PROTOBUF", "check_media_types"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
CBOR = "application/cbor"
JSON = "application/json"
_BINARY = {PROTOBUF: "Protobuf", CBOR: "CBOR"}
_WRITTEN = (JSON, "application/*", "*/*", "*")


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def _binary_name(media_type: str) -> str | None:
    for prefix, name in _BINARY.items():
        if media_type.startswith(prefix):
            return name
    return None


def check_media_types(*, content_type: str, accept: str, body: bytes) -> None:
    """Raise the 415 for a body kubesim cannot decode, the 406 for answers it cannot encode."""
    given = _media_type(content_type)
    name = _binary_name(given) if body else None
    if name is not None:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON} (kubesim does not decode {name}, {given}; send JSON: for kubectl, render "
            f"with `kubectl create ... --dry-run=client -o yaml` and pipe it to `kubectl apply "
            f"-f -`)",
        )
    wanted = [_media_type(part) for part in accept.split(",") if part.strip()]
    if wanted and not any(media in _WRITTEN for media in wanted):
        asked = ", ".join(wanted)
        raise ApiError(
            406,
            "NotAcceptable",
            f"only the following media types are accepted: {JSON} (kubesim does not encode "
            f"{asked})",
        )
