"""Random scenarios against a `SimCluster`, reproducible from a seed.

`run_scenario(seed)` runs one scenario in its own `trio.run` under
`trio.testing.MockClock(autojump_threshold=0)`: the clock jumps to the next deadline the
moment every task waits, so a minute of cluster time costs what its work costs and nothing
else. No sockets, no threads, no real time.

A scenario is a list of steps drawn from the seed (`_STEPS`): register a job (service or
batch, 1-5 allocations of small resources, one in three with a disconnect window
(`max_client_disconnect`), failed allocations replaced after a second; or register a
stopped one again), update one
destructively (a task's env), scale it, stop it (purged, now and then), several of those at
once through different servers, lose messages, crash a node (cancel its `SimNode`) or bring
it back (a new `SimNode`, same ID and secret), cut a node from a server or from all, heal,
crash a server (the leader, mostly; the last one, now and then) or restart one, mark a node
ineligible or eligible, or let time pass. The cluster's shape comes from the seed too
(`scenario_config`: 1-3 servers, 2-4 nodes, allocations that sometimes fail). After each
step and a short random pause the safety invariants are checked (check.py); at the end
everything is healed (servers and nodes up, links whole, no loss, nodes eligible), the
cluster is given a bounded time to settle (`SETTLE`), and the liveness invariants must then
hold; over the whole run no node may make more than `CALL_BUDGET` calls a second on
average (a busy loop).

Determinism: one seed fixes the run, in any process.
- Each component draws from its own `random.Random(f"{seed}:{name}")` (cluster.py), the
  scenario's steps from `"{seed}:steps"`.
- `uuid.uuid4` (every ID the servers make: records.new_id) is replaced during the run by a
  generator seeded from the seed, and restored after.
- Trio's scheduler picks the order of the tasks that are ready at once at random
  (`trio._core._run._r`). It sorts them by creation and shuffles with `_r` only when
  `_ALLOW_DETERMINISTIC_SCHEDULING` is set (the switch pytest-trio sets so Hypothesis can
  replay a test); both are private, so both are set for the run and restored after
  (`deterministic`), leaving the process as it was for whatever runs next.
- String hashing differs between processes (PYTHONHASHSEED), which changes the iteration
  order of sets of strings in the server code; `yurt sim` re-execs itself with
  PYTHONHASHSEED=0 (cli/sim.py) so a seed replays the same anywhere (the determinism test
  also checks that another hash seed gives the same digest: nothing seen so far depends
  on it).
The run's trace (every step, every network message, the final allocations) is hashed into
`digest`: the same seed gives the same digest.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import msgspec
import trio
import trio.testing

from yurt.runtime.client.allocrunner.simulated import AllocProfile
from yurt.runtime.lib.durations import SECOND
from yurt.runtime.server.cluster.server import ClusterServer
from yurt.runtime.sim.check import IndexWatch, InvariantViolation, liveness, safety
from yurt.runtime.sim.cluster import SimCluster, SimConfig
from yurt.runtime.structs import (
    ALLOC_CLIENT_FAILED,
    ALLOC_CLIENT_LOST,
    NODE_ELIGIBLE,
    NODE_INELIGIBLE,
    Job,
    ReschedulePolicy,
    Resources,
    Task,
    TaskGroup,
)

#: How long a healed cluster gets to converge (simulated seconds), and how often it is
#: looked at.
SETTLE: Final = 60.0
SETTLE_POLL: Final = 1.0
#: A client's operation (register, stop, ...) that takes longer than this hangs: a violation.
OPERATION_TIMEOUT: Final = 30.0
#: Calls per node and simulated second that no scenario may exceed on average.
CALL_BUDGET: Final = 20
MIN_STEPS: Final = 6
MAX_STEPS: Final = 12


class ScenarioFailed(AssertionError):
    """A scenario violated an invariant; the message says how to replay it."""


@dataclass
class ScenarioResult:
    seed: int
    ok: bool
    digest: str
    steps: list[str]
    violations: list[str] = field(default_factory=list)
    sim_seconds: float = 0.0
    wall_seconds: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)

    def replay(self) -> str:
        return f"yurt sim --seed {self.seed} --verbose"

    def raise_if_failed(self) -> None:
        """Raise `ScenarioFailed` (the seed, the violations, the steps, how to replay)
        unless every invariant held."""
        if not self.ok:
            raise ScenarioFailed("\n".join([
                f"seed {self.seed} violated an invariant:",
                *(f"  {v}" for v in self.violations), "steps:",
                *(f"  {s}" for s in self.steps), f"replay: {self.replay()}"]))

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "ok": self.ok, "digest": self.digest,
                "sim_seconds": round(self.sim_seconds, 3),
                "wall_seconds": round(self.wall_seconds, 3), "stats": self.stats,
                "violations": self.violations, "steps": self.steps if not self.ok else []}


@contextmanager
def deterministic(seed: int) -> Iterator[None]:
    """Seed what the run cannot be given a seed through: trio's scheduler and `uuid4`."""
    import trio._core._run as trio_run

    state = trio_run._r.getstate()
    allowed = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    uuid4 = uuid.uuid4
    ids = random.Random(f"{seed}:uuid")
    trio_run._r.seed(f"{seed}:trio")
    # Private to trio (Final there): set as pytest-trio sets it for Hypothesis.
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = uuid4
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = allowed  # type: ignore[misc]
        trio_run._r.setstate(state)


