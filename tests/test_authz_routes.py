"""The route walk: every (route, method) the app serves, asked with tokens its declared need
(runtime/api/authz_table.py) refuses and grants, against real policies through the real
parser and compiler (tests/authz_support.py `PolicyResolver`).

The routes are read from the app itself (`build_app`), not listed here, so a route added
tomorrow is walked tomorrow. For each, by the kind of its need:
- a checked need (a namespace capability, the allocation's or the deployment's namespace, a
  level): its `denies` policy (every capability but the ones it takes), the anonymous token
  and a secret nobody holds are refused (403, or a websocket closed 1008 with Nomad's text);
  its `grants` policy is not (any other answer will do: the check runs before the handler);
- `MANAGEMENT`: the broadest client token is refused, the management token is not;
- `FILTERED`: the anonymous token is not refused (the answer is filtered, test_authz_lists);
- `PUBLIC`: not refused even with a made-up secret;
- `IN_HANDLER`: the handler checks what the body says, so the route has an entry of its own
  in `IN_HANDLER_ROUTES` (policies and a valid body); a route without one fails the walk,
  named, as does a checked need that declares no policy granting it.
Path parameters are a real job's, allocation's, evaluation's, deployment's and node's IDs
(registered first), so that a need that looks up an object's namespace finds one.

Refusals are asked first (no handler runs for them); then grants, reads before writes, and
the writes that take the fixture apart (stop, GC, purge) last.

Layer 2: an in-process agent on a real socket, the real clock, bounded by `trio.fail_after`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import trio
from starlette.routing import Route, WebSocketRoute

from tests.agent_support import mock_job, wait_status
from tests.authz_support import (
    NOT_A_TOKEN,
    AclAgent,
    Answer,
    acl_agent,
    http_answer,
    rolled_out,
    ws_answer,
)
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.api.app import build_app
from yurt.runtime.api.authz import (
    FILTERED,
    IN_HANDLER,
    MANAGEMENT,
    PUBLIC,
    Need,
    namespace_policy,
)
from yurt.runtime.api.authz_table import JOB, NEEDS
from yurt.runtime.server.acl.policy import NAMESPACE_CAPABILITIES

WALK_JOB: Final = "walk"
#: The job the register routes' grants register (not the walk's own, which stays).
NEW_JOB: Final = "walk-new"


def _all_but(*caps: str) -> str:
    """Every namespace capability in `default` but `caps`, and every level."""
    levels = "".join(f'{k} {{ policy = "write" }}\n' for k in ("node", "agent", "operator"))
    return namespace_policy(*(NAMESPACE_CAPABILITIES - set(caps) - {"deny"})) + levels


def _variables(*caps: str) -> str:
    every = sorted(NAMESPACE_CAPABILITIES - {"deny"})
    return ('namespace "default" {\n  capabilities = ' + str(every).replace("'", '"')
            + '\n  variables { path "walk/*" { capabilities = '
            + str(sorted(caps)).replace("'", '"') + " } }\n}\n")


@dataclass(frozen=True)
class Checked:
    """How the route walk asks a route whose handler checks: a policy it grants, those it
    refuses, the body (or websocket query) that reaches the check. No policies: the handler
    refuses no token that resolves (the anonymous one is asked)."""

    grants: str
    denies: tuple[str, ...]
    body: dict[str, Any] | None = None
    query: str = ""
    #: A websocket's first message, which a session the handler lets run answers.
    message: str | None = None
    #: The path parameters this route is asked with, where not the walk's own.
    params: tuple[tuple[str, str], ...] = ()
    #: With no `denies`: the anonymous token is refused all the same (any other is not).
    anonymous_refused: bool = False


_REGISTER: Final = Checked(namespace_policy("register-job"),
                           (_all_but("submit-job", "register-job"),),
                           mock_job(NEW_JOB), params=(("job_id", NEW_JOB),))
_PLAN: Final = Checked(namespace_policy("plan-job"), (_all_but("submit-job", "plan-job"),),
                       mock_job(WALK_JOB))
_VALIDATE: Final = Checked(namespace_policy("read-job"), (_all_but("read-job"),),
                           mock_job(WALK_JOB))
_SEARCH: Final = Checked(namespace_policy("read-job"), (_all_but("read-job"),),
                         {"Prefix": "", "Context": "jobs"})
_FUZZY: Final = Checked(namespace_policy("read-job"), (_all_but("read-job"),),
                        {"Text": "wa", "Context": "jobs"})
_VAR_WRITE: Final = Checked(_variables("write"), (_variables("read", "list", "destroy"),),
                            {"Items": {"k": "v"}})

#: `UpsertNodePools`: write on the body's pool.
_POOL_UPSERT: Final = Checked('node_pool "walk-pool" { capabilities = ["write"] }\n',
                              ('node_pool "walk-pool" { capabilities = ["read", "delete"] }\n'
                               'node_pool "default" { policy = "write" }\n'
                               'node { policy = "write" }\n',),
                              {"Name": "walk-pool", "Description": "walked"})

#: A `Checked.grants` that only a management token meets.
MANAGEMENT_GRANT: Final = "<management>"
#: The ACL endpoints' reads of one object: a management token, or a client token holding it
#: (test_api_acl.py asks those with real tokens); a broad client token holding none is
#: refused. The objects named do not exist: the granted ask answers 404.
_ACL_OWN: Final = Checked(MANAGEMENT_GRANT, (MANAGEMENT.denies,),
                          params=(("name", "walk-none"), ("accessor", NOT_A_TOKEN),
                                  ("id", NOT_A_TOKEN)))

#: Every route whose need is `IN_HANDLER`, by path and method (see the header).
IN_HANDLER_ROUTES: Final[dict[tuple[str, str], Checked]] = {
    ("/v1/jobs", "PUT"): _REGISTER,
    ("/v1/jobs", "POST"): _REGISTER,
    (JOB, "PUT"): _REGISTER,
    (JOB, "POST"): _REGISTER,
    (f"{JOB}/plan", "PUT"): _PLAN,
    (f"{JOB}/plan", "POST"): _PLAN,
    ("/v1/validate/job", "PUT"): _VALIDATE,
    ("/v1/validate/job", "POST"): _VALIDATE,
    ("/v1/node/pools", "PUT"): _POOL_UPSERT,
    ("/v1/node/pools", "POST"): _POOL_UPSERT,
    ("/v1/search", "PUT"): _SEARCH,
    ("/v1/search", "POST"): _SEARCH,
    ("/v1/search/fuzzy", "PUT"): _FUZZY,
    ("/v1/search/fuzzy", "POST"): _FUZZY,
    ("/v1/var/{path:path}", "GET"): Checked(
        _variables("read"), (_variables("write", "list", "destroy"),)),
    ("/v1/var/{path:path}", "PUT"): _VAR_WRITE,
    ("/v1/var/{path:path}", "POST"): _VAR_WRITE,
    ("/v1/var/{path:path}", "DELETE"): Checked(
        _variables("destroy"), (_variables("read", "list", "write"),)),
    # A plain GET of the exec path is 400 whatever the token, as Nomad's upgrader answers
    # it (exec.py `not_upgraded`): the websocket below is what is checked.
    ("/v1/client/allocation/{id}/exec", "GET"): Checked("", ()),
    ("/v1/acl/policy/{name}", "GET"): _ACL_OWN,
    ("/v1/acl/token/{accessor}", "GET"): _ACL_OWN,
    ("/v1/acl/token/{accessor}", "PUT"): _ACL_OWN,
    ("/v1/acl/token/{accessor}", "POST"): _ACL_OWN,
    ("/v1/acl/token/{accessor}", "DELETE"): _ACL_OWN,
    ("/v1/acl/role/{id}", "GET"): _ACL_OWN,
    ("/v1/acl/role/name/{name}", "GET"): _ACL_OWN,
    # For the caller's own token: any stored one, never the anonymous one (the walk's
    # identities are stored nowhere: test_api_acl.py makes one with a real token).
    ("/v1/acl/token/onetime", "PUT"): Checked("", (), anonymous_refused=True),
    ("/v1/acl/token/onetime", "POST"): Checked("", (), anonymous_refused=True),
    # Every topic (none named) is management's alone (events.py `_subscription_allowed`);
    # test_authz_lists.py has the namespaced topics.
    ("/v1/event/stream", "GET"): Checked(MANAGEMENT_GRANT, (MANAGEMENT.denies,)),
    ("/v1/event/ws", "WS"): Checked(MANAGEMENT_GRANT, (MANAGEMENT.denies,)),
    # The mock driver does not isolate its tasks: alloc-node-exec too (exec.py).
    ("/v1/client/allocation/{id}/exec", "WS"): Checked(
        namespace_policy("alloc-exec", "alloc-node-exec"),
        (_all_but("alloc-exec"), namespace_policy("alloc-exec")),
        query="task=t&command=%5B%22showinput%22%5D",
        # The mock's `showinput` echoes its stdin once that closes (drivers/mock.py).
        message='{"stdin": {"close": true}}'),
    # A plain GET of the action path is 400 whatever the token (exec.py `not_upgraded`).
    (f"{JOB}/action", "GET"): Checked("", ()),
    # Nomad 1.7's job action is an exec: alloc-exec (and alloc-node-exec for the mock) in
    # the allocation's namespace. The walk's job has no action, so a granted session ends
    # with Nomad's "action … not found", after the alloc-exec check and before the
    # alloc-node-exec one (client/alloc_endpoint.go `execImpl`'s order).
    (f"{JOB}/action", "WS"): Checked(
        namespace_policy("alloc-exec", "alloc-node-exec"), (_all_but("alloc-exec"),),
        query="task=t&action=hello&allocID={alloc}", message="{}"),
}

#: Grants that take the fixture apart, asked last, in this order.
LAST: Final = ("/v1/allocation/{id}/stop", "/v1/client/allocation/{id}/gc", "/v1/client/gc",
               "/v1/system/gc", JOB, "/v1/node/{id}/drain", "/v1/node/{id}/purge")


def served_routes() -> list[tuple[str, str]]:
    """(path, method) of every route of the app; "WS" for a websocket."""
    app: Any = build_app(Agent(AgentConfig(data_dir=Path("/nonexistent"), port=0)))
    while not hasattr(app, "routes"):  # through the middlewares, to the router
        app = app.app
    found: list[tuple[str, str]] = []
    for route in app.routes:
        if isinstance(route, Route):
            found += [(route.path, m) for m in sorted(route.methods or ()) if m != "HEAD"]
        elif isinstance(route, WebSocketRoute):
            found.append((route.path, "WS"))
    return found


def need_of(path: str, method: str) -> Need:
    """The need the guard applies (authz.py `guard`: the method's, else `*`)."""
    needs = NEEDS[path]
    need = needs.get("GET" if method == "WS" else method) or needs.get("*")
    assert need is not None, f"{method} {path}: no need declared for this method"
    return need


@dataclass
class Walk:
    at: AclAgent
    ids: dict[str, str]
    failures: list[str]

    def url(self, path: str, method: str, params: tuple[tuple[str, str], ...] = ()) -> str:
        ids = {**self.ids, **dict(params)}
        if path.startswith("/v1/node/"):
            ids["id"] = ids["node"]
        elif path.startswith("/v1/evaluation/"):
            ids["id"] = ids["eval"]
        elif path.startswith("/v1/deployment/"):
            ids["id"] = ids["deployment"]
        elif path.startswith("/v1/scaling/policy/"):
            ids["id"] = "no-such-policy"
        if path == "/v1/service/{rest:path}":
            ids["rest"] = "walk-svc/no-such-id" if method == "DELETE" else "walk-svc"
        if path.startswith("/v1/acl/"):  # tokens and roles by ID: none of the walk's
            ids["alloc"] = ids.get("id", NOT_A_TOKEN)
        url = path
        for name, value in (("job_id:path", ids["job_id"]), ("path:path", "walk/x"),
                            ("rest:path", ids.get("rest", "index.html")), ("id", ids["alloc"]),
                            ("alloc_id", ids["alloc"]), ("name", ids.get("name", "default")),
                            ("accessor", ids.get("accessor", NOT_A_TOKEN))):
            url = url.replace("{" + name + "}", quote(value, safe="/"))
        assert "{" not in url, f"{path}: a path parameter the walk does not know"
        return url

    async def ask(self, path: str, method: str, secret: str | None,
                  checked: Checked | None = None) -> Answer:
        url = self.url(path, method, checked.params if checked else ())
        if method == "WS":
            host, port = self.at.host_port
            query = checked.query.replace("{alloc}", self.ids["alloc"]) if checked else ""
            return await ws_answer(host, port, url + (f"?{query}" if query else ""), secret,
                                   checked.message if checked else None)
        body = None
        if checked is not None and checked.body is not None:
            body = json.dumps(checked.body).encode()
        elif method in ("PUT", "POST"):
            body = b"{}"
        return await http_answer(self.at.admin, method, url, secret, body)

    def expect(self, answer: Answer, refused: bool, what: str) -> None:
        if answer.refused != refused:
            self.failures.append(f"{what}: {'not ' if refused else ''}refused "
                                 f"({answer.status} {answer.text.strip()!r})")


async def _fixture(at: AclAgent) -> dict[str, str]:
    admin = at.admin
    answer = (await admin.post("/v1/jobs", json=rolled_out(WALK_JOB))).json()
    alloc = await wait_status(admin, WALK_JOB, "running")
    node = (await admin.get("/v1/nodes")).json()[0]["ID"]
    deployment = (await admin.get(f"/v1/job/{WALK_JOB}/deployment")).json()
    assert deployment is not None  # its first version rolls out
    return {"job_id": WALK_JOB, "alloc": alloc["ID"], "eval": answer["EvalID"], "node": node,
            "deployment": deployment["ID"]}


async def walk(at: AclAgent) -> list[str]:
    w = Walk(at, await _fixture(at), [])
    resolver = at.resolver
    broad = MANAGEMENT.denies
    grants: list[tuple[str, str, str, Checked | None]] = []
    for path, method in served_routes():
        what = f"{method} {path}"
        need = need_of(path, method)
        if need is PUBLIC:
            w.expect(await w.ask(path, method, NOT_A_TOKEN), False, f"{what} (made-up token)")
            continue
        w.expect(await w.ask(path, method, NOT_A_TOKEN), True, f"{what} (made-up token)")
        if need is FILTERED:
            grants.append((path, method, "", None))
            continue
        if need is MANAGEMENT:
            for secret in ("", resolver.token(broad)):
                w.expect(await w.ask(path, method, secret), True, f"{what} (client token)")
            grants.append((path, method, resolver.management(), None))
            continue
        checked = IN_HANDLER_ROUTES.get((path, method)) if need is IN_HANDLER else None
        if need is IN_HANDLER and checked is None:
            w.failures.append(f"{what}: checked by its handler, but IN_HANDLER_ROUTES "
                              "(tests/test_authz_routes.py) has no entry for it")
            continue
        if checked is not None and not checked.denies:
            if checked.anonymous_refused:
                w.expect(await w.ask(path, method, "", checked), True, f"{what} (anonymous)")
            else:
                grants.append((path, method, "", checked))
            continue
        grant = checked.grants if checked else need.grants
        denies = checked.denies if checked else (need.denies,)
        if not grant or not all(denies):
            w.failures.append(f"{what}: its need ({need.text}) declares no policy that "
                              "grants it, or none that it refuses")
            continue
        for policy in denies:
            w.expect(await w.ask(path, method, resolver.token(policy), checked), True,
                     f"{what} (refused by {need.text}) with\n{policy}")
        w.expect(await w.ask(path, method, "", checked), True, f"{what} (anonymous)")
        grants.append((path, method, resolver.management() if grant == MANAGEMENT_GRANT
                       else resolver.token(grant), checked))

    def order(item: tuple[str, str, str, Checked | None]) -> tuple[int, int]:
        path, method = item[0], item[1]
        last = LAST.index(path) + 1 if path in LAST and method != "GET" else 0
        return (last, method not in ("GET", "WS"))

    for path, method, secret, checked in sorted(grants, key=order):
        w.expect(await w.ask(path, method, secret, checked), False,
                 f"{method} {path} (granted)")
    return w.failures


async def test_every_route_refuses_what_its_need_refuses_and_grants_what_it_grants(
        tmp_path: Path) -> None:
    with trio.fail_after(120):
        async with acl_agent(tmp_path / "data") as at:
            failures = await walk(at)
    assert not failures, "\n".join(failures)


def test_the_walk_sees_the_routes_every_agent_has() -> None:
    # The introspection must find the routes, or the walk above walks nothing.
    served = set(served_routes())
    assert {("/v1/jobs", "GET"), ("/v1/jobs", "PUT"), (JOB, "DELETE"),
            ("/v1/event/ws", "WS"), ("/v1/client/allocation/{id}/exec", "WS"),
            ("/v1/deployment/fail/{id}", "PUT")} <= served
    assert len(served) > 100


def test_every_in_handler_entry_is_a_route_the_app_serves() -> None:
    # An entry left behind by a route that is gone (or whose need is declared now) would
    # make the table above say what no route does.
    served = set(served_routes())
    stale = [key for key in IN_HANDLER_ROUTES
             if key not in served or need_of(*key) is not IN_HANDLER]
    assert not stale, stale
