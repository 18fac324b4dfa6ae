"""The guard's parts as pure logic (layer 1): where a request's secret is read from, each
declared need against the policies it says grant and refuse it, the needs that read the
query or the state (Nomad's `Deregister` and `purge`, a deployment's namespace, `*`), and
the event stream's per-topic rule.

The route walk (test_authz_routes.py) asks the same through a real agent; here every need
of the table is asked, a yurt server's forwards too (they are not routes of an agent's app).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from starlette.requests import Request

from yurt.runtime.api.authz import (
    BROAD_POLICY,
    IDENTITY_KEY,
    MANAGEMENT,
    Need,
    deployment_op,
    level,
    namespace_op,
    namespace_op_or_all,
    namespace_op_unless,
    namespace_policy,
    path_namespace,
    request_secret,
)
from yurt.runtime.api.authz_table import ALLOC_BY_OP, ALLOC_FORWARD, FS_BY_OP, FS_FORWARD, NEEDS
from yurt.runtime.api.events import _acl_filter
from yurt.runtime.eventstream import Event
from yurt.runtime.server.acl.acl import MANAGEMENT_ACL, Acl, compile_acl
from yurt.runtime.server.acl.identity import Identity
from yurt.runtime.server.acl.policy import parse_policy


def acl_of(policy: str) -> Acl:
    return compile_acl([parse_policy(policy)])


ANONYMOUS = compile_acl([])


def scope(query: str = "", kind: str = "http", headers: list[tuple[bytes, bytes]] | None = None,
          **params: str) -> dict[str, Any]:
    return {"type": kind, "query_string": query.encode(), "headers": headers or [],
            "path_params": params}


def in_default(kind: str, object_id: str) -> str | None:
    return "default"


def nowhere(kind: str, object_id: str) -> str | None:
    return None


def meets(need: Need, acl: Acl, sc: dict[str, Any] | None = None,
          where: Any = in_default) -> bool:
    assert need.check is not None
    return need.check(acl, sc if sc is not None else scope(), where)


# ---------------------------------------------------------------------- request_secret

def test_the_secret_is_the_nomad_token_header() -> None:
    assert request_secret(scope(headers=[(b"x-nomad-token", b" s3cret ")])) == "s3cret"


def test_a_bearer_authorization_carries_the_secret_when_no_nomad_header_does() -> None:
    assert request_secret(scope(headers=[(b"authorization", b"Bearer s3cret")])) == "s3cret"
    assert request_secret(scope(headers=[(b"authorization", b"bearer s3cret")])) == "s3cret"
    both = [(b"x-nomad-token", b"first"), (b"authorization", b"Bearer second")]
    assert request_secret(scope(headers=both)) == "first"


def test_other_authorization_schemes_carry_no_secret() -> None:
    assert request_secret(scope(headers=[(b"authorization", b"Basic dXNlcjpwYXNz")])) == ""


def test_a_websocket_may_carry_the_secret_as_its_subprotocol() -> None:
    encoded = base64.urlsafe_b64encode(b"s3cret/+").rstrip(b"=")
    offered = [(b"sec-websocket-protocol", b"yurt-events, x-nomad-token." + encoded)]
    assert request_secret(scope(kind="websocket", headers=offered)) == "s3cret/+"
    # Only a websocket's: a plain request naming that header carries none.
    assert request_secret(scope(headers=offered)) == ""
    garbled = [(b"sec-websocket-protocol", b"x-nomad-token.!!!")]
    assert request_secret(scope(kind="websocket", headers=garbled)) == ""


@pytest.mark.parametrize("query", ["token=s3cret", "X-Nomad-Token=s3cret",
                                   "x-nomad-token=s3cret&secret=s3cret", "auth_token=s3cret"])
def test_the_query_string_never_carries_the_secret(query: str) -> None:
    assert request_secret(scope(query)) == ""
    assert request_secret(scope(query, kind="websocket")) == ""


def test_no_secret_is_the_anonymous_token() -> None:
    assert request_secret(scope()) == ""


# ---------------------------------------------------------------------- every need

def _declared() -> list[tuple[str, str, Need]]:
    return [(path, method, need) for path, needs in NEEDS.items()
            for method, need in needs.items() if need.grants]


@pytest.mark.parametrize(("path", "method", "need"), _declared(),
                         ids=[f"{m} {p}" for p, m, _ in _declared()])
def test_each_need_is_met_by_its_grants_and_not_by_its_denies(
        path: str, method: str, need: Need) -> None:
    params = {"id": "x", "alloc_id": "x", "job_id": "j", "name": "default", "op": "x"}
    assert meets(need, acl_of(need.grants), scope(**params)), need.text
    assert not meets(need, acl_of(need.denies), scope(**params)), need.text
    assert not meets(need, ANONYMOUS, scope(**params)), need.text
    assert meets(need, MANAGEMENT_ACL, scope(**params))


@pytest.mark.parametrize(("forward", "by_op"), [(FS_FORWARD, FS_BY_OP),
                                                (ALLOC_FORWARD, ALLOC_BY_OP)])
def test_a_servers_forward_needs_what_the_nodes_own_route_needs(
        forward: Need, by_op: dict[str, Need]) -> None:
    for op, need in by_op.items():
        assert meets(forward, acl_of(need.grants), scope(op=op, id="x", alloc_id="x")), op
        assert not meets(forward, acl_of(need.denies), scope(op=op, id="x", alloc_id="x")), op
    # An operation no route has is refused, however broad the token.
    assert not meets(forward, acl_of(BROAD_POLICY), scope(op="exec", id="x", alloc_id="x"))


def test_management_only_is_not_met_by_the_broadest_client_token() -> None:
    assert not meets(MANAGEMENT, acl_of(BROAD_POLICY))
    assert meets(MANAGEMENT, MANAGEMENT_ACL)


def test_the_logs_of_an_allocation_take_read_fs_as_well() -> None:
    # client/fs_endpoint.go `logs`: read-logs or read-fs.
    logs = NEEDS["/v1/client/fs/logs/{alloc_id}"]["GET"]
    assert meets(logs, acl_of(namespace_policy("read-fs")), scope(alloc_id="x"))
    assert meets(logs, acl_of(namespace_policy("read-logs")), scope(alloc_id="x"))


# ---------------------------------------------------------------------- needs that read more

DEREGISTER = NEEDS["/v1/job/{job_id:path}"]["DELETE"]


@pytest.mark.parametrize(("query", "deregister_job", "purge_job"), [
    ("", True, True), ("purge=false", True, True), ("purge=0", True, True),
    ("purge=true", False, True), ("purge=1", False, True), ("purge=T", False, True),
    # Not a boolean: read as a purge (the handler answers it 400).
    ("purge=yes", False, True)])
def test_a_purge_is_not_granted_by_deregister_job(query: str, deregister_job: bool,
                                                  purge_job: bool) -> None:
    # nomad/job_endpoint.go `Deregister`.
    assert meets(DEREGISTER, acl_of(namespace_policy("deregister-job")),
                 scope(query)) is deregister_job
    assert meets(DEREGISTER, acl_of(namespace_policy("purge-job")), scope(query)) is purge_job
    assert meets(DEREGISTER, acl_of(namespace_policy("submit-job")), scope(query))


def test_namespace_op_unless_names_both_sets() -> None:
    need = namespace_op_unless("purge", ("submit-job",), ("deregister-job",))
    assert "purge" in need.text
    assert "deregister-job" in need.text


def test_a_deployment_action_is_checked_in_the_deployments_namespace() -> None:
    fail = NEEDS["/v1/deployment/fail/{id}"]["*"]

    def in_a(kind: str, object_id: str) -> str | None:
        return "a" if (kind, object_id) == ("deployment", "d1") else None

    in_a_only = acl_of(namespace_policy("fail-deployment", namespace="a"))
    in_default_only = acl_of(namespace_policy("fail-deployment"))
    # The request names no namespace (`default`): the deployment's is what counts.
    assert meets(fail, in_a_only, scope(id="d1"), in_a)
    assert not meets(fail, in_default_only, scope(id="d1"), in_a)
    # No such deployment: the request's namespace, so that only who may act learns it.
    assert meets(fail, in_default_only, scope(id="nope"), in_a)
    assert not meets(fail, in_a_only, scope(id="nope"), in_a)
    assert deployment_op("x").text.endswith("(the deployment's namespace)")


def test_an_allocation_route_is_checked_in_the_allocations_namespace() -> None:
    stop = NEEDS["/v1/allocation/{id}/stop"]["*"]

    def in_b(kind: str, object_id: str) -> str | None:
        return "b" if kind == "alloc" else None

    assert meets(stop, acl_of(namespace_policy("alloc-lifecycle", namespace="b")),
                 scope(id="a1"), in_b)
    assert not meets(stop, acl_of(namespace_policy("alloc-lifecycle")), scope(id="a1"), in_b)
    assert not meets(stop, acl_of(namespace_policy("alloc-lifecycle", namespace="b")),
                     scope(id="a1"), nowhere)


def test_all_namespaces_is_granted_by_any_namespace_that_grants() -> None:
    need = namespace_op("read-job")
    in_a = acl_of(namespace_policy("read-job", namespace="a"))
    assert meets(need, in_a, scope("namespace=*"))
    assert meets(need, in_a, scope("namespace=a"))
    assert not meets(need, in_a, scope())
    assert not meets(need, ANONYMOUS, scope("namespace=*"))


def test_a_list_that_filters_all_namespaces_refuses_no_one_there() -> None:
    services = NEEDS["/v1/services"]["GET"]
    assert meets(services, ANONYMOUS, scope("namespace=*"))
    assert not meets(services, ANONYMOUS, scope())


def test_scaling_policies_take_list_jobs_and_read_job_together() -> None:
    # nomad/scaling_endpoint.go `ListPolicies`, `GetPolicy`.
    for need in (NEEDS["/v1/scaling/policies"]["GET"],
                 NEEDS["/v1/scaling/policy/{id}"]["GET"]):
        assert meets(need, acl_of(namespace_policy("list-jobs", "read-job")), scope(id="p"))
        assert not meets(need, acl_of(namespace_policy("read-job")), scope(id="p"))
        assert not meets(need, acl_of(namespace_policy("list-jobs")), scope(id="p"))
    assert namespace_op_or_all("x", ("a", "b")).text == "namespace:x, or a and b"


def test_a_namespace_is_read_with_any_capability_in_it_but_deny() -> None:
    need = path_namespace("name")
    assert meets(need, acl_of('namespace "a" { policy = "read" }'), scope(name="a"))
    assert not meets(need, acl_of('namespace "a" { policy = "deny" }'), scope(name="a"))
    assert not meets(need, acl_of('namespace "b" { policy = "write" }'), scope(name="a"))


def test_levels_read_below_write() -> None:
    read, write = level("node", "read"), level("node", "write")
    assert meets(read, acl_of('node { policy = "write" }'))
    assert meets(read, acl_of('node { policy = "read" }'))
    assert not meets(write, acl_of('node { policy = "read" }'))


# ---------------------------------------------------------------------- the event stream

def _visible(policy: str | None) -> Any:
    acl = MANAGEMENT_ACL if policy is None else acl_of(policy)
    return _acl_filter(Request({"type": "http", "query_string": b"", "headers": [],
                                IDENTITY_KEY: Identity(None, acl)}))


def _event(topic: str, namespace: str = "default", key: str = "k") -> Event:
    return Event(topic=topic, type="T", key=key, namespace=namespace)


def test_the_stream_shows_each_topic_by_nomads_rule_for_it() -> None:
    # nomad/event_endpoint.go `validateNsOp` and `Event.stream`'s variable filter.
    visible = _visible('namespace "a" {\n  capabilities = ["read-job"]\n'
                       '  variables { path "app/*" { capabilities = ["list"] } }\n}\n')
    for topic in ("Job", "Allocation", "Evaluation", "Deployment", "Service"):
        assert visible(_event(topic, "a")), topic
        assert not visible(_event(topic, "default")), topic
    assert not visible(_event("Node"))
    assert not visible(_event("NodePool"))
    assert not visible(_event("Operator"))
    assert not visible(_event("ACLToken"))
    assert visible(_event("Variable", "a", "app/db"))
    assert not visible(_event("Variable", "a", "other/db"))
    with_node = _visible('node { policy = "read" }\noperator { policy = "read" }\n')
    assert with_node(_event("Node"))
    assert with_node(_event("Operator"))
    assert not with_node(_event("Job"))
    assert _visible(None) is None  # management: the shared stream, unfiltered


def test_a_task_event_carries_its_allocations_namespace_to_the_filter() -> None:
    """yurt's `Task` topic: an allocation's task events are its namespace's, so a reader of
    another namespace does not see them (they name jobs, allocations, exit codes)."""
    from yurt.runtime.eventstream import EventBroker
    from yurt.runtime.structs import Allocation, TaskEvent

    broker = EventBroker()
    broker.task_event(Allocation(id="a1", name="w.g[0]", job_id="w", task_group="g",
                                 namespace="other"), "t", TaskEvent(type="Received"))
    (event,) = broker._history[-1].record.events
    assert event.namespace == "other"
    assert not _visible('namespace "default" { policy = "read" }')(event)
    assert _visible('namespace "other" { policy = "read" }')(event)
