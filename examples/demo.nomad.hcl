# The demo job: real processes on raw_exec, every lifecycle stage in one group.
#   fetch      (prestart)          prepares input in the shared alloc dir
#   heartbeat  (prestart sidecar)  runs beside the main work until it is done
#   report     (main, leader)      does the work; when it ends, the group is stopped
#   cleanup    (poststop)          runs once everything else has stopped
job "demo" {
  type = "batch"

  group "pipeline" {
    restart {
      attempts = 1
      delay    = "1s"
      interval = "1m"
      mode     = "fail"
    }

    task "fetch" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "printf 'alpha\\nbeta\\ngamma\\n' > ${NOMAD_ALLOC_DIR}/data/input.txt; echo fetched 3 records for ${NOMAD_JOB_ID}"]
      }
    }

    task "heartbeat" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo heartbeat stopping; exit 0' INT TERM; while :; do echo beat; sleep 0.2; done"]
      }
    }

    task "report" {
      driver = "raw_exec"
      leader = true
      env {
        GREETING = "report from ${NOMAD_ALLOC_NAME}"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $GREETING; while read -r line; do echo processing $line; sleep 0.3; done < ${NOMAD_ALLOC_DIR}/data/input.txt; echo done"]
      }
    }

    task "cleanup" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "rm -f ${NOMAD_ALLOC_DIR}/data/input.txt && echo cleaned up"]
      }
    }
  }
}
