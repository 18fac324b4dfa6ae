# python-nomad CI's `nomad init` example, as yurt runs it: raw_exec instead of docker. The task
# ignores SIGUSR1 (the suite signals it and expects it to keep running, as redis does).
job "example" {
  datacenters = ["dc1"]
  type = "service"
  group "cache" {
    count = 1
    task "redis" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap '' USR1; exec sleep 3600"]
      }
      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
