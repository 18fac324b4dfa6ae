"""From service blocks to registrations and check jobs (layer 0): Nomad's service IDs,
addresses from the allocation's assigned ports (HostIP and host port by label), numeric
ports on the node's address, custom addresses, check IDs that depend on the check's
definition, and `expected_checks` for allocation health."""

from __future__ import annotations

import msgspec

from yurt.runtime.client.checks.registration import (
    address_of,
    check_id,
    check_job,
    expected_checks,
    registrations,
)
from yurt.runtime.jobspec import parse_job
from yurt.runtime.structs import Allocation, Node
from yurt.runtime.structs.network import AllocatedSharedResources, PortMapping

JOB = '''job "web" {
  group "g" {
    network {
      port "http" {}
      port "admin" {}
    }
    service {
      name = "front"
      port = "http"
      tags = ["a"]
      check {
        type = "http"
        path = "/health"
        interval = "10s"
        timeout = "2s"
      }
      check {
        name = "ready"
        type = "tcp"
        port = "admin"
        interval = "10s"
        timeout = "2s"
        on_update = "ignore"
      }
    }
    service {
      name = "fixed"
      port = "8080"
      address = "db.internal"
    }
    task "t" {
      driver = "mock_driver"
      service {
        name = "api"
        check {
          type = "script"
          command = "/bin/true"
          interval = "10s"
          timeout = "2s"
        }
      }
    }
  }
}'''

NODE = Node(id="n1", name="n1", datacenter="dc2",
            attributes={"unique.network.ip-address": "10.0.0.5"})


def alloc() -> Allocation:
    """The job placed: its ports assigned by label, as the scheduler assigns them."""
    return Allocation(id="a1", name="web.g[0]", job_id="web", task_group="g",
                      job=parse_job(JOB), namespace="default",
                      allocated_shared=AllocatedSharedResources(ports=[
                          PortMapping(label="http", value=23456, to=80, host_ip="127.0.0.9"),
                          PortMapping(label="admin", value=23457)]))


def test_registrations_take_ids_and_addresses_as_nomad_does() -> None:
    a = alloc()
    assert a.job is not None
    group = a.job.task_groups[0]
    front, fixed = registrations(a, group, group.services, None, NODE)
    assert front.id == "_nomad-task-a1-group-g-front-http"
    assert (front.address, front.port, front.tags) == ("127.0.0.9", 23456, ["a"])
    assert (front.node_id, front.datacenter, front.job_id, front.alloc_id) == (
        "n1", "dc2", "web", "a1")
    assert fixed.id == "_nomad-task-a1-group-g-fixed-8080"
    assert (fixed.address, fixed.port) == ("db.internal", 8080)
    (api,) = registrations(a, group, group.tasks[0].services, "t", NODE)
    assert api.id == "_nomad-task-a1-t-api-"
    assert (api.address, api.port) == ("10.0.0.5", 0)


def test_addresses_of_checks() -> None:
    a = alloc()
    assert address_of(a, NODE, "admin") == ("10.0.0.5", 23457)  # no HostIP: the node's
    assert address_of(a, NODE, "9000") == ("10.0.0.5", 9000)
    assert address_of(a, NODE, "http", "custom") == ("custom", 23456)


def test_check_ids_follow_the_definition_and_jobs_their_targets() -> None:
    a = alloc()
    assert a.job is not None
    group = a.job.task_groups[0]
    front = group.services[0]
    http, tcp = front.checks
    first = check_id("a1", "g", http)
    assert len(first) == 64
    assert check_id("a1", "g", http) == first
    assert check_id("a2", "g", http) != first
    assert check_id("a1", "g", msgspec.structs.replace(http, path="/other")) != first
    job = check_job(a, group, front, http, NODE, lambda r: None)
    assert job.http is not None
    assert (job.http.host, job.http.port, job.http.url()) == (
        "127.0.0.9", 23456, "http://127.0.0.9:23456/health")
    assert (job.interval, job.timeout, job.template.status) == (10.0, 2.0, "pending")
    assert (job.template.group, job.template.service, job.template.mode) == (
        "web.g[0]", "front", "healthiness")
    ready = check_job(a, group, front, tcp, NODE, lambda r: None)
    assert ready.tcp == ("10.0.0.5", 23457)
    assert ready.template.mode == "readiness"


def test_expected_checks_leave_readiness_checks_out() -> None:
    assert expected_checks(alloc()) == 2  # front's http and api's script; not "ready"
    assert expected_checks(Allocation(id="x")) == 0
