# Shape: a system job as monitoring set-ups publish them (node-exporter on every client): one
# allocation per node, a static port, a service with a dashed port label whose variables Nomad
# cleans (NOMAD_PORT_metrics_http).
job "node-exporter" {
  type = "system"

  group "exporter" {
    network {
      port "metrics-http" {
        static = 9100
      }
    }

    service {
      name     = "node-exporter"
      port     = "metrics-http"
      provider = "nomad"
      tags     = ["prometheus"]
    }

    task "node-exporter" {
      driver = "raw_exec"

      config {
        command = "node_exporter"
        args    = ["--web.listen-address=:${NOMAD_PORT_metrics_http}"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
