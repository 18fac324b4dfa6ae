"""Port allocation under random placements and stops (layer 0, Hypothesis stateful): jobs
with static and dynamic ports are registered, stopped, updated and their allocations end,
in any order, on a node with a small dynamic range so that collisions and exhaustion happen.
After every step: no two live allocations hold one port, every dynamic port is in the
node's range and off its reserved ports, every static port is the one asked for, and a
group that was refused could not have fit."""

from __future__ import annotations

from itertools import count

import msgspec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.test_ports import State, node, web
from yurt.runtime.server.scheduler import ports

LOW, HIGH = 20000, 20011
RESERVED = "20003,20005-20006"
STATICS = (20004, 20007, 6379, 6380)


class PortMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = State(node(LOW, HIGH, RESERVED))
        self.names = count()

    @rule(replicas=st.integers(1, 4), static=st.sampled_from((None, *STATICS)))
    def register(self, replicas: int, static: int | None) -> None:
        job = web(f"j{next(self.names)}", static=static, count_=replicas)
        plan = self.state.run(job)
        held = {v for a in self.state.live_allocs() for v in ports.alloc_ports(a)}
        reserved = set(ports.parse_port_ranges(RESERVED))
        for why in plan.failed.values():
            if why.startswith("network: reserved port collision"):
                assert static is not None
                assert why == f"network: reserved port collision db={static}"
                assert static in held | reserved
            else:  # refused only when every port of the range is taken
                assert why == "network: dynamic port selection failed"
                assert set(range(LOW, HIGH + 1)) - reserved - held - {static} == set()

    @rule(data=st.data())
    def stop_job(self, data: st.DataObject) -> None:
        jobs = sorted({a.job_id for a in self.state.live_allocs()})
        if not jobs:
            return
        job_id = data.draw(st.sampled_from(jobs))
        job = next(a.job for a in self.state.live_allocs() if a.job_id == job_id)
        assert job is not None
        self.state.run(msgspec.structs.replace(job, stop=True))

    @rule(data=st.data())
    def alloc_ends(self, data: st.DataObject) -> None:
        live = sorted(a.id for a in self.state.live_allocs())
        if live:
            self.state.finish(data.draw(st.sampled_from(live)))

    @rule(data=st.data())
    def update_job(self, data: st.DataObject) -> None:
        """A destructive update: every allocation is replaced (or kept, if its replacement
        does not fit)."""
        jobs = sorted({a.job_id for a in self.state.live_allocs()})
        if not jobs:
            return
        job_id = data.draw(st.sampled_from(jobs))
        job = next(a.job for a in self.state.live_allocs() if a.job_id == job_id)
        assert job is not None
        changed = msgspec.json.decode(msgspec.json.encode(job), type=type(job))
        changed.task_groups[0].tasks[0].config["run_for"] = f"{next(self.names)}h"
        changed.job_modify_index += 1
        self.state.run(changed)

    @invariant()
    def no_port_is_held_twice(self) -> None:
        held = [v for a in self.state.live_allocs() for v in ports.alloc_ports(a)]
        assert len(held) == len(set(held)), sorted(held)

    @invariant()
    def dynamic_ports_in_range_and_statics_as_asked(self) -> None:
        reserved = set(ports.parse_port_ranges(RESERVED))
        for alloc in self.state.live_allocs():
            assert alloc.job is not None
            assert alloc.allocated_shared is not None
            (network,) = alloc.job.task_groups[0].networks
            asked = {p.label: p.value for p in network.reserved_ports}
            for mapping in alloc.allocated_shared.ports:
                if mapping.label in asked:
                    assert mapping.value == asked[mapping.label]
                else:
                    assert LOW <= mapping.value <= HIGH
                    assert mapping.value not in reserved


PortMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30,
                                         deadline=None)
test_ports_under_random_placement_and_stops = PortMachine.TestCase
