"""Nomad's general options on every verb that talks to an agent, and the one `Settings`
object the connection is built from (runtime/cli/http.py, api_client.py `api`, the websockets).

Nomad's CLI gives every command that speaks to a server the same flags and environment
(command/meta.go `FlagSet`, `clientConfig`; api/api.go `DefaultConfig`, `ConfigureTLS`):
`-address` `NOMAD_ADDR`, `-region` `NOMAD_REGION`, `-namespace` `NOMAD_NAMESPACE`, the TLS
ones (`-ca-cert` `NOMAD_CACERT`, `-ca-path` `NOMAD_CAPATH`, `-client-cert` `NOMAD_CLIENT_CERT`,
`-client-key` `NOMAD_CLIENT_KEY`, `-tls-server-name` `NOMAD_TLS_SERVER_NAME`,
`-tls-skip-verify` (or `-insecure`) `NOMAD_SKIP_VERIFY`), `-no-color` `NOMAD_CLI_NO_COLOR` and
`-force-color`. yurt's own `YURT_*` names are kept as aliases (`YURT_ADDR`, `YURT_NAMESPACE`,
...: `OPTIONS`). `-token` is refused (runtime/cli/secret_options.py: every local user reads a
command line in /proc); the token comes from `NOMAD_TOKEN`, `YURT_TOKEN` or `YURT_TOKEN_FILE`
(api_client.py `client_token`).

One precedence, for every setting: **the flag, then `YURT_*`, then `NOMAD_*`, then the
default.** A flag is what the user typed for this one command. `YURT_*` beats `NOMAD_*`
because it can only have been set for yurt, while a shell's `NOMAD_*` may point at a real Nomad
cluster the user also works with; it is also the order `client_token` has always read
`YURT_TOKEN` and `NOMAD_TOKEN` in, so nobody's setup changes meaning. An empty variable is not
set (Nomad: `os.Getenv(...) != ""`).

How the options reach every remote verb: `attach_general_options(root)` walks the command
tree once, when the root is built (runtime/cli/__init__.py, next to `refuse_secret_options`),
and appends the same few `click.Option` objects to every leaf command but the local ones
(`LOCAL`: they start an agent, read a file, or print what needs no agent). A verb added later
gets them without doing anything; a root that loads its command modules lazily calls
`general_options(command, path)` on each command it resolves. Sharing the option objects
keeps the walk in the microseconds (click options hold no reference to their command). A
command that declares one of the spellings itself (`var`'s `-namespace`, `acl policy
apply -namespace`) keeps its own; `NOMAD_NAMESPACE` still applies to its requests when its own
flag is not given. `alloc exec` and `action` parse Go-style flags themselves and call
`take_go_flag`. The values land in `_FLAGS`, reset by every parse (click calls an option's
callback when it is not given too), and `settings()` reads them with the environment at the
time of the call, so in-process invocations (click's CliRunner) never see another's values.

`-namespace` becomes the `namespace` query parameter of every request that does not set one
itself, as Nomad's api/api.go `newRequest` sets it; `-region` the `region` parameter. yurt
serves one region, `global` (runtime/api/status.py `REGION`): a request for another is refused
by the CLI with Nomad's "No path to region" (the agent ignores `?region=`), exit 1.

A leaf of the CLI: imports click and the output helpers only (start-up, scripts/bench_cli).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import click

if TYPE_CHECKING:
    from yurt.runtime.structs import Job

#: The one region a yurt agent or cluster serves (runtime/api/status.py `REGION`).
REGION: Final = "global"
#: The agent's address when nothing sets it, as Nomad's.
DEFAULT_ADDR: Final = "http://127.0.0.1:4646"


class _Spec:
    """One general option: its flag (without dashes; the key of `_FLAGS`), Nomad's and
    yurt's variables, its metavar ("" for a boolean flag), help and other spellings. A plain
    class: a dataclass costs milliseconds of start-up to create."""

    __slots__ = ("aliases", "help", "metavar", "name", "nomad_env", "yurt_env")

    def __init__(self, name: str, nomad_env: str, yurt_env: str, metavar: str, help: str,
                 aliases: tuple[str, ...] = ()) -> None:
        self.name, self.nomad_env, self.yurt_env = name, nomad_env, yurt_env
        self.metavar, self.help, self.aliases = metavar, help, aliases


#: The general options, in Nomad's help order (command/meta.go `generalOptionsUsage`).
OPTIONS: Final = (
    _Spec("address", "NOMAD_ADDR", "YURT_ADDR", "<addr>",
          f"The address of the agent (default {DEFAULT_ADDR})."),
    _Spec("region", "NOMAD_REGION", "YURT_REGION", "<region>",
          f'The region to send requests to; yurt serves one, "{REGION}".'),
    _Spec("namespace", "NOMAD_NAMESPACE", "YURT_NAMESPACE", "<namespace>",
          'The namespace of queries and actions ("*": all the token may read; default '
          '"default").'),
    _Spec("no-color", "NOMAD_CLI_NO_COLOR", "YURT_CLI_NO_COLOR", "",
          "Disables colored output."),
    _Spec("force-color", "NOMAD_CLI_FORCE_COLOR", "YURT_CLI_FORCE_COLOR", "",
          "Accepted for Nomad's sake: off a terminal yurt prints plain text only."),
    _Spec("ca-cert", "NOMAD_CACERT", "YURT_CACERT", "<path>",
          "PEM CA certificate file to verify the agent's TLS certificate."),
    _Spec("ca-path", "NOMAD_CAPATH", "YURT_CAPATH", "<path>",
          "Directory of PEM CA certificates (-ca-cert wins if both are given)."),
    _Spec("client-cert", "NOMAD_CLIENT_CERT", "YURT_CLIENT_CERT", "<path>",
          "PEM client certificate for TLS authentication (needs -client-key)."),
    _Spec("client-key", "NOMAD_CLIENT_KEY", "YURT_CLIENT_KEY", "<path>",
          "Unencrypted PEM private key of -client-cert."),
    _Spec("tls-server-name", "NOMAD_TLS_SERVER_NAME", "YURT_TLS_SERVER_NAME", "<value>",
          "The server name to send (SNI) and verify the certificate against."),
    _Spec("tls-skip-verify", "NOMAD_SKIP_VERIFY", "YURT_SKIP_VERIFY", "",
          "Do not verify the agent's TLS certificate (not recommended).", ("insecure",)),
)
_BY_NAME: Final = {spec.name: spec for spec in OPTIONS}
for _spec in OPTIONS:
    for _alias in _spec.aliases:
        _BY_NAME[_alias] = _spec

#: Command paths that never talk to an agent: no general options.
LOCAL: Final = frozenset({
    ("agent",), ("run",), ("server",), ("sim",), ("nodesim",), ("job", "validate"),
    ("job", "parse"), ("fmt",), ("job", "init"), ("var", "init"), ("version",),
    ("operator", "snapshot", "inspect"), ("operator", "snapshot", "restore"),
})

#: What the flags of the running command said (None: not given).
_FLAGS: dict[str, Any] = {}
#: The unusable variables already said to be ignored (name, value).
_WARNED: set[tuple[str, str]] = set()


class GeneralOptionError(click.ClickException):
    """A general option or its variable is unusable: exit 2, `yurt: ...` on stderr."""

    exit_code = 2  # EXIT_USAGE

    def show(self, file: Any = None) -> None:
        from yurt.runtime.cli.output import echo

        echo(f"yurt: {self.message}", err=True)


class Settings:
    """Where and how to reach the agent; `source` says which flag or variable set each
    setting (absent: the default), for messages that name what the user must change.
    Built by `settings()` and not changed after (a plain class, as `_Spec`)."""

    __slots__ = ("address", "ca_cert", "ca_path", "client_cert", "client_key", "namespace",
                 "no_color", "region", "skip_verify", "source", "tls_server_name")

    def __init__(self, *, address: str = DEFAULT_ADDR, region: str = "", namespace: str = "",
                 ca_cert: str = "", ca_path: str = "", client_cert: str = "",
                 client_key: str = "", tls_server_name: str = "", skip_verify: bool = False,
                 no_color: bool = False, source: tuple[tuple[str, str], ...] = ()) -> None:
        self.address, self.region, self.namespace = address, region, namespace
        self.ca_cert, self.ca_path = ca_cert, ca_path
        self.client_cert, self.client_key = client_cert, client_key
        self.tls_server_name, self.skip_verify = tls_server_name, skip_verify
        self.no_color, self.source = no_color, source

    def source_of(self, name: str) -> str:
        return dict(self.source).get(name, "")

    def query(self) -> list[tuple[str, str]]:
        """The query parameters every request carries unless it sets them itself."""
        return [(k, v) for k, v in (("namespace", self.namespace), ("region", self.region))
                if v]


def _truthy(spec: _Spec, raw: str) -> bool:
    """A boolean variable as Nomad reads it: `NOMAD_SKIP_VERIFY` with Go's `ParseBool`
    (anything else ignored, as api/api.go `DefaultConfig`, with a word on stderr);
    `NOMAD_CLI_NO_COLOR` and the like by being set at all (command/meta.go `SetupUi`)."""
    if spec.name != "tls-skip-verify":
        return True
    from yurt.runtime.lib.goparse import parse_go_bool

    try:
        return parse_go_bool(raw)
    except ValueError:
        from yurt.runtime.cli.output import echo

        name = spec.yurt_env if os.environ.get(spec.yurt_env) else spec.nomad_env
        if (name, raw) not in _WARNED:  # once, however often the settings are read
            _WARNED.add((name, raw))
            echo(f"yurt: ignoring {name}={raw!r}: not a boolean (true, false, 1, 0)",
                 err=True)
        return False


def settings() -> Settings:
    """The settings of this command: each from its flag, else `YURT_*`, else `NOMAD_*`, else
    the default (see the module). Read at each call: nothing is cached."""
    values: dict[str, Any] = {}
    source: list[tuple[str, str]] = []
    for spec in OPTIONS:
        flag = _FLAGS.get(spec.name)
        if flag not in (None, "", False):
            values[spec.name] = flag
            source.append((spec.name, f"-{spec.name}"))
            continue
        for env in (spec.yurt_env, spec.nomad_env):
            raw = os.environ.get(env, "")
            if raw:
                values[spec.name] = _truthy(spec, raw) if not spec.metavar else raw
                source.append((spec.name, env))
                break
    return Settings(
        address=values.get("address", DEFAULT_ADDR), region=values.get("region", ""),
        namespace=values.get("namespace", ""), ca_cert=values.get("ca-cert", ""),
        ca_path=values.get("ca-path", ""), client_cert=values.get("client-cert", ""),
        client_key=values.get("client-key", ""),
        tls_server_name=values.get("tls-server-name", ""),
        skip_verify=bool(values.get("tls-skip-verify", False)),
        no_color=bool(values.get("no-color", False)), source=tuple(source))


def check_region(current: Settings) -> None:
    """Refuse a region yurt does not serve, with Nomad's words (nomad/structs/errors.go
    `errNoRegionPath`); exit 1, as Nomad's CLI exits on the agent's answer."""
    if current.region and current.region != REGION:
        from yurt.runtime.cli.output import fail

        fail(f'No path to region "{current.region}" ({current.source_of("region")}): '
             f'a yurt agent serves the one region "{REGION}"')


def into_namespace(job: Job) -> Job:
    """`job` in the namespace the general options name, unless its file names one.

    Nomad's `job run`/`plan` send the job's namespace when its file sets one, else the
    client's (`-namespace`, `NOMAD_NAMESPACE`), which the agent fills in (command/job_run.go
    `Run`, "Force the namespace to be that of the job"; command/agent/job_endpoint.go). yurt's
    jobspec fills in "default" when the file names none, so a job in "default" takes the
    general namespace: a file that spells out `namespace = "default"` does too (the one
    difference from Nomad).
    """
    wanted = settings().namespace
    if not wanted or wanted == "*" or job.namespace != "default":
        return job
    import msgspec

    return msgspec.structs.replace(job, namespace=wanted)


# --------------------------------------------------------------------------- click


class GeneralOption(click.Option):
    """One of Nomad's general options; shown under "General Options" in a command's help."""


def _record(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if ctx.resilient_parsing or param.name is None:
        return
    name = param.name.removeprefix("general_").replace("_", "-")
    _FLAGS[name] = value
    if name == "no-color" and (value or os.environ.get("NOMAD_CLI_NO_COLOR")
                               or os.environ.get("YURT_CLI_NO_COLOR")):
        os.environ["NO_COLOR"] = "1"  # rich's switch (output.py draws a terminal's tables)


def _make_option(spec: _Spec) -> GeneralOption:
    names = [f"--{spec.name}", *(f"--{a}" for a in spec.aliases),
             "general_" + spec.name.replace("-", "_")]
    env = f"{spec.nomad_env}, {spec.yurt_env}"
    if spec.metavar:
        return GeneralOption(names, metavar=spec.metavar, default=None, expose_value=False,
                             callback=_record, help=f"{spec.help} [env: {env}]")
    return GeneralOption(names, is_flag=True, default=False, expose_value=False,
                         callback=_record, help=f"{spec.help} [env: {env}]")


_OPTION_OBJECTS: list[GeneralOption] = []


def _option_objects() -> list[GeneralOption]:
    if not _OPTION_OBJECTS:
        _OPTION_OBJECTS.extend(_make_option(spec) for spec in OPTIONS)
    return _OPTION_OBJECTS


def _format_options(command: click.Command, ctx: click.Context,
                    formatter: click.HelpFormatter) -> None:
    """A command's options, then Nomad's general ones under their own heading."""
    own: list[tuple[str, str]] = []
    general: list[tuple[str, str]] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None:
            (general if isinstance(param, GeneralOption) else own).append(record)
    if own:
        with formatter.section("Options"):
            formatter.write_dl(own)
    if general:
        with formatter.section("General Options"):
            formatter.write_dl(general)


def general_options(command: click.Command, path: Sequence[str]) -> None:
    """Give `command` (at `path` from the root) and every command under it the general
    options, unless local (`LOCAL`) or parsing its own flags (`take_go_flag`); idempotent."""
    if isinstance(command, click.Group):  # a local group's own run (`server --etcd`) takes
        # none, but its remote subcommands (`server members`) do
        for name, sub in command.commands.items():
            general_options(sub, (*path, name))
        return
    if tuple(path) in LOCAL:
        return
    if command.context_settings.get("ignore_unknown_options"):
        return  # alloc exec, action: their Go-style parser calls take_go_flag
    if any(isinstance(p, GeneralOption) for p in command.params):
        return
    declared = {n for p in command.params for n in (*p.opts, *p.secondary_opts)}
    for option in _option_objects():
        if not declared.intersection(option.opts):
            command.params.append(option)
    # The help's own section; an instance attribute, so only these commands are touched.
    command.format_options = partial(_format_options, command)  # type: ignore[method-assign]


def attach_general_options(root: click.Group) -> None:
    """`general_options` on every command of the tree (runtime/cli/__init__.py, once)."""
    general_options(root, ())


def take_go_flag(args: Sequence[str], i: int) -> int | None:
    """For a command that parses Go-style flags itself (runtime/cli/exec.py `parse_flags`):
    if `args[i]` is a general option (`-address=X`, `-address X`, `-tls-skip-verify`),
    record it and return the index after it; None when it is not one.

    Raises:
        GeneralOptionError: a general option that takes a value has none.
    """
    name, has_value, value = args[i].lstrip("-").partition("=")
    spec = _BY_NAME.get(name)
    if spec is None:
        return None
    if not spec.metavar:
        from yurt.runtime.lib.goparse import parse_go_bool

        try:
            _FLAGS[spec.name] = parse_go_bool(value) if has_value else True
        except ValueError:
            raise GeneralOptionError(f'invalid boolean value "{value}" for -{name}') from None
        return i + 1
    if not has_value:
        if i + 1 >= len(args):
            raise GeneralOptionError(f"flag needs an argument: -{name}")
        value = args[i + 1]
        i += 1
    _FLAGS[spec.name] = value
    return i + 1