def scenario_config(seed: int) -> SimConfig:
    """The cluster a seed's scenario runs: 1-3 servers, 2-4 nodes, allocations that fail
    now and then in one scenario of three."""
    shape = random.Random(f"{seed}:shape")
    return SimConfig(servers=shape.randint(1, 3), nodes=shape.randint(2, 4),
                     profile=AllocProfile(start_delay=(0.05, 0.5), run_time=(0.5, 4.0),
                                          failure_probability=shape.choice([0.0, 0.0, 0.1])))


def run_scenario(seed: int, config: SimConfig | None = None, *,
                 echo: Callable[[str], None] | None = None) -> ScenarioResult:
    """One scenario from `seed` (see the module header); never raises for a violation:
    the result says it (`ok`, `violations`, the step log)."""
    config = config or scenario_config(seed)
    digest = hashlib.sha256()
    steps: list[str] = []

    def log(line: str) -> None:
        stamped = f"{trio.current_time():10.3f} {line}"
        digest.update(stamped.encode() + b"\n")
        if echo is not None:
            echo(stamped)

    started = time.perf_counter()
    clock = trio.testing.MockClock(autojump_threshold=0)
    # The product logs warnings on every lost message; the trace says it all.
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with deterministic(seed):
            cluster = SimCluster(config, seed, log)
            runner = _Scenario(cluster, random.Random(f"{seed}:steps"), steps, log)
            try:
                violations = trio.run(runner.run, clock=clock)
            except Exception as e:  # a crash is a finding too: reported with its seed
                violations = ["the run crashed: " + "".join(
                    traceback.format_exception(e)).rstrip()]
    finally:
        logging.disable(disabled)
    net = cluster.network
    stats = {"steps": len(steps), "calls": net.calls, "lost": net.lost,
             "blackholed": net.blackholed, "refused": net.refused,
             "placed": cluster.observer.placed if cluster.observer else 0,
             "lost_allocs": sum(1 for a in (cluster.observer.allocs.values()
                                            if cluster.observer else [])
                                if a.client_status == ALLOC_CLIENT_LOST),
             "failed_allocs": sum(1 for a in (cluster.observer.allocs.values()
                                              if cluster.observer else [])
                                  if a.client_status == ALLOC_CLIENT_FAILED),
             "leader_terms": sum(s.terms for s in cluster.servers)}
    return ScenarioResult(seed=seed, ok=not violations, digest=digest.hexdigest(), steps=steps,
                          violations=violations, sim_seconds=clock.current_time(),
                          wall_seconds=time.perf_counter() - started, stats=stats)


