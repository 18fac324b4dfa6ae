"""`yurt ui` (runtime/cli/ui.py): which page an ID opens, in Nomad's order and with its
messages (plain logic); the private redirect page a secret link goes through (real files); and
the command as a user runs it against a real agent with ACLs on: the address, `-show-url`,
`-authenticate`'s one-time token (good once), its refusals, and no browser to start.
The browser side of the link is tests/test_ui_acl.py's."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.agent_support import mock_job
from tests.browser_support import YURT, UiAgent, start_ui_agent
from tests.token_support import stranger_env
from yurt.runtime.cli.ui import ONE_TIME_LIFE_S, redirect_html, redirect_page, resolve_match

# ---------------------------------------------------------------------------- plain logic


@pytest.mark.parametrize(("ident", "matches", "expected"), [
    ("web", {"jobs": ["web"], "allocs": [], "nodes": []}, [("jobs", "web")]),
    ("ab", {"jobs": [], "allocs": ["ab12"], "nodes": []}, [("allocs", "ab12")]),
    ("ab", {"jobs": [], "allocs": [], "nodes": ["ab99"]}, [("nodes", "ab99")]),
    # An exact ID wins over the prefixes it is of, in any context.
    ("ab", {"jobs": ["ab", "abc"], "allocs": ["ab12"]}, [("jobs", "ab")]),
    ("ab12", {"jobs": ["ab123"], "allocs": ["ab12"]}, [("allocs", "ab12")]),
    # Ambiguous: two of one kind, or one each of two kinds (command/ui.go `matchCount`).
    ("a", {"jobs": ["a1", "a2"]}, [("jobs", "a1"), ("jobs", "a2")]),
    ("a", {"jobs": ["a1"], "nodes": ["a9"]}, [("jobs", "a1"), ("nodes", "a9")]),
    # Contexts `nomad ui` does not open are not matches.
    ("e", {"evals": ["e1"], "jobs": []}, []),
])
def test_an_id_names_the_page_nomad_ui_would_open(ident: str, matches: dict[str, list[str]],
                                                  expected: list[tuple[str, str]]) -> None:
    assert resolve_match(ident, matches) == expected


def test_the_redirect_page_holds_the_link_as_an_attribute_only() -> None:
    page = redirect_html('http://h:1/ui/jobs?ott=x"><script>alert(1)</script>&a=1')
    assert "<script>" not in page
    assert 'url=http://h:1/ui/jobs?ott=x&quot;&gt;&lt;script&gt;' in page
    assert "&amp;a=1" in page
    assert '<meta name="referrer" content="no-referrer">' in page


def test_redirect_pages_are_private_and_old_ones_go(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    first = redirect_page("http://h:1/ui/jobs?ott=one")
    assert first.parent == runtime / f"yurt-ui-{os.getuid()}"
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert stat.S_IMODE(first.parent.stat().st_mode) == 0o700
    old = time.time() - ONE_TIME_LIFE_S - 60
    os.utime(first, (old, old))
    recent = redirect_page("http://h:1/ui/jobs?ott=two")

    third = redirect_page("http://h:1/ui/jobs?ott=three")

    assert not first.exists(), "a page older than a one-time token's life stays"
    assert recent.exists()
    assert "ott=three" in third.read_text()


def test_a_folder_others_may_enter_is_never_written_to(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir()
    shared = runtime / f"yurt-ui-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))

    page = redirect_page("http://h:1/ui/jobs?ott=secret")

    assert page.parent != shared
    assert list(shared.iterdir()) == []
    assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700


# ---------------------------------------------------------------------------- the command

@pytest.fixture(scope="module")
def acl_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiAgent]:
    with start_ui_agent(tmp_path_factory.mktemp("cli-ui-agent"), acl=True) as agent:
        for job_id in ("ui-web", "dup-a", "dup-b"):
            agent.run_job(mock_job(job_id))
        agent.wait_alloc("ui-web")
        yield agent


def yurt_ui(agent: UiAgent, token: str, *args: str, **env: str
            ) -> subprocess.CompletedProcess[str]:
    """`yurt ui <args>` with `token` as $YURT_TOKEN; `env` over the environment (a variable
    given as "" is removed from it)."""
    environment = {**stranger_env(), "YURT_ADDR": agent.address, **env}
    environment = {k: v for k, v in environment.items() if v != "" or k not in env}
    if token:
        environment["YURT_TOKEN"] = token
    return subprocess.run([YURT, "ui", *args], capture_output=True, text=True,
                          env=environment, timeout=60, check=False)


@pytest.mark.slow
def test_show_url_prints_the_page_an_id_names(acl_agent: UiAgent) -> None:
    alloc = acl_agent.wait_alloc("ui-web")
    node = alloc["NodeID"]
    for args, path in [((), "/ui/jobs"), (("ui-w",), "/ui/jobs/ui-web"),
                       (("-namespace", "default", "ui-web"), "/ui/jobs/ui-web"),
                       ((alloc["ID"][:8],), f"/ui/allocations/{alloc['ID']}"),
                       ((node,), f"/ui/clients/{node}")]:
        done = yurt_ui(acl_agent, acl_agent.token, "-show-url", *args)
        assert (done.returncode, done.stderr) == (0, ""), args
        assert done.stdout == f"URL for web UI: {acl_agent.address}{path}\n", args


@pytest.mark.slow
def test_ids_that_name_nothing_or_several_fail_as_nomad_says(acl_agent: UiAgent) -> None:
    none = yurt_ui(acl_agent, acl_agent.token, "-show-url", "nothing-here")
    assert (none.returncode, none.stdout) == (1, "")
    assert none.stderr == 'yurt: Unable to resolve ID: "nothing-here"\n'
    several = yurt_ui(acl_agent, acl_agent.token, "-show-url", "dup")
    assert several.returncode == 2
    assert several.stderr == 'yurt: Multiple matches found for id "dup"\n\nJobs:\ndup-a, dup-b\n'
    two = yurt_ui(acl_agent, acl_agent.token, "-show-url", "ui-web", "dup-a")
    assert two.returncode == 2
    assert "takes no or one optional argument" in two.stderr


@pytest.mark.slow
def test_authenticate_adds_a_one_time_secret_good_once(acl_agent: UiAgent) -> None:
    done = yurt_ui(acl_agent, acl_agent.token, "-authenticate", "-show-url", "ui-web")
    assert done.returncode == 0, done.stderr
    prefix = f"URL for web UI: {acl_agent.address}/ui/jobs/ui-web?ott="
    assert done.stdout.startswith(prefix)
    secret = done.stdout.removeprefix(prefix).strip()
    with httpx2.Client(base_url=acl_agent.address, timeout=20) as anonymous:
        first = anonymous.post("/v1/acl/token/onetime/exchange", json={"OneTimeSecretID": secret})
        again = anonymous.post("/v1/acl/token/onetime/exchange", json={"OneTimeSecretID": secret})
    assert first.status_code == 200
    assert first.json()["Token"]["SecretID"] == acl_agent.token
    assert again.status_code == 403


@pytest.mark.slow
def test_authenticate_without_a_good_token_says_why(acl_agent: UiAgent) -> None:
    unknown = yurt_ui(acl_agent, "0b795158-e89c-48cc-9425-aa88f4efb6dd", "-authenticate",
                      "-show-url")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr.startswith(
        "yurt: Could not get one-time token: ACL token not found (set NOMAD_TOKEN, YURT_TOKEN")
    anonymous = yurt_ui(acl_agent, "", "-authenticate", "-show-url")
    assert anonymous.returncode == 1
    assert "Could not get one-time token: Permission denied" in anonymous.stderr


@pytest.mark.slow
def test_without_a_browser_the_address_is_printed(acl_agent: UiAgent, tmp_path: Path) -> None:
    nothing = tmp_path / "bin"
    nothing.mkdir()  # a PATH with no browser on it, and no display to start one on
    done = yurt_ui(acl_agent, acl_agent.token, "ui-web", PATH=str(nothing), BROWSER="",
                   DISPLAY="", WAYLAND_DISPLAY="")
    assert done.returncode == 0, done.stderr
    address = f"{acl_agent.address}/ui/jobs/ui-web"
    assert done.stdout == f'Opening URL "{address}"\nURL for web UI: {address}\n'
    assert "No browser could be started" in done.stderr
