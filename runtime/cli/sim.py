"""`yurt sim`: the deterministic whole-cluster simulation (runtime/sim/scenario.py) from the
command line.

`yurt sim --seed S --scenarios N` runs the scenarios of seeds S, S+1, …, S+N-1, each a whole
cluster (servers, simulated nodes, a simulated network) under a mock clock, and prints a
summary: one line per scenario with `--verbose` (and every step and message of it when only
one runs), or one JSON object with `--json`. Exit status 0 when every invariant held, 1 with
the failing seeds, their step logs and how to replay them, 2 bad options.

Replaying a seed must give the same run in any process: the iteration order of string sets
in the server code follows the string hash, which Python salts per process unless
PYTHONHASHSEED is set. `run` therefore re-executes the interpreter with PYTHONHASHSEED=0 when
the variable is not set at all (one set on purpose is respected).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time

from yurt.runtime.cli.output import echo, echo_raw
from yurt.runtime.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK

HASH_SEED_VARIABLE = "PYTHONHASHSEED"


def _reexec_with_fixed_hash_seed() -> None:
    """Replace this process with the same command under PYTHONHASHSEED=0 (no return)."""
    env = {**os.environ, HASH_SEED_VARIABLE: "0"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def run(seed: int | None, scenarios: int, verbose: bool, json_output: bool) -> int:
    """Run the scenarios; the exit status."""
    if HASH_SEED_VARIABLE not in os.environ:
        _reexec_with_fixed_hash_seed()
    from yurt.runtime.sim.scenario import run_scenario

    if seed is None:
        seed = secrets.randbelow(2**31)
    started = time.perf_counter()
    say = (lambda line: echo(line, err=True)) if verbose and scenarios == 1 else None
    results = []
    failed = []
    interrupted = False
    for n in range(scenarios):
        try:
            result = run_scenario(seed + n, echo=say)
        except BaseException as e:  # Ctrl-C: what ran so far is still reported
            if not _is_interrupt(e):
                raise
            interrupted = True
            break
        results.append(result)
        if not result.ok:
            failed.append(result)
        if verbose and not json_output:
            stats = ", ".join(f"{k} {v}" for k, v in result.stats.items())
            echo(f"seed {result.seed}: {'ok' if result.ok else 'FAILED'} "
                       f"digest {result.digest[:16]} simulated {result.sim_seconds:.0f}s in "
                       f"{result.wall_seconds:.2f}s ({stats})")
    wall = time.perf_counter() - started
    if interrupted:
        echo(f"yurt: interrupted after {len(results)} of {scenarios} scenario(s)",
                   err=True)
        scenarios = len(results)
    simulated = sum(r.sim_seconds for r in results)
    if json_output:
        echo_raw(json.dumps({
            "first_seed": seed, "scenarios": scenarios, "failed": [r.seed for r in failed],
            "simulated_seconds": round(simulated, 1), "wall_seconds": round(wall, 2),
            "results": [r.to_json() for r in results]}))
    else:
        for result in failed:
            echo(f"\nseed {result.seed} violated an invariant:", err=True)
            for line in result.violations:
                echo(f"  {line}", err=True)
            echo("steps:", err=True)
            for line in result.steps:
                echo(f"  {line}", err=True)
            echo(f"replay: {result.replay()}", err=True)
        digest = f", digest {results[0].digest}" if scenarios == 1 and results else ""
        echo(f"{scenarios} scenario(s) from seed {seed}: {len(failed)} failed"
                   f"{' (seeds ' + ' '.join(str(r.seed) for r in failed) + ')' if failed else ''}"
                   f"; {simulated:.0f}s simulated in {wall:.1f}s{digest}")
    if failed:
        return EXIT_FAILED
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def _is_interrupt(error: BaseException) -> bool:
    """A KeyboardInterrupt, alone or in the group Trio may wrap it in."""
    if isinstance(error, BaseExceptionGroup):
        return error.subgroup(KeyboardInterrupt) is not None
    return isinstance(error, KeyboardInterrupt)
