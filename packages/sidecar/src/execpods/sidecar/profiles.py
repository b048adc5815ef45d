"""RequestTotal's resource profiles and per-profile totals, checked whole before anything applies.

A driver declares executor shapes (`ResourceProfile` messages) and asks for a total per profile.
Everything is validated first: each profile's shape and pod template, that no declaration changes a
known profile, that every total is non-negative and names a declared (or now declared) profile.
Only then are the profiles declared and the totals requested, so a bad request changes nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from execpods.core import (
    DEFAULT_RESOURCE_PROFILE_ID,
    SPARK_LABELS,
    AllocatorNotice,
    NoticeKind,
    ResourceProfile,
    SettingsError,
)
from execpods.k8s import parse_pod_template
from execpods.sidecar.templatepolicy import PolicyRefusal, TemplatePolicy
from execpods.v1 import allocator_pb2 as pb

_NOTICE_KINDS = {
    NoticeKind.CREATE_REFUSED: pb.AllocatorNotice.KIND_CREATE_REFUSED,
    NoticeKind.CREATE_THROTTLED: pb.AllocatorNotice.KIND_CREATE_THROTTLED,
    NoticeKind.CREATE_FAILED: pb.AllocatorNotice.KIND_CREATE_FAILED,
    NoticeKind.ALLOCATION_MAXIMUM_REACHED: pb.AllocatorNotice.KIND_ALLOCATION_MAXIMUM_REACHED,
}


class InvalidProfiles(ValueError):
    """A profile or a per-profile total is invalid; the message names it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TotalsRequest:
    """A checked RequestTotal: the profiles to declare and the totals to set."""

    profiles: tuple[ResourceProfile, ...]
    totals: dict[int, int]


def profile_from_message(
    message: pb.ResourceProfile,
    *,
    app_id: str | None = None,
    policy: TemplatePolicy | None = None,
) -> ResourceProfile:
    """The core's profile for a contract message; `InvalidProfiles` when it is unusable.

    A pod template labelled for another application (`spark-app-selector`, as every pod Spark's
    own builder makes, which the Spark plugin declares) is refused: the sidecar would relabel its
    pods with `app_id` and the driver, which finds its executors by its own id, would never see
    them. Saying so at the first RequestTotal beats a driver waiting for executors forever.

    The template is then checked against the sidecar's `policy` (templatepolicy.py), before any
    pod is built from it."""
    what = f"profiles[id={message.id}]"
    try:
        profile = ResourceProfile(
            id=message.id,
            cores=message.cores or None,
            memory_mib=message.memory_mib or None,
            memory_overhead_mib=message.memory_overhead_mib or None,
            extra_resources=dict(message.extra_resources),
            pod_template=message.pod_template or None,
        )
    except ValueError as error:
        raise InvalidProfiles(f"{what} is invalid: {error}") from None
    if profile.pod_template is not None:
        try:
            template = parse_pod_template(
                profile.pod_template, what=f"resource profile {profile.id}"
            )
        except SettingsError as error:
            raise InvalidProfiles(f"{what} is invalid: {error}") from None
        if policy is not None:
            try:
                policy.check(template)
            except PolicyRefusal as refusal:
                raise InvalidProfiles(f"{what}.pod_template is refused: {refusal}") from None
        labels = (template.get("metadata") or {}).get("labels") or {}
        owner = labels.get(SPARK_LABELS.app_id) if isinstance(labels, dict) else None
        if app_id is not None and owner is not None and owner != app_id:
            raise InvalidProfiles(
                f"{what} is invalid: its pod template is labelled for application {owner!r} "
                f"({SPARK_LABELS.app_id}) but this sidecar allocates for {app_id!r}: start the "
                f"sidecar with that application id (--app-id {owner})"
            )
    return profile


def check_totals_request(
    request: pb.RequestTotalRequest,
    *,
    declared: Collection[int],
    app_id: str | None = None,
    policy: TemplatePolicy | None = None,
) -> TotalsRequest:
    """Check a RequestTotal whole; raises `InvalidProfiles` naming the first bad field."""
    profiles = tuple(
        profile_from_message(m, app_id=app_id, policy=policy) for m in request.profiles
    )
    ids = [p.id for p in profiles]
    if len(set(ids)) != len(ids):
        raise InvalidProfiles(f"profiles declares an id twice ({sorted(ids)})")
    if request.total < 0:
        raise InvalidProfiles(f"total={request.total} is invalid: it must not be negative")
    totals = {DEFAULT_RESOURCE_PROFILE_ID: request.total}
    known = set(declared) | set(ids)
    for profile_id, total in sorted(request.profile_totals.items()):
        if profile_id == DEFAULT_RESOURCE_PROFILE_ID:
            raise InvalidProfiles(
                "profile_totals[0] is invalid: the default profile's total is `total`"
            )
        if total < 0:
            raise InvalidProfiles(
                f"profile_totals[{profile_id}]={total} is invalid: it must not be negative"
            )
        if profile_id not in known:
            raise InvalidProfiles(
                f"profile_totals[{profile_id}] is invalid: resource profile {profile_id} was "
                "never declared (declare it in `profiles`)"
            )
        totals[profile_id] = total
    return TotalsRequest(profiles=profiles, totals=totals)


def encode_notice(notice: AllocatorNotice) -> pb.AllocatorNotice:
    return pb.AllocatorNotice(
        kind=_NOTICE_KINDS[notice.kind],
        message=notice.message,
        resource_profile_id=notice.resource_profile_id,
        count=notice.count,
        retry_in_ms=round(notice.retry_in * 1000),
    )
