# Shape: HashiCorp's getting-started tutorial jobs (pytechco-employee): a parameterized batch
# job with optional meta and a task-level restart block whose attempts × delay exceed its
# interval (valid in Nomad, which checks only the group's policy).
job "pytechco-employee" {
  type = "batch"

  parameterized {
    meta_optional = ["employee_id", "employee_type"]
  }

  group "ptc-employee" {
    count = 1

    task "ptc-employee-task" {
      restart {
        attempts = 2
        delay    = "15s"
        interval = "10s"
        mode     = "fail"
      }

      template {
        data        = <<EOH
{{ range nomadService "redis-svc" }}
REDIS_HOST={{ .Address }}
REDIS_PORT={{ .Port }}
EMPLOYEE_ID={{ env "NOMAD_META_employee_id" }}
EMPLOYEE_TYPE={{ env "NOMAD_META_employee_type" }}
{{ end }}
EOH
        destination = "local/env.txt"
        env         = true
      }

      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo employee $EMPLOYEE_ID"]
      }
    }
  }
}
