"""A template cannot stall or exhaust what renders it (layer 0, and layer 2 for the threads).

Every hostile template runs in a child process with an address-space limit and a wall-clock
timeout, so a regression shows up as a failed test — MemoryError, RecursionError or a timeout
— rather than as a test run that eats the machine. Each case states what Go does and what
the bound gives instead: Go's fmt rules for widths, RE2 for patterns, a step budget, an output
cap and a nesting cap for the evaluator.
"""

from __future__ import annotations

import gc
import json
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest
import trio

from tests.test_gotemplate_consul import FakeLookups
from yurt.runtime.client.templating.data import MemoryTemplateData
from yurt.runtime.client.templating.render import CompiledTemplate, render_all
from yurt.runtime.gotemplate import Limits, Template, TemplateError
from yurt.runtime.gotemplate.consul import consul_funcs
from yurt.runtime.gotemplate.limits import (
    DATA_PER_STEP,
    MAX_OUTPUT,
    MAX_STEPS,
    STOP_CHECK_EVERY,
)
from yurt.runtime.structs.template import Template as TemplateSpec

#: The child's address space: the interpreter and RE2 need ~100 MiB; a template that
#: allocates a gigabyte fails with MemoryError instead of swapping the machine.
CHILD_MEMORY = 1 << 30
#: Ten times what any bounded case below takes on a loaded machine.
CHILD_TIMEOUT = 30.0

_CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
from yurt.runtime.gotemplate import Template, TemplateError
from yurt.runtime.gotemplate.consul import consul_funcs
started = time.monotonic()
try:
    out = Template("local/t.conf", sys.argv[1], consul_funcs({}, None)).execute(None)
    result = {"output": out[:200], "length": len(out)}
except TemplateError as e:
    result = {"error": str(e)}
except BaseException as e:
    result = {"crash": f"{type(e).__name__}: {e}"[:300]}
result["seconds"] = time.monotonic() - started
print(json.dumps(result))
"""


@dataclass
class Outcome:
    output: str | None
    error: str | None
    seconds: float


def render_isolated(text: str) -> Outcome:
    """Render `text` in a memory- and time-limited child; fails the test on a crash."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, text, str(CHILD_MEMORY)],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the render did not finish in {CHILD_TIMEOUT} s")
    lines = proc.stdout.strip().splitlines()
    assert lines, f"child died (rc {proc.returncode}): {proc.stderr[-2000:]}"
    result = json.loads(lines[-1])
    if "crash" in result:
        pytest.fail(f"the render crashed: {result['crash']}")
    return Outcome(result.get("output"), result.get("error"), result["seconds"])


def error_of(text: str) -> str:
    outcome = render_isolated(text)
    assert outcome.error is not None, f"rendered {outcome.output!r}"
    return outcome.error


# --------------------------------------------------------------------------- ranges


def test_an_integer_range_is_walked_lazily() -> None:
    # Go 1.22 ranges over an int without a slice; breaking early costs nothing.
    text = "{{ range $i := 1000000000 }}{{ if eq $i 3 }}{{ break }}{{ end }}{{ $i }}{{ end }}"
    assert render_isolated(text).output == "012"


def test_a_huge_range_ends_on_the_step_budget_naming_the_template() -> None:
    error = error_of("{{ range 1000000000 }}{{ end }}")
    assert error.startswith("template: local/t.conf:1:")
    assert f"exceeded the render budget of {MAX_STEPS} steps" in error


# --------------------------------------------------------------------------- printf


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # A literal width past 10^6 makes Go's parsenum give up on the rest of the format.
        ('{{ printf "%999999999d" 1 }}', "%!(NOVERB)%!(EXTRA int=1)"),
        ('{{ printf "%*d" 999999999 1 }}', "%!(BADWIDTH)1"),
        ('{{ printf "%*d" -999999999 1 }}', "%!(BADWIDTH)1"),
        ('{{ printf "%.*f" 999999999 1.5 }}', "%!(BADPREC)1.500000"),
        ('{{ printf "%.999999999f|" 1.5 }}', "%!(NOVERB)%!(EXTRA float64=1.5)"),
    ],
)
def test_printf_refuses_widths_and_precisions_beyond_a_million(text: str, want: str) -> None:
    assert render_isolated(text).output == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('{{ printf "%*d|" 1000000 1 | len }}', "1000001"),  # 10^6 itself is allowed
        ('{{ printf "%*d|" -3 1 }}', "1  |"),  # a negative width pads on the right
        ('{{ printf "%.*d" -1 1 }}', "%!(BADPREC)1"),
        ('{{ printf "%." 1 }}', "%!.(int=1)"),
    ],
)
def test_printf_width_edges_as_go(text: str, want: str) -> None:
    assert Template("t", text).execute(None) == want


