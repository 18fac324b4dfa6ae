"""Workload identities and the job's UI block: Nomad's `WorkloadIdentity`, `JobUIConfig` and
`JobUILink`. Python attribute names are the HCL names (`aud`, `ttl`, `link`); JSON names are
Nomad's (`Audience`, `TTL`, `Links`).

Invariants, after `jobspec.canonicalize` (Nomad's Task.Canonicalize): every task has its
default identity in `Task.default_identity` (JSON `Identity`, named "default", audience
`nomadproject.io`), and `Task.identities` holds only the named, alternate ones.
"""

from __future__ import annotations

from typing import Final

from msgspec import field

from yurt.runtime.structs.base import Base, Duration

DEFAULT_IDENTITY_NAME: Final = "default"
#: The audience of every default identity (Nomad's IdentityDefaultAud).
DEFAULT_AUDIENCE: Final = "nomadproject.io"


class WorkloadIdentity(Base):
    """`identity {}` in a task: a JWT the task gets as `NOMAD_TOKEN` (`env`) and/or in
    `secrets/nomad_token` (`file`); a named one as `NOMAD_TOKEN_<name>` and in
    `secrets/nomad_<name>.jwt`."""

    name: str = ""
    aud: list[str] = field(default_factory=list, name="Audience")
    change_mode: str = ""
    change_signal: str = ""
    env: bool = False
    file: bool = False
    filepath: str = ""
    service_name: str = ""
    ttl: Duration = field(default=0, name="TTL")
    extra_claims: list[str] = field(default_factory=list)


def default_identity() -> WorkloadIdentity:
    """Nomad's DefaultWorkloadIdentity."""
    return WorkloadIdentity(name=DEFAULT_IDENTITY_NAME, aud=[DEFAULT_AUDIENCE])


class JobUILink(Base):
    label: str = ""
    url: str = field(default="", name="URL")


class JobUIConfig(Base):
    """`ui {}` in a job: a description (Markdown) and links the web UI shows."""

    description: str = ""
    link: list[JobUILink] = field(default_factory=list, name="Links")
