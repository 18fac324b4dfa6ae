"""Nomad's `template` block at run time: the live data templates read (`data`), one render
pass with consul-template's discovery of what it needs (`render`), the change decision and
the `wait` quiescence (`change`, pure), and confined file writes (`files`). The task hook in
`hooks/template.py` drives them.
"""
