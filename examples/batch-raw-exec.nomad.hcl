# A batch job on raw_exec with the three lifecycle stages Nomad has for ordering work:
# a prestart task prepares the alloc dir, the main task uses it, a poststop task cleans up.
job "etl" {
  type = "batch"

  group "nightly" {
    restart {
      attempts = 1
      delay    = "2s"
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
        args    = ["-c", "echo 'id,value' > $${NOMAD_ALLOC_DIR}/input.csv; echo '1,42' >> $${NOMAD_ALLOC_DIR}/input.csv"]
      }
    }

    task "transform" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "wc -l ${NOMAD_ALLOC_DIR}/input.csv"]
      }
      kill_timeout = "10s"
      resources {
        cpu    = 200
        memory = 64
      }
      logs {
        max_files     = 3
        max_file_size = 5
      }
    }

    task "cleanup" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/rm"
        args    = ["-f", "${NOMAD_ALLOC_DIR}/input.csv"]
      }
    }
  }
}
