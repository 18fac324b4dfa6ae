# A parameterized batch job: it runs only when dispatched, each time with its own payload
# (written to the task's local/input.json) and meta (NOMAD_META_<key>):
#   yurt job dispatch -meta who=alice render input.json
job "render" {
  type = "batch"

  parameterized {
    payload       = "required"
    meta_required = ["who"]
    meta_optional = ["format"]
  }

  group "render" {
    task "render" {
      driver = "raw_exec"
      dispatch_payload {
        file = "input.json"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"rendering for $${NOMAD_META_who}\"; cat $${NOMAD_TASK_DIR}/input.json"]
      }
    }
  }
}
