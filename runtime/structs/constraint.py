"""Placement rules of a jobspec: Nomad's `Constraint`, `Affinity`, `Spread` and `SpreadTarget`,
with the operator names both the jobspec and the scheduler (`server/scheduler/feasible.py`) use.

Python attribute names are the HCL names (`attribute`, `value`, `operator`); JSON names are
Nomad's (`LTarget`, `RTarget`, `Operand`). A constraint decides whether a node may take an
allocation; an affinity and a spread only rank nodes, so on one node they change nothing and
are validated, stored and returned as written.

Invariant: `Affinity.weight` and `Spread.weight` default to 50, as Nomad's API canonicalizes an
unset weight, so a job read from HCL or JSON compares equal either way.
"""

from __future__ import annotations

from typing import Final

from msgspec import field

from yurt.runtime.structs.base import Base

CONSTRAINT_DISTINCT_PROPERTY: Final = "distinct_property"
CONSTRAINT_DISTINCT_HOSTS: Final = "distinct_hosts"
CONSTRAINT_REGEX: Final = "regexp"
CONSTRAINT_VERSION: Final = "version"
CONSTRAINT_SEMVER: Final = "semver"
CONSTRAINT_SET_CONTAINS: Final = "set_contains"
CONSTRAINT_SET_CONTAINS_ALL: Final = "set_contains_all"
CONSTRAINT_SET_CONTAINS_ANY: Final = "set_contains_any"
CONSTRAINT_IS_SET: Final = "is_set"
CONSTRAINT_IS_NOT_SET: Final = "is_not_set"

#: The comparison operators (Nomad accepts `==`/`is` for `=` and `not` for `!=`).
COMPARISON_OPERATORS: Final = ("=", "==", "is", "!=", "not", "<", "<=", ">", ">=")

#: Nomad's default weight of an affinity or a spread that does not set one.
DEFAULT_WEIGHT: Final = 50


class Constraint(Base):
    """`constraint {}`: `attribute operator value` must hold on the node."""

    attribute: str = field(default="", name="LTarget")
    value: str = field(default="", name="RTarget")
    operator: str = field(default="", name="Operand")

    def __str__(self) -> str:
        # Nomad's Constraint.String: the key of AllocMetric.ConstraintFiltered.
        return f"{self.attribute} {self.operator} {self.value}"


class Affinity(Base):
    """`affinity {}`: nodes where it holds are preferred by `weight` (-100..100, not 0)."""

    attribute: str = field(default="", name="LTarget")
    value: str = field(default="", name="RTarget")
    operator: str = field(default="", name="Operand")
    weight: int = DEFAULT_WEIGHT


class SpreadTarget(Base):
    """`target "<value>" { percent = N }` inside a spread."""

    value: str = ""
    percent: int = 0


class Spread(Base):
    """`spread {}`: spread allocations over the values of `attribute`."""

    attribute: str = ""
    weight: int = DEFAULT_WEIGHT
    target: list[SpreadTarget] = field(default_factory=list, name="SpreadTarget")
