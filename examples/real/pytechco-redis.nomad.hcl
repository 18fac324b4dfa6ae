# Shape: HashiCorp's getting-started tutorial jobs (pytechco-redis): a Redis service registered
# with the Nomad provider, a static-looking port label, the "service" job type. Written anew;
# raw_exec stands in for the tutorial's docker driver.
job "pytechco-redis" {
  type = "service"

  group "ptc-redis" {
    count = 1

    network {
      port "redis" {
        to = 6379
      }
    }

    service {
      name     = "redis-svc"
      port     = "redis"
      provider = "nomad"
    }

    task "redis-task" {
      driver = "raw_exec"

      config {
        command = "redis-server"
        args    = ["--port", "${NOMAD_PORT_redis}"]
      }
    }
  }
}
