# Shape: a parameterized job as Nomad's dispatch docs and users show it: a required payload
# written to local/, optional meta, and `executeTemplate` over a defined template.
job "report" {
  type = "batch"

  parameterized {
    payload       = "required"
    meta_required = ["customer"]
    meta_optional = ["format"]
  }

  group "render" {
    task "report" {
      driver = "raw_exec"

      dispatch_payload {
        file = "input.json"
      }

      template {
        data        = <<EOT
{{ define "header" }}report for {{ . }}{{ end }}
{{ executeTemplate "header" (env "NOMAD_META_customer") }}
format={{ or (env "NOMAD_META_format") "text" }}
EOT
        destination = "local/report.txt"
      }

      config {
        command = "/bin/cat"
        args    = ["local/report.txt", "local/input.json"]
      }
    }
  }
}
