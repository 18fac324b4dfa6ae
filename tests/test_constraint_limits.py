"""Hostile constraints (layer 0): job-supplied patterns, versions and numbers cost the scheduler
time linear in their length, bounded by the caps, and never an exception; RE2's syntax is
Nomad's (what Go's regexp refuses fails validation with Go's message, and, met at scheduling
time, leaves the node filtered with the constraint as its reason).

The timed cases run in a child process under a timeout: a regression to a backtracking engine
runs for minutes or days, and must fail the test rather than hang it. Each case also asserts
its result, so a fast wrong answer fails too."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.scheduler_support import SchedulerState
from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import parse_job
from yurt.runtime.lib.goregexp import (
    MAX_MATCH_WORK,
    MAX_PATTERN,
    MAX_TEXT,
    GoRegexpError,
    compile_regexp,
)
from yurt.runtime.lib.goversion import (
    MAX_TEXT as MAX_VERSION_TEXT,
)
from yurt.runtime.lib.goversion import (
    VersionError,
    go_int,
    parse_version,
    satisfies,
    version_constraint,
)
from yurt.runtime.server.scheduler import schedule
from yurt.runtime.server.scheduler.feasible import (
    check_order,
    check_regexp,
    filter_reason,
    meets,
)
from yurt.runtime.structs import Evaluation, Job, Node, Task, TaskGroup
from yurt.runtime.structs.constraint import Constraint

ROOT = Path(__file__).resolve().parent.parent
#: Generous: each case takes milliseconds; the backtracking code took minutes on them.
BOUND = 1.0

LONG_A = "a" * (MAX_TEXT - 1)  # just under the cap: RE2 really runs on it


def node(**meta: str) -> Node:
    return Node(
        id="n1",
        name="box",
        datacenter="dc1",
        attributes={"kernel.name": "linux", "nomad.version": "1.7.2"},
        meta=meta,
    )


def _versions_under_the_cap() -> bool:
    # Twenty distinct malformed versions just under the cap (distinct: nothing is cached).
    texts = [f"1.{i}-{'a' * (MAX_VERSION_TEXT - 16)}!" for i in range(20)]
    return not any(satisfies(t, ">= 1.0") or satisfies("1.0", f">= {t}") for t in texts)


def dfa_defeating(longest: int) -> str:
    """Alternatives `[ab]*a[ab]{n}c`, n counting down from `longest`, up to `MAX_PATTERN`
    characters: RE2's DFA needs 2^n states for each, so it gives up and simulates the
    automaton, every instruction once per byte of the value."""
    alternatives: list[str] = []
    while len("|".join([*alternatives, f"[ab]*a[ab]{{{longest}}}c"])) <= MAX_PATTERN:
        alternatives.append(f"[ab]*a[ab]{{{longest}}}c")
        longest -= 1
    return "|".join(alternatives)


def random_ab(length: int) -> str:
    rng = random.Random(1)
    return "".join(rng.choice("ab") for _ in range(length))


def _dfa_defeating_at_the_bound() -> bool:
    # The largest value the bound lets this (compiling) pattern run against: RE2 really runs.
    pattern = dfa_defeating(40)
    positions = MAX_MATCH_WORK // compile_regexp(pattern).program_size
    return check_regexp(random_ab(positions - 1), pattern)


#: name -> (a zero-argument evaluation, its expected result).
CASES: dict[str, tuple[Callable[[], object], object]] = {
    "regexp on a literal": (
        lambda: meets(Constraint(LONG_A + "b", "(a+)+$", "regexp"), node()),
        False,
    ),
    "regexp that matches": (lambda: meets(Constraint(LONG_A, "(a+)+$", "regexp"), node()), True),
    "regexp on meta": (
        lambda: meets(Constraint("${meta.x}", "^(a|aa)+$", "regexp"), node(x=LONG_A + "!")),
        False,
    ),
    "regexp pattern from meta": (
        lambda: meets(
            Constraint("${meta.x}", "${meta.p}", "regexp"), node(x=LONG_A + "b", p="(a*)*$")
        ),
        True,
    ),
    # 13.8 s before the work bound (241 alternatives, a program of 212,807 instructions).
    "regexp built to defeat the DFA": (
        lambda: meets(Constraint(random_ab(MAX_TEXT), dfa_defeating(999), "regexp"), node()),
        False,
    ),
    "regexp built to defeat the DFA, that compiles": (
        lambda: meets(
            Constraint("${meta.x}", dfa_defeating(150), "regexp"), node(x=random_ab(MAX_TEXT))
        ),
        False,
    ),
    "regexp built to defeat the DFA, at the work bound": (_dfa_defeating_at_the_bound, False),
    "version 100 KB": (lambda: satisfies("1.0-" + "a" * 100_000 + "!", ">= 1.0"), False),
    "version constraint 100 KB": (lambda: satisfies("1.0", ">= 1.0-" + "a" * 100_000 + "!"), False),
    "semver constraint 100 KB": (
        lambda: satisfies("1.0", ">= 1.0-" + "1" * 100_000 + "!", semver=True),
        False,
    ),
    "versions under the cap": (_versions_under_the_cap, True),
    "order of a 100 KB non-number": (lambda: check_order("<", "1" * 100_000 + "x", "5"), True),
    "order of a 100 KB number": (lambda: check_order(">", "9" * 100_000, "5"), True),
}


def measure(names: list[str]) -> dict[str, tuple[object, float]]:
    """Run the named cases in a child process: each one's result and seconds taken."""
    script = (
        "import json, sys, time\n"
        "from tests.test_constraint_limits import CASES\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    start = time.perf_counter()\n"
        "    result = CASES[name][0]()\n"
        "    out[name] = (result, time.perf_counter() - start)\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *names],
        cwd=ROOT,
        timeout=60,
        capture_output=True,
        text=True,
        check=True,
    )
    return {k: (v[0], v[1]) for k, v in json.loads(done.stdout).items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_inputs_cost_little(name: str) -> None:
    ((result, seconds),) = measure([name]).values()
    assert result == CASES[name][1]
    assert seconds < BOUND, f"{name} took {seconds:.2f} s"


# --------------------------------------------------------------------------- Go's syntax


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(a)\\1", "error parsing regexp: invalid escape sequence: `\\1`"),
        ("(?=a)", "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"),
        ("(?<=a)b", "error parsing regexp: invalid or unsupported Perl syntax: `(?<=`"),
        ("(?!a)", "error parsing regexp: invalid or unsupported Perl syntax: `(?!`"),
        ("a{1001}", "error parsing regexp: invalid repeat count: `{1001}`"),
        ("a**", "error parsing regexp: invalid nested repetition operator: `**`"),
        ("[a", "error parsing regexp: missing closing ]: `[a`"),
        (
            "x" * (MAX_PATTERN + 1),
            f"error parsing regexp: expression too large: `{'x' * 32}… "
            f"({MAX_PATTERN + 1} characters, at most {MAX_PATTERN})`",
        ),
    ],
)
def test_what_go_refuses_does_not_compile(pattern: str, message: str) -> None:
    with pytest.raises(GoRegexpError) as info:
        compile_regexp(pattern)
    assert str(info.value) == message
    assert not check_regexp("aab", pattern)


