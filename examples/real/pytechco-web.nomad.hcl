# Shape: HashiCorp's getting-started tutorial jobs (pytechco-web): a web service whose template
# finds Redis through `nomadService` and exports it as environment variables (env = true).
job "pytechco-web" {
  type = "service"

  group "ptc-web" {
    count = 1

    network {
      port "web" {
        static = 5000
      }
    }

    service {
      name     = "ptc-web-svc"
      port     = "web"
      provider = "nomad"
    }

    task "ptc-web-task" {
      template {
        data        = <<EOH
{{ range nomadService "redis-svc" }}
REDIS_HOST={{ .Address }}
REDIS_PORT={{ .Port }}
FLASK_HOST=0.0.0.0
REFRESH_INTERVAL=500
{{ end }}
EOH
        destination = "local/env.txt"
        env         = true
      }

      driver = "raw_exec"

      config {
        command = "python3"
        args    = ["-m", "http.server", "${NOMAD_PORT_web}"]
      }
    }
  }
}
