"""ACL tokens and one-time tokens in Nomad's JSON, both ways (the API writes, the CLI reads).

Nomad's JSON of a token differs from its fields in three places (nomad/structs/acl.go
`ACLToken.MarshalJSON`, `UnmarshalJSON`; Go's `time.Time`):
- `CreateTime` and `ExpirationTime` are RFC 3339 times with up to nine fraction digits,
  trailing zeros dropped, in UTC as Nomad writes them ("2017-08-23T22:47:14.695408057Z"); a
  token that never expires has `"ExpirationTime": null`; Go's zero time
  ("0001-01-01T00:00:00Z") stands for no time.
- `ExpirationTTL` is written as a Go duration ("1h0m0s", "" for none) and read as one or as
  integer nanoseconds.
- Empty `Policies` and `Roles` are `null`, as Go writes a nil slice.

A token read from a request keeps `Type` empty when the body has none, as Nomad's decoder
does, so that validation names it (server/acl/validate.py). Policies and roles need nothing of
this: msgspec writes them as they are (structs/acl.py).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

import msgspec

from yurt.runtime.lib.durations import format_duration, parse_duration
from yurt.runtime.structs.acl import AclRoleLink, AclToken, OneTimeToken

GO_ZERO_TIME: Final = "0001-01-01T00:00:00Z"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_RFC3339: Final = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):"
                             r"([0-9]{2})(?:\.([0-9]{1,9}))?([Zz]|[+-][0-9]{2}:[0-9]{2})")


def format_time(ns: int) -> str:
    """Unix nanoseconds as Go's `time.Time` JSON in UTC (0: Go's zero time)."""
    if ns == 0:
        return GO_ZERO_TIME
    seconds, fraction = divmod(ns, 1_000_000_000)
    text = (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    if fraction:
        text += "." + f"{fraction:09d}".rstrip("0")
    return text + "Z"


def parse_time(text: str) -> int:
    """An RFC 3339 time as Unix nanoseconds (Go's zero time: 0). ValueError otherwise."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f'expected an RFC 3339 time such as "2006-01-02T15:04:05Z", '
                         f'got "{text[:40]}"')
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    if zone in ("Z", "z"):
        tz: timezone = UTC
    else:
        sign = -1 if zone[0] == "-" else 1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute),
                          int(second), tzinfo=tz)
    except ValueError as e:
        raise ValueError(f'invalid time "{text[:40]}": {e}') from None
    if moment == datetime(1, 1, 1, tzinfo=UTC) and not fraction:
        return 0
    delta = moment - _EPOCH
    whole = (delta.days * 86400 + delta.seconds) * 1_000_000_000
    return whole + int((fraction or "0").ljust(9, "0"))


def _ttl(value: object) -> int:
    """`ExpirationTTL` as Nomad's `UnmarshalJSON` reads it: a Go duration, "" or a number."""
    if value is None or value == "":
        return 0
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    raise ValueError(f'"ExpirationTTL": expected a duration such as "1h", got {value!r}')


def token_from_json(body: dict[str, Any]) -> AclToken:
    """A token from Nomad's JSON (see the header). ValueError (msgspec's ValidationError is
    one) names the field that is wrong."""
    fields = {k: v for k, v in body.items() if v is not None and k not in (
        "CreateTime", "ExpirationTime", "ExpirationTTL", "Hash")}
    fields.setdefault("Type", "")
    token = msgspec.convert(fields, AclToken)
    created, expires = body.get("CreateTime"), body.get("ExpirationTime")
    for name, value in (("CreateTime", created), ("ExpirationTime", expires)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f'"{name}": expected an RFC 3339 time, got {value!r}')
    try:
        ttl = _ttl(body.get("ExpirationTTL"))
    except ValueError as e:
        raise ValueError(f'"ExpirationTTL": {e}') from None
    expiration = parse_time(expires) if expires else 0
    return msgspec.structs.replace(
        token, create_time=parse_time(created) if created else 0,
        expiration_time=expiration or None, expiration_ttl=ttl)


def _links(links: list[AclRoleLink]) -> list[dict[str, str]] | None:
    return [{"ID": link.id, "Name": link.name} for link in links] or None


def token_to_json(token: AclToken, *, stub: bool = False) -> dict[str, Any]:
    """Nomad's `ACLToken` JSON, or with `stub` its `ACLTokenListStub` (no SecretID, no
    ExpirationTTL)."""
    out: dict[str, Any] = {"AccessorID": token.accessor_id}
    if not stub:
        out["SecretID"] = token.secret_id
    out |= {"Name": token.name, "Type": token.type, "Policies": token.policies or None,
            "Roles": _links(token.roles), "Global": token.global_,
            "CreateTime": format_time(token.create_time),
            "ExpirationTime": (None if token.expiration_time is None
                               else format_time(token.expiration_time))}
    if not stub:
        out["ExpirationTTL"] = format_duration(token.expiration_ttl) if token.expiration_ttl \
            else ""
    out |= {"CreateIndex": token.create_index, "ModifyIndex": token.modify_index}
    return out


def one_time_to_json(ott: OneTimeToken) -> dict[str, Any]:
    return {"OneTimeSecretID": ott.one_time_secret_id, "AccessorID": ott.accessor_id,
            "ExpiresAt": format_time(ott.expires_at), "CreateIndex": ott.create_index,
            "ModifyIndex": ott.modify_index}


def one_time_from_json(body: dict[str, Any]) -> OneTimeToken:
    """A one-time token from Nomad's JSON. ValueError when it is not one."""
    expires = body.get("ExpiresAt")
    if not isinstance(expires, str):
        raise ValueError(f'"ExpiresAt": expected an RFC 3339 time, got {expires!r}')
    fields = {k: v for k, v in body.items() if k != "ExpiresAt"}
    return msgspec.convert(fields | {"ExpiresAt": parse_time(expires)}, OneTimeToken)
