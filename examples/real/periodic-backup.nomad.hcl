# Shape: a nightly backup as operators publish them: a periodic batch job in a time zone,
# overlap prohibited, a template-rendered script in local/ run by a bare command name, and
# the backup's target taken from job meta.
job "nightly-backup" {
  type = "batch"

  meta {
    target = "/srv/backups"
  }

  periodic {
    crons            = ["30 2 * * *"]
    time_zone        = "Europe/Berlin"
    prohibit_overlap = true
  }

  group "backup" {
    restart {
      attempts = 1
      delay    = "30s"
      interval = "10m"
      mode     = "fail"
    }

    task "dump" {
      driver = "raw_exec"

      template {
        data        = <<EOT
#!/bin/sh
set -eu
echo "backup of {{ env "NOMAD_JOB_NAME" }} to {{ env "NOMAD_META_target" }}"
EOT
        destination = "local/backup.sh"
        perms       = "0755"
      }

      config {
        command = "backup.sh"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