def _final_state(cluster: SimCluster) -> str:
    observer = cluster.observer
    assert observer is not None
    allocs = sorted((a.id, a.node_id, a.name, a.desired_status, a.client_status,
                     a.modify_index) for a in observer.allocs.values())
    return hashlib.sha256(msgspec.json.encode(
        [allocs, observer.visible_index])).hexdigest()


class _Scenario:
    def __init__(self, cluster: SimCluster, rng: random.Random, steps: list[str],
                 log: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.rng = rng
        self.steps = steps
        self._log = log
        self.jobs: dict[str, Job] = {}
        self.indexes = IndexWatch()
        self._next_job = 0

    def step(self, text: str) -> None:
        line = f"{trio.current_time():9.3f} {text}"
        self.steps.append(line)
        self._log(f"STEP {text}")

    async def run(self) -> list[str]:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.cluster.run)
            try:
                await self._play()
            except InvariantViolation as e:
                return str(e).splitlines()
            finally:
                self._log("final " + _final_state(self.cluster))
                nursery.cancel_scope.cancel()
        return []

    async def _play(self) -> None:
        for _ in range(self.rng.randint(MIN_STEPS, MAX_STEPS)):
            choice = self.rng.choices(_STEPS, weights=[w for _, w in _STEPS_WEIGHTED])[0]
            await choice(self)
            await trio.sleep(self.rng.uniform(0.1, 3.0))
            self._check(safety(self.cluster, self.indexes))
        await self._heal_all()
        self._check_chatter()
        deadline = trio.current_time() + SETTLE
        while True:
            await trio.sleep(SETTLE_POLL)
            self._check(safety(self.cluster, self.indexes))
            problems = liveness(self.cluster)
            if not problems:
                self.step(f"settled after {SETTLE - (deadline - trio.current_time()):.0f}s")
                return
            if trio.current_time() >= deadline:
                raise InvariantViolation("\n".join(
                    [f"not converged {SETTLE:.0f}s after healing:", *problems]))

    def _check_chatter(self) -> None:
        """No node floods the servers: over the scenario, a node makes at most
        `CALL_BUDGET` calls per simulated second on average (heartbeats, pulls and updates
        make about one; retries against lost messages and dead servers are backed off)."""
        spent = self.cluster.network.calls
        budget = CALL_BUDGET * len(self.cluster.nodes) * max(trio.current_time(), 1.0)
        if spent > budget:
            raise InvariantViolation(
                f"the nodes made {spent} calls in {trio.current_time():.0f}s: more than "
                f"{CALL_BUDGET} per node and second (a busy loop?)")

    def _check(self, problems: list[str]) -> None:
        if problems:
            raise InvariantViolation("\n".join(problems))

    # ------------------------------------------------------------------ job steps

    async def _through_server(self, what: str, call: Callable[[Any], Any]) -> Any:
        """`call(server)` on a running server, chosen at random; a hang is a violation."""
        up = self.cluster.up_servers()
        if not up:
            self.step(f"{what}: no server up, skipped")
            return None
        slot = self.rng.choice(up)
        self.step(f"{what} via {slot.name}")
        try:
            with trio.fail_after(OPERATION_TIMEOUT):
                return await call(slot.server)
        except (KeyError, ValueError) as e:  # what the API answers with a 404 or a 400
            self.step(f"{what} via {slot.name}: refused ({type(e).__name__}: {e})")
            return None
        except trio.TooSlowError:
            raise InvariantViolation(f"{what} via {slot.name} hung for "
                                     f"{OPERATION_TIMEOUT:.0f}s") from None

    def _pick_job(self, *, running: bool = True) -> Job | None:
        candidates = [j for j in sorted(self.jobs) if not self.jobs[j].stop or not running]
        return self.jobs[self.rng.choice(candidates)] if candidates else None

    async def register(self) -> None:
        stopped = [j for j in sorted(self.jobs) if self.jobs[j].stop]
        if stopped and self.rng.random() < 0.3:
            job = msgspec.structs.replace(self.jobs[self.rng.choice(stopped)], stop=False)
            self.jobs[job.id] = job
            await self._through_server(f"register {job.id} again",
                                       lambda s: s.register_job(job))
            return
        kind = self.rng.choice(["service", "service", "batch"])
        job_id = f"{kind[:3]}{self._next_job}"
        self._next_job += 1
        count = self.rng.randint(1, 5)
        # Failed allocations are replaced after a second, however often they fail: the
        # settle time is bounded, Nomad's default delays (30 s doubling) are not.
        again = ReschedulePolicy(unlimited=True, delay=SECOND, delay_function="constant",
                                 max_delay=SECOND)
        # One job in three rides out a node's disconnect (`max_client_disconnect`).
        window = self.rng.choice([0, 0, 5 * SECOND, 20 * SECOND])
        job = Job(id=job_id, name=job_id, type=kind, datacenters=["dc1"],
                  task_groups=[TaskGroup(name="g", count=count, reschedule_policy=again,
                                         max_client_disconnect=window or None,
                                         tasks=[
                      Task(name="t", driver="mock_driver", env={"V": "0"},
                           resources=Resources(cpu=100, memory=64))])])
        self.jobs[job_id] = job
        await self._through_server(f"register {kind} {job_id} count={count}"
                                   f"{f' disconnect={window // SECOND}s' if window else ''}",
                                   lambda s: s.register_job(job))

    async def update(self) -> None:
        job = self._pick_job()
        if job is None:
            return await self.register()
        group = job.task_groups[0]
        task = group.tasks[0]
        version = str(int(task.env["V"]) + 1)
        job = msgspec.structs.replace(job, task_groups=[msgspec.structs.replace(
            group, tasks=[msgspec.structs.replace(task, env={"V": version})])])
        self.jobs[job.id] = job
        await self._through_server(f"update {job.id} env V={version}",
                                   lambda s: s.register_job(job))

    async def scale(self) -> None:
        job = self._pick_job()
        if job is None:
            return await self.register()
        group = job.task_groups[0]
        count = self.rng.choice([c for c in range(0, 6) if c != group.count])
        job = msgspec.structs.replace(job, task_groups=[msgspec.structs.replace(
            group, count=count)])
        self.jobs[job.id] = job
        await self._through_server(f"scale {job.id} {group.count}→{count}",
                                   lambda s: s.register_job(job))

    async def stop(self) -> None:
        job = self._pick_job()
        if job is None:
            return await self.register()
        purge = self.rng.random() < 0.3
        if purge:
            del self.jobs[job.id]
        else:
            self.jobs[job.id] = msgspec.structs.replace(job, stop=True)
        await self._through_server(f"stop {job.id}{' and purge' if purge else ''}",
                                   lambda s: s.deregister_job(job.id, purge=purge))

    # ------------------------------------------------------------------ fault steps

    async def crash_node(self) -> None:
        up = [s for s in self.cluster.nodes if s.up]
        if len(up) <= 1:
            return await self.pause()
        slot = self.rng.choice(up)
        self.step(f"crash node {slot.node.name}")
        self.cluster.crash_node(slot)

    async def return_node(self) -> None:
        down = [s for s in self.cluster.nodes if not s.up]
        if not down:
            return await self.crash_node()
        slot = self.rng.choice(down)
        self.step(f"return node {slot.node.name}")
        await self.cluster.start_node(slot)

    async def partition(self) -> None:
        net = self.cluster.network
        node = self.rng.choice(self.cluster.nodes).node.name
        if self.rng.random() < 0.4:
            self.step(f"partition {node} from every server")
            net.isolated.add(node)
        else:
            server = self.rng.choice(self.cluster.servers).url
            self.step(f"partition {node} from {server}")
            net.cut.add((node, server))

    async def heal(self) -> None:
        self.step("heal partitions, no loss")
        self.cluster.network.heal()
        self.cluster.network.loss = 0.0

    async def lossy(self) -> None:
        loss = self.rng.choice([0.01, 0.05, 0.2])
        self.step(f"lose {loss:.0%} of messages")
        self.cluster.network.loss = loss

    async def crash_server(self) -> None:
        up = self.cluster.up_servers()
        # The last server only now and then: nodes then keep running what they have, and
        # the server that comes back gives them the failover TTL.
        if not up or (len(up) == 1 and self.rng.random() < 0.7):
            return await self.restart_server()
        leader = self.cluster.leader()
        slot = leader if leader is not None and self.rng.random() < 0.7 else self.rng.choice(up)
        self.step(f"crash server {slot.name}{' (leader)' if slot.leading else ''}")
        self.cluster.crash_server(slot)

    async def restart_server(self) -> None:
        down = [s for s in self.cluster.servers if not s.up]
        if not down:
            return await self.pause()
        slot = self.rng.choice(down)
        self.step(f"restart server {slot.name}")
        await self.cluster.start_server(slot)

    async def eligibility(self) -> None:
        slot = self.rng.choice(self.cluster.nodes)
        observer = self.cluster.observer
        assert observer is not None
        known = observer.cluster_nodes.get(slot.id)
        if known is None:
            return await self.pause()
        wanted = (NODE_ELIGIBLE if known.scheduling_eligibility == NODE_INELIGIBLE
                  else NODE_INELIGIBLE)
        await self._through_server(f"node {slot.node.name} {wanted}",
                                   lambda s: s.set_eligibility(slot.id, wanted))

    async def burst(self) -> None:
        """Two or three job operations at once, each through a server of its own choice:
        concurrent writers on one etcd."""
        ops = [self.rng.choice([_Scenario.register, _Scenario.update, _Scenario.scale,
                                _Scenario.stop]) for _ in range(self.rng.randint(2, 3))]
        self.step(f"burst of {len(ops)} operations at once")
        failures: list[InvariantViolation] = []

        async def guarded(op: Callable[[_Scenario], Awaitable[None]]) -> None:
            try:
                await op(self)
            except InvariantViolation as e:
                failures.append(e)

        async with trio.open_nursery() as nursery:
            for op in ops:
                nursery.start_soon(guarded, op)
        if failures:
            raise failures[0]

    async def pause(self) -> None:
        seconds = self.rng.uniform(1.0, 10.0)
        self.step(f"wait {seconds:.1f}s")
        await trio.sleep(seconds)

    async def _heal_all(self) -> None:
        self.step("heal everything")
        cluster = self.cluster
        cluster.network.heal()
        cluster.network.loss = 0.0
        for server in cluster.servers:
            if not server.up:
                await cluster.start_server(server)
        for slot in cluster.nodes:
            if not slot.up:
                await cluster.start_node(slot)
        observer = cluster.observer
        assert observer is not None
        for slot in cluster.nodes:
            known = observer.cluster_nodes.get(slot.id)
            if known is not None and known.scheduling_eligibility != NODE_ELIGIBLE:
                await self._through_server(f"node {slot.node.name} eligible",
                                           partial(_eligible, slot.id))


async def _eligible(node_id: str, server: ClusterServer) -> int:
    return await server.set_eligibility(node_id, NODE_ELIGIBLE)


_STEPS_WEIGHTED: list[tuple[Callable[[_Scenario], Any], int]] = [
    (_Scenario.register, 5), (_Scenario.update, 3), (_Scenario.scale, 3), (_Scenario.stop, 1),
    (_Scenario.crash_node, 2), (_Scenario.return_node, 2), (_Scenario.partition, 2),
    (_Scenario.heal, 1), (_Scenario.lossy, 1), (_Scenario.crash_server, 2),
    (_Scenario.restart_server, 1),
    (_Scenario.eligibility, 2), (_Scenario.pause, 2), (_Scenario.burst, 2),
]
_STEPS = [step for step, _ in _STEPS_WEIGHTED]
