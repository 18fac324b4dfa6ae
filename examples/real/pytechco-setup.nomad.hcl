# Shape: HashiCorp's getting-started tutorial jobs (pytechco-setup): a parameterized batch job
# dispatched with a budget in its meta, reading Redis through a template.
job "pytechco-setup" {
  type = "batch"

  parameterized {
    meta_required = ["budget"]
  }

  group "ptc-setup" {
    count = 1

    task "ptc-setup-task" {
      template {
        data        = <<EOH
{{ range nomadService "redis-svc" }}
REDIS_HOST={{ .Address }}
REDIS_PORT={{ .Port }}
{{ end }}
EOH
        destination = "local/env.txt"
        env         = true
      }

      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo budget ${NOMAD_META_budget}"]
      }
    }
  }
}
