"""Service and check fields interpolated as Nomad's client/taskenv/services.go
`InterpolateService` does (layer 0), and port labels with characters invalid in a variable name
cleaned as Nomad's client/taskenv/env.go `buildEnv` cleans them (`product-api` →
`NOMAD_PORT_product_api`)."""

from __future__ import annotations

from yurt.runtime.client.checks.registration import (
    check_id,
    check_job,
    every_service,
    interpolated,
    registrations,
)
from yurt.runtime.client.taskenv import build_env, clean_env_name, interpolate
from yurt.runtime.jobspec import parse_job
from yurt.runtime.structs import Allocation, Node
from yurt.runtime.structs.network import AllocatedSharedResources, PortMapping

JOB = '''job "shop" {
  meta { team = "red" }
  group "g" {
    network {
      port "product-api" {}
    }
    service {
      name = "${NOMAD_JOB_NAME}-web"
      port = "product-api"
      tags = ["ns-${NOMAD_NAMESPACE}", "i${NOMAD_ALLOC_INDEX}", "${NOMAD_META_team}"]
      meta { index = "${NOMAD_ALLOC_INDEX}" }
      check {
        name     = "${NOMAD_GROUP_NAME}-alive"
        type     = "http"
        path     = "/health/${NOMAD_ALLOC_INDEX}"
        interval = "10s"
        timeout  = "2s"
        header { X-Job = ["${NOMAD_JOB_ID}"] }
      }
    }
    task "t" {
      driver = "mock_driver"
      env { API = "http://${NOMAD_ADDR_product_api}/" }
      service {
        name = "${NOMAD_TASK_NAME}-api"
        port = "product-api"
        tags = ["${NOMAD_PORT_product_api}"]
      }
    }
  }
}'''

NODE = Node(id="n1", name="n1", datacenter="dc2",
            attributes={"unique.network.ip-address": "10.0.0.5"})


def alloc() -> Allocation:
    return Allocation(id="a1", name="shop.g[3]", job_id="shop", task_group="g",
                      job=parse_job(JOB), namespace="prod",
                      allocated_shared=AllocatedSharedResources(ports=[
                          PortMapping(label="product-api", value=23456, host_ip="10.0.0.5")]))


def test_group_service_name_tags_meta_and_check_are_interpolated() -> None:
    a = alloc()
    assert a.job is not None
    group = a.job.task_groups[0]
    [reg] = registrations(a, group, group.services, None, NODE)
    assert reg.service_name == "shop-web"
    assert reg.tags == ["ns-prod", "i3", "red"]
    assert (reg.address, reg.port) == ("10.0.0.5", 23456)
    [service] = interpolated(a, group, group.services, None, NODE)
    assert service.meta == {"index": "3"}
    [check] = service.checks
    assert (check.name, check.path, check.header) == ("g-alive", "/health/3",
                                                      {"X-Job": ["shop"]})
    job = check_job(a, group, service, check, NODE, lambda _: None)
    assert (job.template.service, job.template.check) == ("shop-web", "g-alive")
    assert job.http is not None
    assert job.http.path == "/health/3"
    assert job.template.id == check_id(a.id, group.name, check)


def test_task_service_sees_the_tasks_environment() -> None:
    a = alloc()
    assert a.job is not None
    group = a.job.task_groups[0]
    [reg] = registrations(a, group, group.tasks[0].services, "t", NODE)
    assert (reg.service_name, reg.tags) == ("t-api", ["23456"])
    assert [s.name for s in every_service(a, group, NODE)] == ["shop-web", "t-api"]


def test_port_label_with_a_dash_gets_cleaned_variable_names() -> None:
    a = alloc()
    assert a.job is not None
    task = a.job.task_groups[0].tasks[0]
    env = build_env(a, task, task_dir=None, node=NODE)
    assert env["NOMAD_PORT_product_api"] == "23456"
    assert env["NOMAD_HOST_PORT_product_api"] == "23456"
    assert env["NOMAD_ADDR_product_api"] == "10.0.0.5:23456"
    assert env["NOMAD_IP_product_api"] == "10.0.0.5"
    assert "NOMAD_PORT_product-api" not in env
    assert env["API"] == "http://10.0.0.5:23456/"
    assert interpolate("${NOMAD_PORT_product_api}", env) == "23456"


def test_clean_env_name_is_nomads() -> None:
    assert clean_env_name("NOMAD_PORT_product-api") == "NOMAD_PORT_product_api"
    assert clean_env_name("NOMAD_META_a.b c/d") == "NOMAD_META_a.b_c_d"
    assert clean_env_name("9lives") == "_lives"
