# Shape: community job files that take HCL2 input variables (a `variable` block with a
# default, used as var.<name>), a node_pool and a scaling policy. Needs HCL2 variables,
# node_pool and scaling (being added to yurt).
variable "image_version" {
  type    = string
  default = "1.25"
}

job "web-vars" {
  node_pool = "default"

  group "web" {
    count = 2

    scaling {
      enabled = true
      min     = 1
      max     = 5
    }

    task "server" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo version ${var.image_version}; sleep 3600"]
      }
    }
  }
}
