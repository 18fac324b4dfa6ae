# A service that keeps coming back, as supervisord's "autorestart" does: the restart block
# retries the task in place twice, then the allocation fails and the reschedule block
# replaces it with a new one, after 10 s, 20 s, 40 s … at most 5 minutes apart, forever.
# The job-level block applies to every group; a group's own block overrides the fields it sets.
job "flaky-web" {
  type = "service"

  reschedule {
    delay          = "10s"
    delay_function = "exponential"
    max_delay      = "5m"
    unlimited      = true
  }

  group "web" {
    restart {
      attempts = 2
      delay    = "5s"
      interval = "1m"
      mode     = "fail"
    }

    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo serving; sleep 30; echo crashed >&2; exit 1"]
      }
    }
  }

  # Reports are worth two tries an hour, no more.
  group "report" {
    reschedule {
      attempts       = 2
      interval       = "1h"
      delay_function = "constant"
      unlimited      = false
    }

    task "send" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo sending; sleep 3600"]
      }
    }
  }
}
