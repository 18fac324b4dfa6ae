"""Nomad-provider service checks: the schedule of due times (schedule.py), the probes
(probes.py), the one loop that runs every check of the agent (runner.py), and the
`check_restart` decision (restarts.py)."""