def test_printf_repeating_a_wide_verb_is_bounded() -> None:
    # Each verb may be 10^7 wide; a thousand of them would be ten gigabytes.
    error = error_of('{{ printf "' + "%9999999d" * 1000 + '" ' + "1 " * 1000 + "}}")
    assert f"error calling printf: formatted text exceeds {MAX_OUTPUT} characters" in error


# --------------------------------------------------------------------------- budget


def doubling(levels: int) -> str:
    """Templates that each call the next twice: 2^levels calls."""
    defs = "".join(
        f'{{{{ define "d{i}" }}}}{{{{ template "d{i + 1}" }}}}'
        f'{{{{ template "d{i + 1}" }}}}{{{{ end }}}}'
        for i in range(levels)
    )
    return defs + f'{{{{ define "d{levels}" }}}}x{{{{ end }}}}{{{{ template "d0" }}}}'


def test_a_doubling_define_chain_ends_on_the_step_budget() -> None:
    outcome = render_isolated(doubling(40))  # 2^40 calls
    assert outcome.error is not None
    assert f"exceeded the render budget of {MAX_STEPS} steps" in outcome.error
    assert outcome.seconds < CHILD_TIMEOUT / 2


def test_a_modest_doubling_chain_still_renders() -> None:
    assert Template("t", doubling(10)).execute(None) == "x" * 1024


def test_deep_nesting_inside_recursion_is_a_template_error_not_a_crash() -> None:
    # Fifty nested `if`s per call outgrow Python's stack long before 100 calls deep.
    body = "{{ if true }}" * 50 + '{{ template "r" }}' + "{{ end }}" * 50
    error = error_of(f'{{{{ define "r" }}}}{body}{{{{ end }}}}{{{{ template "r" }}}}')
    assert error.startswith("template: local/t.conf:")
    assert "exceeded maximum" in error


def test_plain_recursion_stops_at_the_template_depth() -> None:
    with pytest.raises(TemplateError, match=r"exceeded maximum template depth \(100\)"):
        Template("t", '{{ define "r" }}{{ template "r" }}{{ end }}{{ template "r" }}').execute()


def test_parsing_is_linear_in_the_variables_a_template_declares() -> None:
    # Parsing is not budgeted (it is linear in the text). Checking each reference against a
    # list of the variables in scope made it quadratic: 20000 variables and as many
    # references took ~35 times as long as 2500 of each, not ~8 times.

    def parse_seconds(count: int) -> float:
        text = "".join(f"{{{{$v{i}:=1}}}}" for i in range(count))
        text += f"{{{{$v{count - 1}}}}}" * count
        best = float("inf")
        for _ in range(2):  # the better of two: a busy machine only ever adds time
            gc.collect()
            gc.disable()  # the collector's passes over many nodes are not the parser's
            try:
                started = time.process_time()
                Template("t", text)
                best = min(best, time.process_time() - started)
            finally:
                gc.enable()
        return best

    ratio = parse_seconds(20000) / parse_seconds(2500)
    assert ratio < 16, f"8 times the text took {ratio:.1f} times as long"


def test_deeply_nested_parentheses_are_a_parse_error_not_a_crash() -> None:
    error = error_of("{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}")
    assert error == "template: local/t.conf: max nesting depth exceeded"


def test_output_is_capped() -> None:
    error = error_of('{{ range 100 }}{{ printf "%1000000d" 1 }}{{ end }}')
    assert f"rendered text exceeds {MAX_OUTPUT} characters" in error