@pytest.mark.parametrize(
    ("value", "pattern", "result"),
    [
        ("ab", "b\\z", True),  # Go's end of text; Python's `re` spells it \Z
        ("web-1", "(?<name>web)-[0-9]", True),  # Go 1.22's named group
        ("web-1", "(?P<name>web)-[0-9]", True),
        ("WEB", "(?i)web", True),
        ("a\n", "^a$", False),  # `$` is the end of the text only, as in Go (Python's takes "a\n")
        ("${meta.p}", "${meta.p}", False),  # what validation compiles: `$` then a literal
    ],
)
def test_go_syntax_matches_as_in_go(value: str, pattern: str, result: bool) -> None:
    assert check_regexp(value, pattern) is result


def test_a_value_past_the_cap_never_matches() -> None:
    assert check_regexp("a" * MAX_TEXT, "a")
    assert not check_regexp("a" * (MAX_TEXT + 1), "a")


def test_registration_refuses_a_pattern_go_refuses() -> None:
    text = """job "web" {
  group "g" {
    constraint {
      attribute = "${attr.kernel.name}"
      regexp = "^(?!windows)"
    }
    task "t" { driver = "mock_driver" }
  }
}"""
    with pytest.raises(JobSpecError) as info:
        parse_job(text, filename="job.hcl")
    (problem,) = info.value.problems
    assert problem.message == (
        "Regular expression failed to compile: error parsing regexp: "
        "invalid or unsupported Perl syntax: `(?!`"
    )


