# mock_driver runs tasks entirely inside the agent: nothing is executed. Useful to try restart
# policies and lifecycle ordering in seconds, and the basis of yurt's deterministic tests.
job "mock-demo" {
  type = "batch"

  group "g" {
    count = 2

    task "init" {
      driver = "mock_driver"
      lifecycle {
        hook = "prestart"
      }
      config {
        run_for = "100ms"
      }
    }

    task "main" {
      driver = "mock_driver"
      config {
        run_for       = "1s"
        exit_code     = 0
        stdout_string = "hello from mock\n"
      }
      restart {
        attempts = 2
        delay    = "100ms"
        interval = "10s"
      }
    }

    task "sidecar" {
      driver = "mock_driver"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        run_for = "1h"
      }
    }
  }
}