def test_a_string_doubled_in_a_variable_is_capped() -> None:
    error = error_of('{{ $x := "ab" }}{{ range 64 }}{{ $x = printf "%s%s" $x $x }}{{ end }}')
    assert f"exceeds {MAX_OUTPUT} characters" in error


@pytest.mark.parametrize(
    "call",
    [
        "join $s $l",  # 10^6 pieces glued with 10^6 characters each
        'replaceAll "" $s $s',  # the empty string matches between every character
        'regexReplaceAll "" $s $s',
    ],
)
def test_functions_that_multiply_their_inputs_refuse_before_allocating(call: str) -> None:
    setup = '{{ $s := printf "%01000000d" 0 }}{{ $l := split "" $s }}'
    error = error_of(setup + "{{ " + call + " }}")
    assert f"result exceeds {MAX_OUTPUT} " in error  # characters, or bytes for a regexp


@pytest.mark.parametrize("fn", ["print", "println", "html", "js", "urlquery"])
def test_variadic_functions_count_their_operands_before_joining_them(fn: str) -> None:
    # Three hundred names of one 4 MiB string: 1.2 GB once joined, from a 3 KB template.
    setup = '{{ $s := printf "%1000000s" "" }}{{ $s = printf "%s%s%s%s" $s $s $s $s }}'
    error = error_of(setup + "{{ $x := " + fn + " " + " ".join(["$s"] * 300) + " }}")
    assert f"error calling {fn}: formatted text exceeds {MAX_OUTPUT} characters" in error


@pytest.mark.parametrize(
    ("call", "want"),
    [
        ('html "<&>"', "&lt;&amp;&gt;"),
        ("js \"<'\\\\\\n\"", "\\u003C\\'\\\\\\u000A"),
        ('urlquery "a b&€"', "a+b%26%E2%82%AC"),
        ('html (printf "%2000000s" "" | replaceAll " " "<")', "error calling html: result exceeds"),
        ('js (printf "%2000000s" "" | replaceAll " " "=")', "error calling js: result exceeds"),
        ('urlquery (printf "%2000000s" "" | replaceAll " " "/")',
         "error calling urlquery: result exceeds"),
    ],
)
def test_escapes_count_their_result_before_building_it(call: str, want: str) -> None:
    outcome = render_isolated("{{ " + call + " }}")
    assert want in (outcome.output if outcome.error is None else outcome.error)


def test_split_charges_each_piece_before_making_it() -> None:
    # Four million one-character strings of 84 bytes each, nine times over: 3 GB held in
    # variables, had the pieces been charged as characters of data.
    setup = '{{ $s := printf "%1000000s" "" | replaceAll " " "\u20ac" }}'
    setup += '{{ $s = printf "%s%s%s%s" $s $s $s $s }}'
    error = error_of(setup + "".join(f'{{{{ $l{i} := split "" $s }}}}' for i in range(9)))
    assert f"exceeded the render budget of {MAX_STEPS} steps" in error
    assert "executing \"local/t.conf\" at <split>" in error


def test_parse_json_charges_each_value_it_makes() -> None:
    # 1.3 million empty objects a call, ~100 MB, fourteen times over.
    setup = '{{ $s := printf "[%s{}]" (printf "%01300000d" 0 | replaceAll "0" "{},") }}'
    error = error_of(setup + "".join(f"{{{{ $j{i} := parseJSON $s }}}}" for i in range(14)))
    assert f"exceeded the render budget of {MAX_STEPS} steps" in error


def test_to_json_charges_each_element_it_encodes() -> None:
    # Encoding an element is ~0.5 µs of Python: charged as 16 characters of data a step, a
    # full budget of toJSON over a million-element list was ~9 s instead of ~1 s.
    funcs = consul_funcs({}, FakeLookups())
    calls = 0

    def to_json(value: object) -> str:
        nonlocal calls
        calls += 1
        return str(funcs["toJSON"](value))

    text = '{{ $l := split "" (printf "%01000000d" 0) }}'
    text += "{{ range 100 }}{{ $j := toJSON $l }}{{ end }}"
    with pytest.raises(TemplateError, match="exceeded the render budget"):
        Template("t", text, {**funcs, "toJSON": to_json}).execute(limits=Limits())
    assert calls <= 3


