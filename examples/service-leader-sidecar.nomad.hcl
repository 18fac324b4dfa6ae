# A long-running service: the leader serves HTTP on loopback, a sidecar (prestart, sidecar =
# true) stays up beside it. When the leader dies, the whole group is stopped, sidecar last.
job "web" {
  type        = "service"
  datacenters = ["dc1"]

  meta {
    owner = "team-a"
  }

  group "frontend" {
    count = 1

    task "server" {
      driver = "raw_exec"
      leader = true
      config {
        command = "/usr/bin/env"
        args    = ["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1"]
      }
      env {
        APP_ENV = "prod"
        NODE    = "${node.unique.name}"
      }
      kill_signal  = "SIGTERM"
      kill_timeout = "5s"
      resources {
        cpu    = 500
        memory = 256
      }
    }

    task "log-shipper" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "while :; do date; sleep 5; done"]
      }
    }
  }
}
