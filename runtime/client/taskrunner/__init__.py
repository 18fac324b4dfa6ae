"""The task runner: one task's life inside an allocation (Nomad's `taskrunner` package).

- `restarts.py`: the restart tracker, a pure state machine (time passed in).
- `events.py`: task events with Nomad's types, details and display messages.
- `runner.py`: `TaskRunner`, the Trio main loop that drives a task through its driver.
- `ops.py` and `stopping.py`: the rest of `TaskRunner` (the operations other tasks call, and
  the kill path), in files of their own, as Nomad's `lifecycle.go` beside `task_runner.go`.
"""