def test_quoting_charges_the_characters_it_escapes_one_by_one() -> None:
    # %q walks a text that needs escapes in Python (~0.1 µs a character), which the data
    # charge (a step per 16 characters) undercounted fourfold; a plain text is C speed.
    escaped, plain = Limits(), Limits()
    Template("t", '{{ printf "%q" (printf "%100000s\\n" "") }}').execute(limits=escaped)
    Template("t", '{{ printf "%q" (printf "%100000s" "") }}').execute(limits=plain)
    assert escaped.spent - plain.spent >= 100000 // 2


def test_timestamp_charges_its_layout() -> None:
    # A layout was read by a Python loop over its characters, ~1 µs each, charged as data
    # (16 characters a step): a full budget of long layouts was ~40 s instead of ~1 s.
    funcs = consul_funcs({}, FakeLookups(), clock=lambda: 1700000000.0)
    calls = 0

    def timestamp(*layout: object) -> str:
        nonlocal calls
        calls += 1
        return str(funcs["timestamp"](*layout))

    text = '{{ $s := printf "%100000s" "2006" }}{{ range 1000 }}{{ $t := timestamp $s }}{{ end }}'
    with pytest.raises(TemplateError, match="exceeded the render budget"):
        Template("t", text, {**funcs, "timestamp": timestamp}).execute(limits=Limits())
    assert calls <= 50
    text = '{{ timestamp "Monday 2006-01-02T15:04:05Z07:00" }}'
    assert Template("t", text, funcs).execute() == "Tuesday 2023-11-14T22:13:20Z"


@pytest.mark.parametrize(
    "call",
    [
        'replaceAll "0" "1" $s',  # C speed, but a megabyte each time
        'regexReplaceAll "0" "1" $s',  # a Python loop per match
    ],
)
def test_calls_are_charged_by_the_size_of_their_data(call: str) -> None:
    # One step per call would allow millions of these; the data they touch is counted.
    setup = '{{ $s := printf "%01000000d" 0 }}'
    outcome = render_isolated(setup + "{{ range 1000 }}{{ $x := " + call + " }}{{ end }}")
    assert outcome.error is not None
    assert f"exceeded the render budget of {MAX_STEPS} steps" in outcome.error
    assert outcome.seconds < CHILD_TIMEOUT / 2


def test_a_stopped_execution_ends_at_its_next_check() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(TemplateError, match="render abandoned"):
        Template("t", "{{ range 1000000000 }}{{ end }}").execute(limits=Limits(stop=stop))


def test_a_stop_is_seen_however_far_charges_move_the_count() -> None:
    # Each iteration costs a whole number of checks' worth of steps (the steps of the call and
    # of its data): a look at `stop` only when the count lands on a multiple would never come.
    for width in range(STOP_CHECK_EVERY - 16, STOP_CHECK_EVERY):
        text = f'{{{{ $s := printf "%{width * DATA_PER_STEP}s" "" }}}}'
        text += "{{ range 100000 }}{{ len $s }}{{ end }}"
        stop = threading.Event()
        stop.set()
        limits = Limits(stop=stop)
        with pytest.raises(TemplateError, match="render abandoned"):
            Template("t", text).execute(limits=limits)
        assert limits.spent <= 2 * STOP_CHECK_EVERY + width


def test_a_stop_set_during_the_render_ends_it_soon() -> None:
    stop = threading.Event()

    def give_up() -> str:
        stop.set()
        return ""

    limits = Limits(stop=stop)
    text = '{{ $s := printf "%65520s" "" }}{{ range 10 }}.{{ end }}{{ giveUp }}'
    text += "{{ range 100000 }}{{ len $s }}{{ end }}"
    with pytest.raises(TemplateError, match="render abandoned"):
        Template("t", text, {"giveUp": give_up}).execute(limits=limits)
    assert limits.spent <= 3 * STOP_CHECK_EVERY + 65520 // DATA_PER_STEP


