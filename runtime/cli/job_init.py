"""`yurt job init [-short] [FILE]`: write an example job file, as Nomad's command/job_init.go.

The file is `example.nomad.hcl` unless named; an existing file is never overwritten (Nomad's
"Job 'FILE' already exists", exit 1). The examples are yurt's own, shaped as Nomad's
command/asset/example*.nomad.hcl (job "example", group "cache", task "redis", a service with
an update block) but runnable here: the task is `raw_exec` running a shell loop, not docker
running redis. `-template NAME` writes the `template` item of the Nomad variable
`nomad/job-templates/NAME`, and `-list-templates` lists them, as Nomad's do. `-connect` is
refused: yurt has no Consul Connect.

Exit codes: 0 written, 1 the file exists or cannot be written, a template is missing or
malformed; 2 bad usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import click

from yurt.runtime.cli.output import echo, fail
from yurt.runtime.errors import EXIT_USAGE

#: Nomad's `DefaultInitName`.
DEFAULT_NAME: Final = "example.nomad.hcl"
TEMPLATE_PREFIX: Final = "nomad/job-templates/"

EXAMPLE_SHORT: Final = '''job "example" {

  group "cache" {
    network {
      port "db" {}
    }

    task "redis" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo serving on $NOMAD_PORT_db; while :; do sleep 5; done"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
'''

EXAMPLE: Final = '''# There can only be a single job definition per file. This job is named
# "example" so it will create a job with the ID and Name "example".

# The "job" block is the top-most configuration option in the job
# specification. A job is a declarative specification of tasks that Nomad
# (and yurt) should run. Jobs have a globally unique name, one or many task
# groups, which are themselves collections of one or many tasks.
job "example" {
  # The "datacenters" parameter specifies the list of datacenters which should
  # be considered when placing this task. "*" is every datacenter.
  datacenters = ["*"]

  # The "type" parameter controls the type of job, which impacts the scheduler's
  # decision on placement: "service" (runs until stopped), "batch" (runs to
  # completion) or "system" (one per node).
  type = "service"

  # The "update" block specifies the update strategy of task groups: how many
  # allocations are replaced at a time, and how long a new one must be healthy.
  update {
    max_parallel      = 1
    min_healthy_time  = "10s"
    healthy_deadline  = "3m"
    progress_deadline = "10m"
    auto_revert       = false
    canary            = 0
  }

  # The "group" block defines a series of tasks that should be co-located on
  # the same client. Each instance of a group is an allocation.
  group "cache" {
    # The "count" parameter specifies the number of the task groups that should
    # be running under this group. This value must be non-negative.
    count = 1

    # The "network" block asks for a port; its value is in $NOMAD_PORT_db.
    network {
      port "db" {}
    }

    # The "service" block registers the port in yurt's own service catalog
    # (`yurt service list`), as Nomad's "nomad" provider does.
    service {
      name     = "redis-cache"
      tags     = ["global", "cache"]
      port     = "db"
      provider = "nomad"
    }

    # The "restart" block configures a group's behavior on task failure.
    restart {
      attempts = 2
      interval = "30m"
      delay    = "15s"
      mode     = "fail"
    }

    # The "task" block creates an individual unit of work, such as a process.
    task "redis" {
      # raw_exec runs the command as a process on this machine.
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo serving on $NOMAD_PORT_db; while :; do sleep 5; done"]
      }

      # The "resources" block describes what the task needs: CPU in MHz and
      # memory in MB.
      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
'''


def _list_templates() -> None:
    from yurt.runtime.cli.api_client import api, call

    with api() as client:
        found = call(client, "GET", "/v1/vars", params={"prefix": TEMPLATE_PREFIX})
    if not found:
        fail("No variables in nomad/job-templates")
    echo("Use yurt job init -template=<template> with any of the following:")
    for v in found:
        echo(f"  {v['Path'].removeprefix(TEMPLATE_PREFIX)}")


def _template(name: str) -> str:
    from urllib.parse import quote

    from yurt.runtime.cli.api_client import api, fail_on_error

    with api() as client:
        response = client.request("GET", f"/v1/var/{quote(TEMPLATE_PREFIX + name)}")
        if response.status_code == 404:
            fail("Variable not found")
        fail_on_error(response, "Error retrieving variable")
        items = response.json().get("Items") or {}
    if "template" not in items:
        fail(f'Job template "{name}" is malformed and is missing a template field')
    echo(f"Initializing a job template from {name}")
    return str(items["template"])


def register(job: click.Group) -> None:
    """Attach `init` to yurt's `job` group."""

    @job.command("init")
    @click.argument("filename", metavar="[FILE]", required=False, default=DEFAULT_NAME)
    @click.option("--short", is_flag=True, help="A minimal job file, no comments.")
    @click.option("--connect", is_flag=True,
                  help="Refused: yurt has no Consul Connect.")
    @click.option("--template", "template", default="", metavar="NAME",
                  help="Write the job template kept in the variable "
                       "nomad/job-templates/NAME.")
    @click.option("--list-templates", "list_templates", is_flag=True,
                  help="List the job templates in nomad/job-templates/.")
    def job_init(filename: str, short: bool, connect: bool, template: str,
                 list_templates: bool) -> None:
        """Write an example job file (example.nomad.hcl unless FILE is given)."""
        if connect:
            fail("-connect is not supported: yurt has no Consul Connect", EXIT_USAGE)
        path = Path(filename)
        if list_templates:
            _list_templates()
            return
        if path.exists() or path.is_symlink():
            fail(f"Job '{filename}' already exists")
        text = _template(template) if template else EXAMPLE_SHORT if short else EXAMPLE
        try:
            with path.open("x", encoding="utf-8") as fh:  # never over a file made meanwhile
                fh.write(text)
        except OSError as e:
            fail(f"Failed to write '{filename}': {e.strerror or e}")
        echo(f"Example job file written to {filename}")
