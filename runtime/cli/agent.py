"""`yurt agent`: from command-line options to a running `Agent`, and every way it can fail.

The daemon's command is where an operator meets failures that are not theirs to debug: a port
another process holds, a data directory another agent has locked or a read-only file system,
a config file with a typo. Each must end in ONE line on stderr — what failed, where, what to do
— never a traceback: the agent runs its parts in Trio nurseries, so an `OSError` from the API's
`bind` arrives wrapped in one or more `ExceptionGroup`s, and the message a user needs is a leaf
of that tree (`start_failure` walks it). Anything that is not an `OSError` or a `StateError`
is a bug in yurt and keeps its traceback.

Exit statuses (runtime/errors.py), as `run_agent` returns them:

- 0: stopped by SIGINT or SIGTERM (tasks keep running for the next start; with `--dev`,
  every task is killed first).
- 1 (`EXIT_FAILED`): the agent could not start, or stopped on an error, in this environment:
  port in use, address not available or not allowed, data directory locked by another agent,
  not writable, or with state this yurt cannot read. The same command can work once the
  operator has acted on the machine.
- 2 (`EXIT_USAGE`): the command line or the config file is wrong (unreadable or invalid config
  file, a port outside 0-65535, a non-loopback bind without a token, an unknown log level;
  `--token` is refused before this module is reached, runtime/cli/secret_options.py). The same
  command can never work.

The agent's own log (runtime/agent/log.py) goes to stdout, as Nomad's does; the start and stop
lines and the errors above go to stderr, so `yurt agent > agent.log` keeps the log and still
shows why it did not start.
"""

from __future__ import annotations

import errno
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from yurt.runtime.cli.agent_options import (
    MAX_PORT,
    AgentOptions,
    UsageError,
    build_config,
    remove_dev_data_dir,
)
from yurt.runtime.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, StateError
from yurt.runtime.lib.datadir import default_data_dir

log = logging.getLogger("yurt.agent")

if TYPE_CHECKING:
    from yurt.runtime.agent.agent import Agent, AgentConfig

def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions at the leaves of `error`'s group tree, depth first (`error` itself if
    it is no group)."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in leaves(sub)]
    return [error]


def start_failure(error: BaseException, config: AgentConfig) -> str | None:
    """The one line that explains why the agent stopped, or None if `error` is a bug.

    A group may hold several leaves (the API's bind failed and a sibling was cancelled): a
    `StateError` names the data directory's problem best, then an `OSError`; other leaves
    are Trio's cancellations or consequences of the first failure.
    """
    found = leaves(error)
    for leaf in found:
        if isinstance(leaf, StateError):
            return f"cannot start the agent: {leaf}"
    for leaf in found:
        if isinstance(leaf, OSError | OverflowError):
            return f"cannot start the agent: {_os_error(leaf, config)}"
    return None


def _os_error(error: OSError | OverflowError, config: AgentConfig) -> str:
    address = f"{config.bind}:{config.port}"
    if isinstance(error, OverflowError):  # `bind()`'s own port check, should ours be skipped
        return f"cannot listen on {address}: {error}; give --port from 1 to {MAX_PORT}"
    code, reason = error.errno, error.strerror or str(error)
    path = error.filename
    if path is None:  # a socket error
        if code == errno.EADDRINUSE:
            return (f"{address} is already in use (another yurt or Nomad agent?); stop it, "
                    f"or give this agent another --port")
        if code == errno.EADDRNOTAVAIL:
            return (f"cannot listen on {address}: no such address on this machine; "
                    f"give --bind an address of one of its interfaces")
        if code == errno.EACCES:
            return (f"cannot listen on {address}: permission denied (ports below 1024 need "
                    f"privileges); give --port 1024 or above")
        return f"cannot listen on {address}: {reason}"
    data = config.data_dir
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (f"the data dir {data} is not writable ({reason}: {path}); make it writable "
                f"for this user, or give another --data-dir")
    if code == errno.ENOSPC:
        return (f"no space left for the data dir {data} ({path}); free some, or give "
                f"another --data-dir")
    if code == errno.ENOENT:  # a parent that cannot hold directories (/proc, a gone mount)
        return (f"the data dir {data} cannot be created ({reason}: {path}); give --data-dir "
                f"a directory this user can create")
    if code in (errno.ENOTDIR, errno.EEXIST):
        return (f"the data dir {data} cannot be used ({reason}: {path}); give --data-dir a "
                f"directory")
    return f"{reason}: {path}"


# --------------------------------------------------------------------------- the command


def _announce_acl(agent: Agent, config: AgentConfig, address: str, *, pointed: bool) -> None:
    """What the operator must hear of the ACLs at start, once (runtime/agent/aclsetup.py);
    `pointed`: this user's CLI finds the token through the runtime dir's pointer."""
    from yurt.runtime.agent.aclsetup import login_url
    from yurt.runtime.cli.output import echo

    start = agent.acl_start
    if start.bootstrap_file is not None:
        found = ("the yurt CLI of this user finds it" if pointed or config.data_dir ==
                 default_data_dir().absolute() else
                 f"for the CLI: export YURT_TOKEN_FILE={start.bootstrap_file}")
        echo(f"ACLs are on: the management token is in {start.bootstrap_file} (readable by "
             f"this user only; {found})", err=True)
    if start.session_secret:
        echo(f"dev session token (management; it ends with this agent): "
             f"{start.session_secret}", err=True)
        echo(f"UI: {login_url(address, start.login_secret)} (a one-time sign-in link)",
             err=True)
    elif agent.effective_acl().enabled:
        echo(f"UI: {address}/ui/ (to sign in: yurt ui -authenticate)", err=True)
    elif config.acl.enabled and config.servers:
        echo("ACLs: a client of servers keeps no ACL state (its servers have none yet): it "
             + ("admits its configured token alone" if config.token else
                "admits every request; give it a token (--token-file)"), err=True)
    warning = agent.open_to_local_users(address)
    if warning:
        echo(f"yurt: warning: {warning}", err=True)
        log.warning(warning)