def test_a_pattern_that_does_not_compile_at_scheduling_filters_the_node() -> None:
    # The pattern comes from the node's meta, so registration compiled only "${meta.p}".
    text = """job "web" {
  group "g" {
    constraint {
      attribute = "${attr.kernel.name}"
      regexp = "${meta.p}"
    }
    task "t" { driver = "mock_driver" }
  }
}"""
    job = parse_job(text)
    hostile = node(p="(lin)\\1")
    group = job.task_groups[0]
    reason = "${attr.kernel.name} regexp ${meta.p}"
    assert filter_reason(job, group, hostile, []) == reason
    assert filter_reason(job, group, node(p="^lin"), []) is None
    job.job_modify_index = 1
    ev = Evaluation(id="e1", job_id=job.id, triggered_by="job-register")
    plan = schedule(SchedulerState(hostile), ev, job, index=1, now=1, new_id=lambda: "x")
    assert plan.place == []
    assert plan.eval.failed_tg_allocs["g"].constraint_filtered == {reason: 1}  # type: ignore[index]


# --------------------------------------------------------------------------- numbers, versions


def test_integers_past_int64_are_refused_by_their_length() -> None:
    assert go_int("1" * 5000) is None  # int() itself raises past 4300 digits
    assert go_int("-" + "0" * 5000 + "42") == -42  # leading zeros, as Go's ParseInt takes them
    assert go_int(str((1 << 63) - 1)) == (1 << 63) - 1
    assert go_int(str(1 << 63)) is None
    assert check_order("<", "1" * 5000, "5")  # lexical, as in Go: no crash


def test_versions_past_the_cap_are_malformed() -> None:
    long = "1." + "0" * MAX_VERSION_TEXT
    with pytest.raises(VersionError) as info:
        parse_version(long)
    assert str(info.value) == f"malformed version: {long[:64]}… ({len(long)} characters)"
    with pytest.raises(VersionError) as info:
        version_constraint(">= " + long)
    assert str(info.value).startswith("Malformed constraint: >= 1.000")
    assert not satisfies(long, ">= 1.0")
    # Under the cap a long version still parses, and a long segment is go-version's error.
    assert satisfies("1.0-" + "a" * (MAX_VERSION_TEXT - 8), ">= 1.0-a")
    with pytest.raises(VersionError, match=r"^error parsing version: "):
        parse_version("1." + "9" * 100)


def test_a_constraint_on_a_job_struct_passes_through_filter_reason() -> None:
    task = Task(name="t", driver="mock_driver")
    group = TaskGroup(
        name="g", tasks=[task], constraints=[Constraint("${meta.x}", "(a+)+$", "regexp")]
    )
    job = Job(id="web", task_groups=[group])
    assert filter_reason(job, group, node(x="a" * 50 + "b"), []) == "${meta.x} regexp (a+)+$"


# --------------------------------------------------------------------------- regexp work bound


