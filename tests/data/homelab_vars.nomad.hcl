# A home-lab service configured through variables and locals.
variable "datacenters" {
  type    = list(string)
  default = ["home"]
}

variable "image_tag" {
  type        = string
  description = "The tag of the image to run"
  default     = "1.2.3"
}

variable "replicas" {
  type    = number
  default = 1
  validation {
    condition     = var.replicas > 0 && var.replicas <= 5
    error_message = "Replicas must be between 1 and 5."
  }
}

variable "env" {
  type    = map(string)
  default = { TZ = "Europe/Berlin" }
}

locals {
  name  = "media-${var.image_tag}"
  env   = merge(var.env, { APP_NAME = upper(local.short) })
  short = replace(local.name, ".", "-")
}

job "media" {
  datacenters = var.datacenters
  type        = "service"

  group "app" {
    count = var.replicas

    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo ${local.short} on ${attr.kernel.name}; sleep 3600"]
      }
      env = local.env
      meta {
        replicas = format("%02d", var.replicas)
        dcs      = join(",", var.datacenters)
      }
    }
  }
}
