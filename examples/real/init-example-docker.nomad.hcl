# Shape: `nomad job init`'s example.nomad.hcl as Nomad generates it, with the docker driver
# and its `image`/`ports` config (needs any-driver parsing, being added to yurt; placement then
# needs a node with the docker driver).
job "example-docker" {
  datacenters = ["*"]

  group "cache" {
    network {
      port "db" {
        to = 6379
      }
    }

    task "redis" {
      driver = "docker"

      config {
        image          = "redis:7"
        ports          = ["db"]
        auth_soft_fail = true
      }

      identity {
        env  = true
        file = true
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
