"""`StateGuardMiddleware`: refuse API changes while the agent cannot record them.

When the client state database has been deleted under the running agent, anything accepted
now would be lost at the next start (and the tasks it started orphaned). The agent keeps
supervising what already runs and keeps answering reads, but every request that changes
state gets a 503 with the reason, so an operator sees the fault instead of an agent that
silently runs blind. The check is asked of the agent on each such request (one `stat` in a
worker thread), so a deletion is noticed before the next write is accepted, not after.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, final

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

WRITE_METHODS: Final = frozenset({"PUT", "POST", "DELETE"})
#: POSTs that change nothing.
READ_ONLY_PATHS: Final = frozenset({"/v1/jobs/parse"})


@final
class StateGuardMiddleware:
    def __init__(self, app: ASGIApp, failure: Callable[[], Awaitable[str | None]]) -> None:
        self.app = app
        self.failure = failure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] in WRITE_METHODS
                and scope["path"] not in READ_ONLY_PATHS):
            reason = await self.failure()
            if reason is not None:
                response = PlainTextResponse(f"agent is not accepting changes: {reason}",
                                             status_code=503)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
