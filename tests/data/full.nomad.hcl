# Every jobspec field yurt supports, once. full.nomad.json is the same job in Nomad API JSON.
job "full" {
  region      = "eu"
  namespace   = "prod"
  name        = "Full Job"
  type        = "service"
  priority    = 70
  datacenters = ["dc1", "dc2"]

  meta {
    owner = "team-a"
    tier  = 1
  }

  group "api" {
    count = 3

    restart {
      attempts         = 5
      interval         = "10m"
      delay            = "30s"
      mode             = "delay"
      render_templates = true
    }

    ephemeral_disk {
      size    = 500
      sticky  = true
      migrate = true
    }

    meta = {
      shard = "a"
    }

    task "server" {
      driver = "raw_exec"
      user   = "nobody"
      leader = true

      config {
        command  = "/usr/bin/env"
        args     = ["python3", "-m", "http.server", "$${NOMAD_PORT_http}"]
        work_dir = "/tmp"
      }

      env {
        PORT  = 8080
        DEBUG = false
        NODE  = "${node.unique.name}"
      }

      meta {
        role = "leader"
      }

      restart {
        attempts = 1
      }

      kill_timeout   = "1m30s"
      kill_signal    = "SIGTERM"
      shutdown_delay = "250ms"

      resources {
        cpu        = 500
        memory     = 256
        memory_max = 512

        device "nvidia/gpu" {
          count = 2
        }
        device "fpga" {}
      }

      logs {
        max_files     = 4
        max_file_size = 20
        disabled      = false
      }
    }

    task "init" {
      driver = "mock_driver"

      lifecycle {
        hook    = "prestart"
        sidecar = false
      }

      config {
        run_for   = "1s"
        exit_code = 0
      }
    }
  }
}
