# A periodic batch job: every night at 02:30 New York time, never two runs at once.
# Each launch registers a child job "backup/periodic-<unix time>"; the parent only schedules.
# On the spring-forward night 02:30 does not exist and the run is skipped, as Nomad does;
# `yurt job periodic force backup` launches one now.
job "backup" {
  type = "batch"

  periodic {
    crons            = ["30 2 * * *"]
    time_zone        = "America/New_York"
    prohibit_overlap = true
  }

  group "db" {
    task "dump" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "date -u > $${NOMAD_TASK_DIR}/dumped-at"]
      }
    }
  }
}
