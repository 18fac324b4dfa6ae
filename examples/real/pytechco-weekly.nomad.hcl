# Shape: HashiCorp's getting-started tutorial jobs (pytechco-weekly): a periodic batch job that
# forbids overlapping runs, with a string-valued cpu as HCL2 converts it.
job "pytechco-weekly" {
  type = "batch"

  periodic {
    crons            = ["0 3 * * 0"]
    prohibit_overlap = false
  }

  group "ptc-weekly" {
    count = 1

    task "ptc-weekly-task" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "date"]
      }

      resources {
        cpu    = "100"
        memory = "64"
      }
    }
  }
}