def test_a_variable_lookup_costs_the_same_with_many_variables_in_scope() -> None:
    # A lookup that scanned every variable in scope would make each step thousands of times
    # dearer: a full budget of lookups would then run for minutes.
    declared = "".join(f"{{{{$v{i}:=1}}}}" for i in range(7000))
    outcome = render_isolated(declared + "{{ range 100000000 }}{{ $x := $v0 }}{{ end }}")
    assert outcome.error is not None
    assert f"exceeded the render budget of {MAX_STEPS} steps" in outcome.error
    assert outcome.seconds < CHILD_TIMEOUT / 2


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("{{ $x := 1 }}{{ if true }}{{ $x := 2 }}{{ $x }}{{ end }}{{ $x }}", "21"),
        ("{{ $x := 1 }}{{ range $x := 3 }}{{ $x }}{{ end }}{{ $x }}", "0121"),
        ("{{ $x := 0 }}{{ range $i, $x := . }}{{ $i }}{{ $x }}{{ end }}{{ $x }}", "0a1b0"),
        ("{{ range $x, $x := . }}{{ $x }}{{ end }}", "ab"),
        ("{{ $x := 1 }}{{ range 2 }}{{ $x = 2 }}{{ break }}{{ end }}{{ $x }}", "2"),
        ('{{ define "d" }}{{ $x := 5 }}{{ $x }}{{ end }}{{ $x := 1 }}{{ template "d" }}{{ $x }}',
         "51"),
    ],
)
def test_variables_scope_as_go(text: str, want: str) -> None:
    assert Template("t", text).execute(["a", "b"]) == want


def test_custom_limits_apply() -> None:
    with pytest.raises(TemplateError, match="exceeded the render budget of 100 steps"):
        Template("t", "{{ range 1000 }}{{ end }}").execute(limits=Limits(steps=100))
    with pytest.raises(TemplateError, match="rendered text exceeds 10 characters"):
        Template("t", "{{ range 6 }}ab{{ end }}").execute(limits=Limits(output=10))


# --------------------------------------------------------------------------- regexps

CATASTROPHIC = "a" * 40 + "b"  # (a+)+$ backtracks 2^40 times in a backtracking engine


def test_regex_match_is_linear_time() -> None:
    outcome = render_isolated(f'{{{{ regexMatch "(a+)+$" "{CATASTROPHIC}" }}}}')
    assert outcome.output == "false"
    assert outcome.seconds < 5


def test_regex_replace_all_is_linear_time() -> None:
    outcome = render_isolated(f'{{{{ regexReplaceAll "(a+)+$" "x" "{CATASTROPHIC}" }}}}')
    assert outcome.output == CATASTROPHIC
    assert outcome.seconds < 5


def dfa_defeating(alternatives: int, length: int) -> tuple[str, str]:
    """A pattern whose DFA RE2 gives up on (its NFA then costs text × program size) and a
    random text of `a`s and `b`s of `length` it does not match."""
    pattern = "|".join(f"[ab]*a[ab]{{{1000 - i}}}c" for i in range(alternatives))
    rng = random.Random(1)
    return pattern, "".join(rng.choice("ab") for _ in range(length))


def test_a_search_whose_worst_case_exceeds_the_budget_is_refused_before_it_runs() -> None:
    # 60 alternatives of ~1000 instructions over 20 KB: ~3 s of RE2 for one call.
    pattern, text = dfa_defeating(60, 20000)
    outcome = render_isolated(f'{{{{ regexMatch "{pattern}" "{text}" }}}}')
    assert outcome.error is not None
    assert f"at <regexMatch>: exceeded the render budget of {MAX_STEPS} steps" in outcome.error
    assert outcome.seconds < 1


def test_searches_are_charged_the_time_re2_takes() -> None:
    # Each search fits in the budget (~0.3 s); a thousand of them, charged by their data
    # alone, would run for minutes.
    pattern, text = dfa_defeating(60, 2000)
    text = f'{{{{ range 1000 }}}}{{{{ regexMatch "{pattern}" "{text}" }}}}{{{{ end }}}}'
    outcome = render_isolated(text)
    assert outcome.error is not None
    assert f"exceeded the render budget of {MAX_STEPS} steps" in outcome.error
    assert outcome.seconds < CHILD_TIMEOUT / 2


