# Shape: a home-lab service as people publish them (a media or dashboard app on one box): a
# host volume mounted into the task, a static port, a Nomad service with an HTTP check whose
# name and tags use the job's variables. Needs `volume`/`volume_mount` (being added to yurt).
job "homelab-dashboard" {
  datacenters = ["dc1"]
  type        = "service"

  group "dashboard" {
    volume "config" {
      type      = "host"
      source    = "dashboard-config"
      read_only = false
    }

    network {
      port "http" {
        static = 3000
      }
    }

    service {
      name     = "${NOMAD_JOB_NAME}-http"
      port     = "http"
      provider = "nomad"
      tags     = ["homelab", "alloc-${NOMAD_ALLOC_INDEX}"]

      check {
        type     = "http"
        path     = "/"
        interval = "30s"
        timeout  = "5s"
      }
    }

    task "app" {
      driver = "raw_exec"

      volume_mount {
        volume      = "config"
        destination = "/config"
      }

      config {
        command = "python3"
        args    = ["-m", "http.server", "${NOMAD_PORT_http}"]
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
