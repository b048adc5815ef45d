"""RequestTotal's message mapped onto the core's `TotalsRequest`: shapes, templates, totals.

The servicer decides nothing: this module turns the contract's fields into core values (a
profile's pod template is parsed here, once, and the parsed manifest travels with the profile to
the pod builder), and the backend judges the whole request (`execpods.core.TotalsRequest`). Only
what the message's shape alone can get wrong is refused here: a profile field core refuses, a
template that is not a pod or is labelled for another application, and a total for profile 0 in
`profile_totals` (its total is `total`).
"""

from __future__ import annotations

from collections.abc import Callable

from execpods.core import (
    DEFAULT_RESOURCE_PROFILE_ID,
    SPARK_LABELS,
    ResourceProfile,
    SettingsError,
    TotalsRequest,
)
from execpods.k8s import parse_pod_template
from execpods.sidecar.guard.templatepolicy import PolicyRefusal, TemplatePolicy
from execpods.v1 import allocator_pb2 as pb


class InvalidProfiles(ValueError):
    """A profile or a per-profile total is invalid; the message names it."""


ProfileCheck = Callable[[ResourceProfile], None]
"""Builds a profile's pod once, as a create would, and raises `ValueError` (`SettingsError`)
when the Kubernetes client would refuse it (`ExecutorPodTemplateBuilder.check`)."""


def profile_from_message(
    message: pb.ResourceProfile,
    *,
    app_id: str | None = None,
    policy: TemplatePolicy | None = None,
    check: ProfileCheck | None = None,
    declared: Callable[[int], ResourceProfile | None] | None = None,
) -> ResourceProfile:
    """The core's profile for a contract message; `InvalidProfiles` when it is unusable.

    A pod template labelled for another application (`spark-app-selector`, as every pod Spark's
    own builder makes, which the Spark plugin declares) is refused: the sidecar would relabel its
    pods with `app_id` and the driver, which finds its executors by its own id, would never see
    them. Saying so at the first RequestTotal beats a driver waiting for executors forever.

    The template is then checked against the sidecar's `policy` (templatepolicy.py), before any
    pod is built from it; and then, unless the same profile is `declared` already, built into
    its pod once by `check`, so that a pod the Kubernetes client would refuse is refused here,
    not at each create."""
    what = f"profiles[id={message.id}]"
    try:
        template = (
            parse_pod_template(message.pod_template, what=f"resource profile {message.id}")
            if message.pod_template
            else None
        )
        profile = ResourceProfile(
            id=message.id,
            cores=message.cores or None,
            memory_mib=message.memory_mib or None,
            memory_overhead_mib=message.memory_overhead_mib or None,
            extra_resources=dict(message.extra_resources),
            pod_template=template,
        )
    except (ValueError, SettingsError) as error:
        raise InvalidProfiles(f"{what} is invalid: {error}") from None
    if template is not None:
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
    if check is not None and (declared is None or declared(profile.id) != profile):
        try:
            check(profile)
        except (ValueError, SettingsError) as error:
            raise InvalidProfiles(f"{what} is invalid: {error}") from None
    return profile


def totals_request(
    request: pb.RequestTotalRequest,
    *,
    app_id: str | None = None,
    policy: TemplatePolicy | None = None,
    check: ProfileCheck | None = None,
    declared: Callable[[int], ResourceProfile | None] | None = None,
) -> TotalsRequest:
    """The core's request for a RequestTotal; `InvalidProfiles` for what the message alone gets
    wrong (the backend judges the rest)."""
    profiles = tuple(
        profile_from_message(m, app_id=app_id, policy=policy, check=check, declared=declared)
        for m in request.profiles
    )
    if DEFAULT_RESOURCE_PROFILE_ID in request.profile_totals:
        raise InvalidProfiles(
            "profile_totals[0] is invalid: the default profile's total is `total`"
        )
    totals = {DEFAULT_RESOURCE_PROFILE_ID: request.total, **request.profile_totals}
    return TotalsRequest(totals=totals, profiles=profiles)
