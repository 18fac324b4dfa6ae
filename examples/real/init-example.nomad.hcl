# Shape: `nomad job init`'s example.nomad.hcl (a redis service job with a group network,
# a service with a check, update and migrate blocks, ephemeral disk and resources), written
# anew for yurt's drivers: raw_exec instead of docker, provider "nomad" services.
job "example" {
  datacenters = ["*"]
  type        = "service"

  update {
    max_parallel      = 1
    min_healthy_time  = "10s"
    healthy_deadline  = "3m"
    progress_deadline = "10m"
    auto_revert       = false
    canary            = 0
  }

  migrate {
    max_parallel     = 1
    health_check     = "checks"
    min_healthy_time = "10s"
    healthy_deadline = "5m"
  }

  group "cache" {
    count = 1

    network {
      port "db" {
        to = 6379
      }
    }

    service {
      name     = "redis-cache"
      tags     = ["global", "cache"]
      port     = "db"
      provider = "nomad"

      check {
        name     = "alive"
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 2
      interval = "30m"
      delay    = "15s"
      mode     = "fail"
    }

    ephemeral_disk {
      size = 300
    }

    task "redis" {
      driver = "raw_exec"

      config {
        command = "redis-server"
        args    = ["--port", "${NOMAD_PORT_db}"]
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