def test_replace_all_is_charged_each_search_it_makes() -> None:
    # Each search scans to the text's end (a[ab]*c could still match): linear each, quadratic
    # together, within the budget the matches alone are charged.
    setup = '{{ $a := printf "%0300000d" 0 | replaceAll "0" "a" }}'
    outcome = render_isolated(setup + '{{ regexReplaceAll "a[ab]*c|a" "x" $a | len }}')
    assert outcome.error is not None
    assert f"at <regexReplaceAll>: exceeded the render budget of {MAX_STEPS} steps" in (
        outcome.error
    )
    assert outcome.seconds < CHILD_TIMEOUT / 2


def test_compiling_patterns_is_charged() -> None:
    # A Unicode class parses into hundreds of ranges: 90000 characters of them take RE2 ~30 s
    # to refuse as too large.
    setup = '{{ $p := printf "%30000s" "" | replaceAll " " "\\\\pL" }}'
    outcome = render_isolated(setup + '{{ regexMatch $p "x" }}')
    assert outcome.error is not None
    assert f"at <regexMatch>: exceeded the render budget of {MAX_STEPS} steps" in outcome.error
    assert outcome.seconds < 1
    # 100 of them compile (within the 2 MiB program bound), in ~0.04 s: a new pattern on each
    # pass of a loop is charged that.
    setup = '{{ $p := printf "%100s" "" | replaceAll " " "\\\\pL" }}'
    loop = '{{ range $i := 1000 }}{{ regexMatch (printf "%s%d" $p $i) "x" }}{{ end }}'
    outcome = render_isolated(setup + loop)
    assert outcome.error is not None
    assert f"exceeded the render budget of {MAX_STEPS} steps" in outcome.error
    assert outcome.seconds < CHILD_TIMEOUT / 2


# --------------------------------------------------------------------------- off the loop


def slow_template() -> CompiledTemplate:
    """A render that is bounded but slow: most of the step budget."""
    text = "{{ range 3000000 }}{{ end }}"
    return CompiledTemplate(TemplateSpec(data=text, destination="local/slow"), text)


async def test_a_slow_render_leaves_the_event_loop_free() -> None:
    ticks = 0
    finished = trio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not finished.is_set():
            await trio.sleep(0.005)
            ticks += 1

    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        with trio.fail_after(CHILD_TIMEOUT):
            render = await render_all([slow_template()], MemoryTemplateData(), {})
        finished.set()
    took = time.monotonic() - started
    assert render.results[0].text == ""
    # On the loop, the ticker would run once, after the render; in a thread it keeps ticking.
    assert ticks >= 10, f"{ticks} ticks in {took:.2f} s"


async def test_a_cancelled_render_returns_without_waiting_for_the_thread() -> None:
    full = time.monotonic()
    await render_all([slow_template()], MemoryTemplateData(), {})
    full_seconds = time.monotonic() - full
    started = time.monotonic()
    with trio.move_on_after(0.05) as scope:
        await render_all([slow_template()], MemoryTemplateData(), {})
    took = time.monotonic() - started
    assert scope.cancelled_caught
    assert took < full_seconds / 2, f"cancel took {took:.2f} s, a render {full_seconds:.2f} s"


@pytest.mark.parametrize(
    ("pattern", "repl", "text", "want"),
    [  # Go's own examples for ReplaceAllString, and Expand's edge cases
        ("a(x*)b", "T", "-ab-axxb-", "-T-T-"),
        ("a(x*)b", "$1", "-ab-axxb-", "--xx-"),
        ("a(x*)b", "$1W", "-ab-axxb-", "---"),  # the group named "1W": empty
        ("a(x*)b", "${1}W", "-ab-axxb-", "-W-xxW-"),
        ("a(?P<n>x*)b", "${n}$$", "-ab-axxb-", "-$-xx$-"),
        ("a(x*)b", "${1", "-ab-", "-${1-"),  # malformed: the `$` is text
        ("a*", "-", "baaac", "-b-c-"),  # no empty match right after a match
        ("x*", "-", "abc", "-a-b-c-"),
    ],
)
def test_regex_replace_all_expands_as_go(pattern: str, repl: str, text: str, want: str) -> None:
    funcs = consul_funcs({}, FakeLookups())
    assert funcs["regexReplaceAll"](pattern, repl, text) == want


