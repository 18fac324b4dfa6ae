"""`yurt agent` that cannot start says why in one line, with its exit status (layer 3, and
layer 0 for the ExceptionGroup walk).

Every case runs the real command: a port another socket holds, a data dir another agent has
locked, a read-only file system (a tmpfs mounted read-only: the suite runs as root, so file
modes would not stop it), a port out of range, an address not on this machine, a missing
config file. Each must print exactly one line on stderr, no traceback, and exit 1 (the
machine is in the way) or 2 (the command is wrong), as runtime/cli/agent.py states.
"""

from __future__ import annotations

import errno
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proc_support import spawned_agent
from tests.test_agent_e2e import YURT, free_port
from yurt.runtime.agent.agent import AgentConfig
from yurt.runtime.cli.agent import leaves, start_failure
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE, StateLockedError


def agent(*args: str) -> tuple[int, list[str]]:
    """Run `yurt agent ARGS` to its end; its status and stderr lines."""
    out = subprocess.run([YURT, "agent", *args], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    return out.returncode, out.stderr.splitlines()


def one_line(lines: list[str]) -> str:
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("yurt: ")
    assert "Traceback" not in line
    assert "ExceptionGroup" not in line
    return line


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        status, lines = agent("--data-dir", str(tmp_path / "data"), "--port", str(port))
    line = one_line(lines)
    assert status == EXIT_FAILED
    assert f"127.0.0.1:{port} is already in use" in line
    assert "--port" in line  # what to do


def test_a_second_agent_on_the_same_data_dir_is_one_line_and_exit_1(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with spawned_agent(data) as (first, _):
        status, lines = agent("--data-dir", str(data), "--port", str(free_port()))
        line = one_line(lines)
        assert status == EXIT_FAILED
        assert f"in use by another yurt agent (pid {first.pid})" in line
        assert "--data-dir" in line


@pytest.fixture
def read_only_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "ro"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_read_only_data_dir_is_one_line_and_exit_1(read_only_fs: Path) -> None:
    status, lines = agent("--data-dir", str(read_only_fs), "--port", str(free_port()))
    line = one_line(lines)
    assert status == EXIT_FAILED
    assert f"the data dir {read_only_fs} is not writable (Read-only file system" in line


def test_a_data_dir_under_a_file_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    data = tmp_path / "file" / "data"
    status, lines = agent("--data-dir", str(data), "--port", str(free_port()))
    assert status == EXIT_FAILED
    assert f"the data dir {data} cannot be used (Not a directory" in one_line(lines)


def test_a_data_dir_that_cannot_be_created_is_one_line_and_exit_1() -> None:
    status, lines = agent("--data-dir", "/proc/yurt-data", "--port", str(free_port()))
    assert status == EXIT_FAILED
    assert "the data dir /proc/yurt-data cannot be created" in one_line(lines)


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_is_bad_input(tmp_path: Path, port: str) -> None:
    status, lines = agent("--data-dir", str(tmp_path / "data"), "--port", port)
    assert one_line(lines) == (f"yurt: --port {port} is not a TCP port; give one from 1 to "
                               f"65535 (0: any free port)")
    assert status == EXIT_USAGE
    assert not (tmp_path / "data").exists()  # refused before anything was touched


def test_a_port_out_of_range_in_the_config_file_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("port = 70000\n")
    status, lines = agent("--config", str(config), "--data-dir", str(tmp_path / "data"))
    assert one_line(lines).startswith(f"yurt: {config}: port 70000 is not a TCP port")
    assert status == EXIT_USAGE


def test_an_address_not_on_this_machine_is_one_line_and_exit_1(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    # 192.0.2.0/24 is TEST-NET-1: documentation only, never an address of this machine.
    status, lines = agent("--data-dir", str(tmp_path / "data"), "--bind", "192.0.2.1",
                          "--port", str(free_port()), "--token-file", str(token))
    line = one_line(lines)
    assert status == EXIT_FAILED
    assert "cannot listen on 192.0.2.1:" in line
    assert "--bind" in line


def test_a_missing_config_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    status, lines = agent("--config", str(tmp_path / "absent.toml"))
    absent = tmp_path / "absent.toml"
    assert one_line(lines) == f"yurt: {absent}: cannot read: No such file or directory"
    assert status == EXIT_USAGE


def test_an_unknown_log_level_is_bad_input(tmp_path: Path) -> None:
    status, lines = agent("--data-dir", str(tmp_path / "data"), "--log-level", "chatty")
    assert "unknown log level 'chatty'" in one_line(lines)
    assert status == EXIT_USAGE


# --------------------------------------------------------------------------- layer 0


CONFIG = AgentConfig(data_dir=Path("/var/lib/yurt"), port=4646)


def test_the_real_error_is_found_inside_nested_groups() -> None:
    bind = OSError(errno.EADDRINUSE, "Address already in use")
    nested = ExceptionGroup("outer", [ExceptionGroup("inner", [bind]),
                                      RuntimeError("a consequence")])
    assert leaves(nested) == [bind, nested.exceptions[1]]
    assert start_failure(nested, CONFIG) == (
        "cannot start the agent: 127.0.0.1:4646 is already in use (another yurt or Nomad "
        "agent?); stop it, or give this agent another --port")


def test_a_state_error_names_the_problem_before_an_os_error() -> None:
    locked = StateLockedError("state directory /d/client is in use by another yurt agent")
    group = ExceptionGroup("g", [OSError(errno.EIO, "I/O error"), locked])
    assert start_failure(group, CONFIG) == f"cannot start the agent: {locked}"


def test_a_bug_keeps_its_traceback() -> None:
    assert start_failure(ExceptionGroup("g", [KeyError("x")]), CONFIG) is None
