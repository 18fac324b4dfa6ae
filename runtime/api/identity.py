"""/.well-known/jwks.json: the public key that verifies the workload identity tokens tasks get.

Nomad serves the JSON Web Key Set of its keyring here, to anyone: a public key is what a
relying party needs to check a task's token without asking Nomad, so the path is open even
when the API asks for a token (its route is PUBLIC in authz_table.py). The key is the
agent's server key (runtime/server/workload_keys.py).
"""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.context import Context
from yurt.runtime.api.request import json_response

JWKS_PATH: Final = "/.well-known/jwks.json"


async def jwks(ctx: Context, request: Request) -> Response:
    return json_response(ctx.client_side().workload_signer.jwks())