def run_agent(options: AgentOptions) -> int:
    """Run the agent until SIGINT or SIGTERM; the exit status (see the module header).
    `--dev`'s temporary data dir is removed once it has stopped."""
    from yurt.runtime.cli.output import echo

    try:
        config, level, log_json = build_config(options)
    except UsageError as e:
        for line in str(e).splitlines():  # a config file's problems, one line each
            echo(f"yurt: {line}", err=True)
        return EXIT_USAGE
    except OSError as e:  # `--dev`'s temporary data dir
        echo(f"yurt: cannot create a temporary data dir for --dev ({e.strerror or e}: "
             f"{e.filename}); give --data-dir", err=True)
        return EXIT_FAILED
    try:
        return _run(config, level, log_json)
    finally:
        if config.temporary_data_dir:
            problem = remove_dev_data_dir(config.data_dir)
            if problem:
                echo(f"yurt: warning: {problem}", err=True)


def _name_data_dir(agent: Agent, config: AgentConfig, address: str) -> Path | None:
    """Name the data dir in this user's runtime dir, so this user's CLI finds the bootstrap
    token of an agent whose data dir is not the default (runtime/lib/datadir.py); the
    pointer's path, or None when there is nothing to find (ACLs off, a client of servers) or
    the runtime dir is unusable (said once: the CLI then needs YURT_TOKEN_FILE)."""
    from urllib.parse import urlsplit

    from yurt.runtime.cli.output import echo
    from yurt.runtime.lib.datadir import UnsafeRuntimeDir, write_agent_pointer

    if not agent.effective_acl().enabled or config.servers:
        return None
    port = urlsplit(address).port
    if port is None:
        return None
    try:
        return write_agent_pointer(port, config.data_dir)
    except (OSError, UnsafeRuntimeDir) as e:
        echo(f"yurt: warning: the CLI will not find this agent's token by itself ({e}); "
             f"export YURT_TOKEN_FILE={config.data_dir / 'server' / 'bootstrap.token'}",
             err=True)
        return None


async def _serve_until_signal(agent: Agent, config: AgentConfig, address: str, *,
                              pointed: bool) -> None:
    """Announce the ACLs, then wait for SIGINT or SIGTERM and stop the agent."""
    import trio

    from yurt.runtime.cli.output import echo
    from yurt.runtime.lib.logfields import fields

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        # Once a stop is heard: whoever read these lines may stop the agent at once.
        _announce_acl(agent, config, address, pointed=pointed)
        async for signum in signals:
            echo("yurt agent stopping; " + (
                "stopping every task (--dev)" if config.dev_mode else
                "tasks keep running"), err=True)
            log.info("agent stopping", extra=fields(signal=signal.Signals(signum).name))
            agent.stop()
            break


def _run(config: AgentConfig, level: str, log_json: bool) -> int:
    import trio

    from yurt.runtime import __version__
    from yurt.runtime.agent.agent import Agent
    from yurt.runtime.agent.log import configure
    from yurt.runtime.cli.output import echo
    from yurt.runtime.lib.datadir import make_private_parents, remove_agent_pointer
    from yurt.runtime.lib.logfields import fields

    if config.data_dir == default_data_dir().absolute():
        try:  # a fresh machine has no ~/.local/share: made 0700, not as the umask says
            make_private_parents(config.data_dir)
        except OSError as e:
            echo(f"yurt: cannot start the agent: {_os_error(e, config)}", err=True)
            return EXIT_FAILED
    configure(level, log_json, sys.stdout, include_location=config.log_include_location)

    listening = False

    async def main() -> None:
        nonlocal listening
        instance = Agent(config)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(instance.run)
            listening = True
            mode = f", client of {','.join(config.servers)}" if config.servers else ""
            kept = (", temporary: removed when the agent stops" if config.temporary_data_dir
                    else "")
            echo(f"yurt agent {__version__} listening on {address} "
                 f"(data dir {config.data_dir}{kept}{mode})", err=True)
            log.info("agent started", extra=fields(version=__version__, address=address,
                                                   data_dir=str(config.data_dir)))
            pointer = _name_data_dir(instance, config, address)
            try:
                await _serve_until_signal(instance, config, address,
                                          pointed=pointer is not None)
            finally:
                if pointer is not None:
                    remove_agent_pointer(pointer, config.data_dir)

    try:
        trio.run(main)
    except Exception as e:
        message = start_failure(e, config)
        if message is None:  # a bug: its traceback is what a report needs
            raise
        if listening:  # it had started: a failure later on (the data dir deleted, say)
            message = message.replace("cannot start the agent", "the agent stopped", 1)
        echo(f"yurt: {message}", err=True)
        return EXIT_FAILED
    return EXIT_OK
