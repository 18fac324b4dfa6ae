"""Alloc-runner and task-runner hooks, one module per hook.

`base.py` defines the phases (one small abstract class per phase; a hook implements the phases
it needs) and the shared resources alloc hooks hand to task hooks. The runners call hooks in a
fixed order, the order of their lists, which each runner builds in one visible place.
"""
