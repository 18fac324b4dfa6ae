"""The port variables of a task's environment (layer 0): Nomad's addPorts per label, the
task's own `env` block and driver config interpolating them, and IPv6 host addresses
joined as Go's net.JoinHostPort joins them."""

from __future__ import annotations

from yurt.runtime.client.taskenv import build_env, interpolate, port_env
from yurt.runtime.jobspec import parse_job
from yurt.runtime.structs import Allocation
from yurt.runtime.structs.network import AllocatedSharedResources, PortMapping

JOB = '''job "web" {
  group "g" {
    network {
      port "http" {}
      port "db" { to = 6379 }
    }
    task "t" {
      driver = "mock_driver"
      env {
        LISTEN = "${NOMAD_ADDR_http}"
        UPSTREAM = "db at ${NOMAD_HOST_PORT_db}, seen as ${NOMAD_PORT_db}"
      }
    }
  }
}'''


def alloc(*ports: PortMapping) -> Allocation:
    job = parse_job(JOB)
    return Allocation(id="0123456789ab", name="web.g[0]", job_id="web", job=job,
                      task_group="g", allocated_shared=AllocatedSharedResources(ports=list(ports)))


def test_each_label_gets_nomads_variables() -> None:
    env = port_env(alloc(PortMapping(label="http", value=20123, host_ip="10.0.0.5"),
                         PortMapping(label="db", value=20456, to=6379, host_ip="10.0.0.5")))
    assert env == {
        "NOMAD_ADDR_http": "10.0.0.5:20123", "NOMAD_HOST_ADDR_http": "10.0.0.5:20123",
        "NOMAD_IP_http": "10.0.0.5", "NOMAD_HOST_IP_http": "10.0.0.5",
        "NOMAD_PORT_http": "20123", "NOMAD_ALLOC_PORT_http": "20123",
        "NOMAD_HOST_PORT_http": "20123",
        "NOMAD_ADDR_db": "10.0.0.5:20456", "NOMAD_HOST_ADDR_db": "10.0.0.5:20456",
        "NOMAD_IP_db": "10.0.0.5", "NOMAD_HOST_IP_db": "10.0.0.5",
        "NOMAD_PORT_db": "6379", "NOMAD_ALLOC_PORT_db": "6379",
        "NOMAD_HOST_PORT_db": "20456"}


def test_an_ipv6_address_is_bracketed_in_addresses() -> None:
    env = port_env(alloc(PortMapping(label="http", value=20123, host_ip="fd00::1")))
    assert env["NOMAD_ADDR_http"] == "[fd00::1]:20123"
    assert env["NOMAD_IP_http"] == "fd00::1"


def test_no_network_no_port_variables() -> None:
    assert port_env(Allocation(id="x", job=parse_job(JOB), task_group="g")) == {}


def test_the_env_block_and_driver_config_interpolate_ports() -> None:
    a = alloc(PortMapping(label="http", value=20123, host_ip="10.0.0.5"),
              PortMapping(label="db", value=20456, to=6379, host_ip="10.0.0.5"))
    assert a.job is not None
    task = a.job.task_groups[0].tasks[0]
    env = build_env(a, task, task_dir=None, node=None)
    assert env["LISTEN"] == "10.0.0.5:20123"
    assert env["UPSTREAM"] == "db at 20456, seen as 6379"
    assert interpolate({"args": ["--port", "${NOMAD_PORT_http}"]}, env) == {
        "args": ["--port", "20123"]}