def test_a_match_beyond_the_work_bound_is_refused_with_its_reason() -> None:
    pattern = "(?i)\\pL+"  # an ordinary pattern, with a big Unicode class
    size = compile_regexp(pattern).program_size
    fits = "a" * (MAX_MATCH_WORK // size - 1)  # positions: bytes + 1
    assert check_regexp(fits, pattern)
    assert not check_regexp(fits + "a", pattern)
    job = Job(
        id="web",
        task_groups=[
            TaskGroup(
                name="g",
                tasks=[Task(name="t", driver="mock_driver")],
                constraints=[Constraint("${meta.x}", pattern, "regexp")],
            )
        ],
    )
    group = job.task_groups[0]
    assert filter_reason(job, group, node(x=fits), []) is None
    positions = len(fits) + 2
    assert filter_reason(job, group, node(x=fits + "a"), []) == (
        f"${{meta.x}} regexp {pattern} (regexp too costly: {size} instructions × {positions} "
        f"positions > {MAX_MATCH_WORK})"
    )
    assert filter_reason(job, group, node(x="a" * (MAX_TEXT + 1)), []) == (
        f"${{meta.x}} regexp {pattern} (value of {MAX_TEXT + 1} characters, at most {MAX_TEXT})"
    )


def test_a_program_past_its_memory_bound_does_not_compile() -> None:
    with pytest.raises(GoRegexpError) as info:
        compile_regexp(dfa_defeating(999))
    assert str(info.value) == (
        "error parsing regexp: expression too large: "
        "`[ab]*a[ab]{999}c|[ab]*a[ab]{998}… (its program needs more than 256 KiB)`"
    )


def test_registration_accepts_a_literal_match_beyond_the_work_bound() -> None:
    # Nomad's Constraint.Validate only compiles the pattern: the job registers, and yurt's
    # placement filters every node with the reason (feasible.py `_filter_text`).
    pattern = "(?i)\\\\pL+"  # HCL spelling of (?i)\pL+
    size = compile_regexp("(?i)\\pL+").program_size
    value = "a" * (MAX_MATCH_WORK // size)
    text = f"""job "web" {{
  group "g" {{
    constraint {{
      attribute = "{value}"
      regexp = "{pattern}"
    }}
    task "t" {{ driver = "mock_driver" }}
  }}
}}"""
    job = parse_job(text, filename="job.hcl")
    group = job.task_groups[0]
    assert filter_reason(job, group, node(), []) == (
        f"{value} regexp (?i)\\pL+ (regexp too costly: {size} instructions "
        f"× {len(value) + 1} positions > {MAX_MATCH_WORK})"
    )


#: What the constraint cache may keep, all programs at their worst (the bound is ~40 MiB).
CACHE_MEMORY_BOUND = 64 * 1024 * 1024


def test_the_compiled_pattern_cache_keeps_little_memory() -> None:
    # 300 distinct patterns (more than google-re2's own 128-entry cache, and than ours), each
    # the worst measured for memory: a 4 KB case-folded literal, its program near the bound.
    script = (
        "import ctypes\n"
        "from yurt.runtime.server.scheduler.feasible import check_regexp\n"
        "libc = ctypes.CDLL('libc.so.6')\n"
        "def rss():\n"
        "    libc.malloc_trim(0)\n"
        "    with open('/proc/self/status') as f:\n"
        "        return next(int(l.split()[1]) for l in f if l.startswith('VmRSS')) * 1024\n"
        "check_regexp('k', 'k')\n"
        "base = rss()\n"
        "for i in range(300):\n"
        "    check_regexp('kK' * 20, '(?i)' + 'k' * 4080 + f'{i:04}')\n"
        "print(rss() - base)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        timeout=120,
        capture_output=True,
        text=True,
        check=True,
    )
    grown = int(done.stdout)
    assert grown < CACHE_MEMORY_BOUND, f"the cache kept {grown / 2**20:.0f} MiB"
