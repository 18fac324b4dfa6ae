# A service configured by templates: its config file renders a Nomad Variable and the task
# reloads it on SIGHUP when the variable changes; a second template becomes its environment.
#
#   yurt var put nomad/jobs/greeter greeting=hello
#   yurt job run examples/service-template.nomad.hcl
#   yurt var put -force nomad/jobs/greeter greeting=bonjour   # logs "reloaded: bonjour"
job "greeter" {
  group "web" {
    task "server" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args = ["-c", <<EOS
trap 'echo "reloaded: $(cat "$NOMAD_TASK_DIR/greeter.conf")"' HUP
echo "started as $GREETER_MODE: $(cat "$NOMAD_TASK_DIR/greeter.conf")"
while :; do sleep 1; done
EOS
        ]
      }

      template {
        data        = <<EOT
{{- with nomadVar "nomad/jobs/greeter" }}{{ .greeting }}{{ end }}
EOT
        destination = "local/greeter.conf"
        change_mode = "signal"
        change_signal = "SIGHUP"
        perms       = "0640"
      }

      template {
        data        = "GREETER_MODE={{ env \"NOMAD_JOB_NAME\" }}-{{ env \"NOMAD_ALLOC_INDEX\" }}"
        destination = "secrets/greeter.env"
        env         = true
      }
    }
  }
}
