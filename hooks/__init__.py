"""Alloc-runner and task-runner hooks, one module per hook.

The hook framework (phases, fixed order, error messages) arrives with the runtime core; this
package is part of the fixed layout and is type-checked with the rest from the start.
"""
