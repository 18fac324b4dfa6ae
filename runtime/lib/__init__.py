"""Leaf helpers every room uses (Nomad's `helper/`).

Durations and Go's value syntax (`durations`, `goparse`), Go's regexp dialect through RE2
(`goregexp`), Go's version constraints (`goversion`), Nomad's cron dialect (`cron`), signal
names (`signames`), source positions of job files (`sourcemap`), structural limits of decoded
input (`structcheck`), /proc readers (`procfs`), the open-file limit (`nofile`) and the agent
log's field names (`logfields`).

Invariant (tests/test_layers.py): a module here imports nothing of yurt but `errors` and other
modules here, so anything may import it.
"""