def test_a_bad_pattern_reads_as_go() -> None:
    with pytest.raises(TemplateError, match=r"error calling regexMatch: error parsing regexp: "):
        Template("t", '{{ regexMatch "(" "x" }}', consul_funcs({}, FakeLookups())).execute()


async def test_a_tasks_templates_and_passes_share_one_budget() -> None:
    # Each template alone is within the budget; three of them are not.
    text = "{{ range 2000000 }}{{ end }}"
    compiled = [
        CompiledTemplate(TemplateSpec(data=text, destination=f"local/{i}"), text) for i in range(3)
    ]
    with pytest.raises(TemplateError, match=r"^template: local/2:1:.*exceeded the render budget"):
        await render_all(compiled, MemoryTemplateData(), {})


def test_integer_arithmetic_wraps_as_go_int64() -> None:
    # Squaring 10 in a loop: Go wraps to 0 once 2^64 divides it; unbounded ints would need
    # 2^64 digits.
    text = "{{ $x := 10 }}{{ range 64 }}{{ $x = multiply $x $x }}{{ end }}{{ $x }}"
    assert render_isolated(text).output == "0"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("{{ 9223372036854775807 | add 1 }}", "-9223372036854775808"),
        ("{{ -7 | divide 2 }}", "-3"),  # truncated toward zero, as Go divides
        ("{{ 7 | divide -2 }}", "-3"),
    ],
)
def test_integer_arithmetic_as_go(text: str, want: str) -> None:
    assert Template("t", text, consul_funcs({}, FakeLookups())).execute() == want


def test_parse_int_refuses_values_beyond_int64() -> None:
    with pytest.raises(TemplateError, match='parsing "9223372036854775808": value out of range'):
        Template(
            "t", '{{ parseInt "9223372036854775808" }}', consul_funcs({}, FakeLookups())
        ).execute()


def test_printf_over_a_list_is_bounded_per_element() -> None:
    setup = '{{ $l := parseJSON "[' + ",".join(["1.5"] * 1000) + ']" }}'
    error = error_of(setup + '{{ printf "%.9999999f" $l }}')
    assert f"formatted text exceeds {MAX_OUTPUT} characters" in error


def test_pretty_json_of_a_deep_value_is_bounded() -> None:
    # 300 levels deep, 30000 leaves at the bottom: each leaf is indented 600 spaces.
    deep = "[" * 300 + ",".join(["1"] * 30000) + "]" * 300
    error = error_of('{{ $v := parseJSON "' + deep + '" }}{{ toJSONPretty $v }}')
    assert f"result exceeds {MAX_OUTPUT} characters" in error


def test_an_integer_literal_beyond_uint64_is_a_parse_error() -> None:
    # Python would keep a 16000-bit int, which then fails to print with a ValueError.
    with pytest.raises(TemplateError, match="illegal number syntax"):
        Template("t", "{{ 0x" + "f" * 4000 + " }}")
    assert Template("t", "{{ 18446744073709551615 }}").execute() == "18446744073709551615"


async def test_a_render_in_threads_runs_every_pass_to_its_end() -> None:
    # Pass 1 finds the variable unfetched, pass 2 renders with it; each pass takes well over
    # the steps between two looks at `stop`, which only a cancelled pass may set.
    text = '{{ with nomadVar "nomad/jobs/j" }}{{ .user }}{{ end }} {{ range 3000 }}.{{ end }}'
    data = MemoryTemplateData()
    data.put_variable("nomad/jobs/j", {"user": "a"})
    compiled = CompiledTemplate(TemplateSpec(data=text, destination="local/x"), text)
    with trio.fail_after(CHILD_TIMEOUT):
        render = await render_all([compiled], data, {}, in_thread=True)
    assert render.results[0].text == "a " + "." * 3000


def test_a_pattern_past_the_program_bound_is_a_template_error() -> None:
    # Compiled under RE2's default 8 MiB bound, 150 Unicode classes would compile and, cached
    # by google-re2's module cache, stay alive after the template's own cache let them go.
    setup = '{{ $p := printf "%150s" "" | replaceAll " " "\\\\pL" }}'
    outcome = render_isolated(setup + '{{ regexMatch $p "x" }}')
    assert outcome.error is not None
    assert "error parsing regexp: expression too large" in outcome.error
