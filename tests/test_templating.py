"""The template runtime's pure parts (layer 0): the change decision (restart wins, one signal
per name, the largest splay), `wait` quiescence with time passed in, Nomad's "Missing: …"
text, paths confined to the allocation directory (links included), env files, and a render's
dependency discovery in passes."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import trio

from yurt.runtime.client.templating.change import (
    Quiescence,
    decide,
    missing_message,
    splay_delay,
    task_wait,
)
from yurt.runtime.client.templating.data import MemoryTemplateData
from yurt.runtime.client.templating.files import (
    DEST_ESCAPES,
    SOURCE_ESCAPES,
    TemplateFileError,
    client_path,
    parse_env,
    read_confined,
    write_confined,
)
from yurt.runtime.client.templating.render import CompiledTemplate, Dep, render_all
from yurt.runtime.lib.durations import SECOND
from yurt.runtime.structs.service import ServiceRegistration
from yurt.runtime.structs.template import ChangeScript, Template, WaitConfig


def tmpl(mode: str, *, signal: str = "", splay: int = 0, script: str = "") -> Template:
    return Template(data="x", destination=f"local/{mode}{signal}{script}", change_mode=mode,
                    change_signal=signal, splay=splay,
                    change_script=ChangeScript(command=script) if script else None)


@pytest.mark.parametrize(("changed", "restart", "signals", "scripts", "splay"), [
    ([], False, [], [], 0),
    ([tmpl("noop", splay=9)], False, [], [], 0),
    ([tmpl("signal", signal="SIGHUP", splay=3)], False, ["SIGHUP"], [], 3),
    ([tmpl("signal", signal="SIGHUP"), tmpl("signal", signal="SIGHUP", splay=2),
      tmpl("signal", signal="SIGUSR1", splay=1)], False, ["SIGHUP", "SIGUSR1"], [], 2),
    ([tmpl("signal", signal="SIGHUP"), tmpl("restart", splay=4)], True, [], [], 4),
    ([tmpl("script", script="/r.sh"), tmpl("signal", signal="SIGHUP")], False, ["SIGHUP"],
     ["/r.sh"], 0),
    ([tmpl("script", script="/r.sh"), tmpl("restart")], True, [], [], 0),
])
def test_decide(changed: list[Template], restart: bool, signals: list[str], scripts: list[str],
                splay: int) -> None:
    action = decide(changed)
    assert (action.restart, action.signals, [s.command for s in action.scripts],
            action.splay) == (restart, signals, scripts, splay)
    assert action.acts is (restart or bool(signals) or bool(scripts))


def test_splay_delay_is_below_the_splay() -> None:
    rng = random.Random(1)
    delays = [splay_delay(10 * SECOND, rng) for _ in range(200)]
    assert all(0 <= d < 10 * SECOND for d in delays)
    assert len(set(delays)) > 100
    assert splay_delay(0, rng) == 0


def test_quiescence_without_wait_is_due_at_once() -> None:
    q = Quiescence(None)
    assert q.due_at() is None
    q.change(5)
    assert q.due_at() == 5
    q.rendered()
    assert q.due_at() is None


def test_quiescence_waits_for_min_of_quiet_up_to_max() -> None:
    q = Quiescence(WaitConfig(min=2 * SECOND, max=10 * SECOND))
    q.change(0)
    assert q.due_at() == 2 * SECOND
    q.change(1 * SECOND)
    assert q.due_at() == 3 * SECOND
    for t in range(2, 12):
        q.change(t * SECOND)
    assert q.due_at() == 10 * SECOND  # first change + max caps a steady stream


def test_quiescence_max_defaults_to_four_times_min() -> None:
    q = Quiescence(WaitConfig(min=1 * SECOND))
    for t in range(10):
        q.change(t * SECOND // 2)
    assert q.due_at() == 4 * SECOND


def test_task_wait_takes_the_longest() -> None:
    a = Template(wait=WaitConfig(min=1 * SECOND, max=5 * SECOND))
    b = Template(wait=WaitConfig(min=3 * SECOND))
    assert task_wait([a, b, Template()]) == WaitConfig(min=3 * SECOND, max=5 * SECOND)
    assert task_wait([Template()]) is None


def test_missing_message_lists_three_then_counts() -> None:
    assert missing_message(["b", "a"]) == "Missing: a, b"
    assert missing_message(["d", "c", "b", "a", "e"]) == "Missing: a, b, c, and 2 more"


# --------------------------------------------------------------------------- files


def make_task_dir(tmp_path: Path) -> Path:
    task = tmp_path / "alloc-1" / "web"
    (task / "local").mkdir(parents=True)
    (tmp_path / "alloc-1" / "alloc").mkdir()
    return task


@pytest.mark.parametrize(("raw", "rel"), [
    ("local/x.conf", "web/local/x.conf"),
    ("/local/x.conf", "web/local/x.conf"),  # outside the alloc dir: joined to the task dir
    ("../alloc/shared.conf", "alloc/shared.conf"),
    ("/etc/passwd", "web/etc/passwd"),
])
def test_client_path_destination(tmp_path: Path, raw: str, rel: str) -> None:
    assert client_path(raw, make_task_dir(tmp_path), destination=True) == rel


def test_client_path_keeps_an_absolute_path_inside_the_alloc_dir(tmp_path: Path) -> None:
    task = make_task_dir(tmp_path)
    inside = str(task.parent / "alloc" / "x")
    assert client_path(inside, task, destination=True) == "alloc/x"
    assert client_path(inside, task, destination=False) == "alloc/x"


@pytest.mark.parametrize(("raw", "destination", "message"), [
    ("../../x", True, DEST_ESCAPES),
    ("local/../../../x", True, DEST_ESCAPES),
    ("../../x", False, SOURCE_ESCAPES),
    ("/etc/passwd", False, SOURCE_ESCAPES),  # a source outside: refused, not joined
])
def test_client_path_refuses_escapes(tmp_path: Path, raw: str, destination: bool,
                                     message: str) -> None:
    with pytest.raises(TemplateFileError, match=message):
        client_path(raw, make_task_dir(tmp_path), destination=destination)


def test_write_creates_directories_perms_and_replaces_atomically(tmp_path: Path) -> None:
    root = make_task_dir(tmp_path).parent
    write_confined(root, "web/local/deep/er/app.conf", b"one", 0o600)
    path = root / "web/local/deep/er/app.conf"
    assert path.read_bytes() == b"one"
    assert path.stat().st_mode & 0o777 == 0o600
    inode = path.stat().st_ino
    write_confined(root, "web/local/deep/er/app.conf", b"two", 0o644)
    assert path.read_bytes() == b"two"
    assert path.stat().st_ino != inode  # renamed over, never truncated in place
    assert sorted(os.listdir(path.parent)) == ["app.conf"]  # no temporary left behind
    assert read_confined(root, "web/local/deep/er/app.conf") == b"two"
    assert read_confined(root, "web/local/none") is None


def test_write_refuses_a_link_that_leads_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = make_task_dir(tmp_path).parent
    (root / "web/local/out").symlink_to(outside)
    with pytest.raises(TemplateFileError, match=DEST_ESCAPES):
        write_confined(root, "web/local/out/x", b"data", 0o644)
    assert list(outside.iterdir()) == []


def test_write_never_follows_a_link_in_place_of_the_file(tmp_path: Path) -> None:
    outside = tmp_path / "target"
    outside.write_text("keep")
    root = make_task_dir(tmp_path).parent
    (root / "web/local/app.conf").symlink_to(outside)
    write_confined(root, "web/local/app.conf", b"new", 0o644)
    assert outside.read_text() == "keep"  # the link was replaced, its target untouched
    assert (root / "web/local/app.conf").read_bytes() == b"new"


def test_read_refuses_a_link_that_leads_outside(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s")
    root = make_task_dir(tmp_path).parent
    (root / "web/local/in.tpl").symlink_to(secret)
    with pytest.raises(TemplateFileError, match=SOURCE_ESCAPES):
        read_confined(root, "web/local/in.tpl")


def test_parse_env() -> None:
    text = ('# a comment\nA=1\nexport B="two words"\nC=\'single $X\'\nD=${A}\n'
            'E="line\\nbreak"\n')
    assert parse_env(text) == {"A": "1", "B": "two words", "C": "single $X", "D": "${A}",
                               "E": "line\nbreak"}


# --------------------------------------------------------------------------- render


async def test_render_discovers_dependencies_in_passes() -> None:
    data = MemoryTemplateData()
    data.put_variable("cfg/web", {"upstream": "api"})
    data.register(ServiceRegistration(id="r1", service_name="api", address="10.1.1.1", port=9))
    # The service name comes from a variable: a second pass fetches the service.
    text = ('{{ with nomadVar "cfg/web" }}{{ range nomadService .upstream.Value }}'
            '{{ .Address }}:{{ .Port }}{{ end }}{{ end }}')
    compiled = [CompiledTemplate(Template(data=text, destination="x"), text)]
    render = await render_all(compiled, data, {})
    assert [r.text for r in render.results] == ["10.1.1.1:9"]
    assert render.deps == {Dep("var", "default", "cfg/web"),
                           Dep("service", "default", "api")}
    assert render.complete
    assert data.fetches == 2


async def test_render_is_incomplete_while_a_variable_is_missing() -> None:
    data = MemoryTemplateData()
    text = '{{ with nomadVar "nope" }}{{ .a }}{{ end }}{{ nomadVarExists "nope" }}'
    compiled = [CompiledTemplate(Template(data=text, destination="x"), text)]
    render = await render_all(compiled, data, {})
    assert not render.complete
    assert render.missing == ["nomad.var.block(nope@default.global)"]


async def test_render_uses_the_given_env_and_delimiters() -> None:
    spec = Template(data="[[ env \"NOMAD_TASK_NAME\" ]] {{ x }}", destination="x",
                    left_delimiter="[[", right_delimiter="]]")
    render = await render_all([CompiledTemplate(spec, spec.data)], MemoryTemplateData(),
                              {"NOMAD_TASK_NAME": "web"})
    assert [r.text for r in render.results] == ["web {{ x }}"]


async def test_memory_source_wakes_waiters_on_each_change() -> None:
    data = MemoryTemplateData()
    start = data.index()
    async with trio.open_nursery() as nursery:
        woke: list[int] = []

        async def waiter() -> None:
            woke.append(await data.wait_changed(start))

        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == []
        data.touch()
    assert woke == [start + 1]
