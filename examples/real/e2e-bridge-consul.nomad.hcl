# Shape: Nomad's e2e and Consul-Connect tutorials' inputs: a bridge network and a service with
# provider "consul" (valid: yurt keeps the service in its native catalogue; a bridge network
# stays unplaced on yurt's nodes, which have no CNI plugins).
job "countdash-api" {
  datacenters = ["dc1"]

  group "api" {
    network {
      mode = "bridge"

      port "http" {
        to = 9001
      }
    }

    service {
      name     = "count-api"
      port     = "http"
      provider = "consul"

      check {
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "python3"
        args    = ["-m", "http.server", "9001"]
      }
    }
  }
}
