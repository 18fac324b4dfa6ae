"""Results of Nomad-provider service checks (`CheckQueryResult`), as the client reports them
at `/v1/client/allocation/<id>/checks` and as allocation health reads them."""

from __future__ import annotations

from typing import Final

from msgspec import field

from yurt.runtime.structs.base import Base

CHECK_SUCCESS: Final = "success"
CHECK_FAILURE: Final = "failure"
CHECK_PENDING: Final = "pending"

CHECK_MODE_HEALTHINESS: Final = "healthiness"
CHECK_MODE_READINESS: Final = "readiness"


class CheckQueryResult(Base, omit_defaults=True):
    """One execution of one check. `ID` is Nomad's check ID (stable for the allocation,
    service and check); `Mode` is `readiness` for checks with `on_update = "ignore"` (they
    never hold back health), `healthiness` otherwise."""

    id: str = field(default="", name="ID")
    mode: str = CHECK_MODE_HEALTHINESS
    status: str = CHECK_PENDING
    status_code: int = 0
    output: str = ""
    timestamp: int = 0
    group: str = ""
    task: str = ""
    service: str = ""
    check: str = ""
