# Shape: Nomad's e2e inputs (small raw_exec batch jobs with a job-level `task` block and no
# group, which jobspec2 wraps in a group of the task's name).
job "lone-task" {
  datacenters = ["dc1"]
  type        = "batch"

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  task "sleep" {
    driver = "raw_exec"

    config {
      command = "/bin/sleep"
      args    = ["1"]
    }
  }
}
