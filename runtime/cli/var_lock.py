"""`yurt var lock` and `yurt var init`, as Nomad's (command/var_lock.go, command/var_init.go).

`var lock [-ttl D] [-delay D] [-max-retry N] [-early-return] [-backoff D] [-shell=BOOL]
[-verbose] PATH CHILD...` takes the variable's lock (`PUT /v1/var/PATH?lock-acquire`,
runtime/api/varlocks.py), runs CHILD while it holds it, renews it every half TTL
(`?lock-renew`), and releases it when CHILD exits (`?lock-release`). The lock's holder is the
only one running a child: a second `var lock` on the same path waits for it (retrying every
`-backoff`, by default 1.1 × TTL as api/locks.go `LockLeaser`), or with `-early-return` exits 0
without running anything, as Nomad's. A renewal refused (the lock was lost) stops the child
(SIGTERM) and exits 1. SIGINT and SIGTERM are passed to the child.

Differences from Nomad, on purpose: the exit status is the child's (Nomad's is 1 with "Lock
error: … exit status N"), so a script behind `var lock` keeps its meaning; a variable
specification file (`@spec.nv.hcl`) is not taken (refused, exit 2); a transport error or a 5xx
while renewing is retried up to `-max-retry` times before the lock counts as lost.

`var init [-out hcl|json] [-quiet] [FILE]` writes Nomad's example specification (spec.nv.hcl
or spec.nv.json) and never overwrites a file (exit 1 if it exists).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import click

from yurt.runtime.cli.output import echo, fail
from yurt.runtime.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

#: api/locks.go `DefaultLockTTL`, `DefaultLockDelay`, `lockRetryBackoffFactor`.
DEFAULT_TTL = "15s"
DEFAULT_DELAY = "15s"
BACKOFF_FACTOR = 1.1


def register(var: click.Group) -> None:
    var.add_command(var_lock)
    var.add_command(var_init)


def _seconds(flag: str, text: str) -> float:
    from yurt.runtime.lib.durations import parse_duration

    try:
        return parse_duration(text) / 1e9
    except ValueError as e:
        fail(f"Invalid {flag}: {e}", EXIT_USAGE)


@click.command("lock", context_settings={"allow_interspersed_args": False})
@click.option("-namespace", "--namespace", "ns", default="", help="Namespace (default: "
              "default).")
@click.option("-ttl", "--ttl", default="", help="The lock's TTL (default 15s; 10s to 24h).")
@click.option("-delay", "--delay", default="", help="How long a lock whose TTL ran out stays "
              "blocked (default 15s).")
@click.option("-max-retry", "--max-retry", "max_retry", type=int, default=5, show_default=True,
              help="Retries of a request that failed for want of an answer.")
@click.option("-early-return", "--early-return", "early_return", is_flag=True,
              help="Exit 0 at once when another holds the lock, instead of waiting.")
@click.option("-backoff", "--backoff", default="", help="How long to wait between attempts "
              "to take the lock (default 1.1 × TTL).")
@click.option("-shell", "--shell", type=click.BOOL, default=True, is_flag=False,
              flag_value="true", help="Run CHILD through $SHELL -c (default true; "
              "-shell=false runs it directly).")
@click.option("-verbose", "--verbose", is_flag=True, help="Say on stderr what happens.")
@click.argument("path")
@click.argument("child", nargs=-1, required=True)
def var_lock(ns: str, ttl: str, delay: str, max_retry: int, early_return: bool, backoff: str,
             shell: bool, verbose: bool, path: str, child: tuple[str, ...]) -> None:
    """Hold a variable's lock while a child command runs."""
    if ns == "*":
        fail("Cannot use the '*' wildcard namespace", EXIT_USAGE)
    if path.startswith("@"):
        fail("a variable specification file is not taken by `yurt var lock`: give the "
             "variable's path", EXIT_USAGE)
    path = path.strip("/")
    ttl_s = _seconds("TTL", ttl or DEFAULT_TTL)
    _seconds("Lock Delay", delay or DEFAULT_DELAY)
    wait = _seconds("backoff", backoff) if backoff else ttl_s * BACKOFF_FACTOR

    def say(message: str) -> None:
        if verbose:
            echo(message, err=True)

    holder = _Holder(ns, path, {"TTL": ttl or DEFAULT_TTL, "LockDelay": delay or DEFAULT_DELAY},
                     max_retry)
    say("Attempting to acquire lock")
    while not holder.acquire():
        if early_return:
            say("Lock held by another: returning early")
            sys.exit(EXIT_OK)
        time.sleep(wait)
    say(f"Variable locked, ready to execute: {' '.join(child)}")
    args = [os.environ.get("SHELL") or "/bin/sh", "-c", " ".join(child)] if shell else list(
        child)
    code = _run_while_held(holder, args, ttl_s / 2)
    say("Releasing the lock")
    holder.release()
    sys.exit(code)


class _Holder:
    """The lock requests of one `var lock`, each on a new connection to the agent."""

    def __init__(self, ns: str, path: str, lock: dict[str, str], max_retry: int) -> None:
        self.ns, self.path, self.lock, self.max_retry = ns, path, lock, max_retry
        self.lock_id = ""

    def _put(self, operation: str, body: dict[str, Any]) -> Any:
        """The response; a request that got no answer, or a 5xx, is tried again up to
        max-retry times, a second apart (then it ends the command, exit 1)."""
        from yurt.runtime.cli.api_client import client_token, fail_on_error
        from yurt.runtime.cli.http import AgentConnection, TransportError, agent_address

        addr = agent_address()
        token = client_token()
        headers = {"X-Nomad-Token": token} if token else {}
        params = {operation: "", **({"namespace": self.ns} if self.ns else {})}
        for attempt in range(self.max_retry + 1):
            last = attempt == self.max_retry
            try:
                with AgentConnection(addr, headers=headers, timeout=30) as client:
                    response = client.put(f"/v1/var/{self.path}", params=params, json=body)
            except TransportError as e:
                if last:
                    fail(f"Lock error: the agent at {addr} did not answer: {e}")
                time.sleep(1)
                continue
            if response.status_code >= 500 and not last:
                time.sleep(1)
                continue
            if response.status_code != 409:
                fail_on_error(response, "Lock error")
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def acquire(self) -> bool:
        body = {"Path": self.path, "Lock": self.lock,
                **({"Namespace": self.ns} if self.ns else {})}
        response = self._put("lock-acquire", body)
        if response.status_code == 409:
            return False
        self.lock_id = response.json()["Lock"]["ID"]
        return True

    def renew(self) -> bool:
        response = self._put("lock-renew", {"Path": self.path, "Lock": {"ID": self.lock_id}})
        return bool(response.status_code != 409)

    def release(self) -> None:
        response = self._put("lock-release", {"Path": self.path,
                                              "Lock": {"ID": self.lock_id}})
        if response.status_code == 409:
            echo(f"Lock error: release conflict: {response.text.strip()}", err=True)


def _run_while_held(holder: _Holder, args: list[str], renew_every: float) -> int:
    """Run the child, renewing the lock; its exit status (1 if the lock was lost)."""
    import signal
    import subprocess  # here: `yurt --help` and every other verb do without it
    try:
        proc = subprocess.Popen(args)  # stdin, stdout and stderr are ours
    except OSError as e:
        holder.release()
        fail(f"Lock error: cannot start {args[0]!r}: {e.strerror or e}", EXIT_FAILED)

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                code = proc.wait(timeout=renew_every)
            except subprocess.TimeoutExpired:
                if holder.renew():
                    continue
                echo("Lock error: the lock was lost (renewal refused): stopping the child",
                     err=True)
                proc.terminate()
                proc.wait()
                return EXIT_FAILED
            # A child killed by a signal: the shell's convention, 128 + the signal.
            return code if code >= 0 else 128 - code
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


_HCL_SPEC = """\
# A variable path can be specified in the specification file
# and will be used when writing the variable without specifying a
# path in the command or when writing JSON directly to the `/var/`
# HTTP API endpoint
# path = "path/to/variable"

# The Namespace to write the variable can be included in the specification. This
# value can be overridden by specifying the "-namespace" flag on the "put"
# command.
# namespace = "default"

# The items map is the only strictly required part of a variable
# specification, since path and namespace can be set via other means.
# It contains the sensitive material to encrypt and store as a Nomad
# variable. The entire items map is encrypted and decrypted as a
# single unit.

# REMINDER: While keys in the items map can contain dots, using them
# in templates is easier when they do not. As a best practice, avoid
# dotted keys when possible.
items {
  key1 = "value 1"
  key2 = "value 2"
}
"""
_JSON_SPEC = """\
{
  "Namespace": "default",
  "Path": "path/to/variable",
  "Items": {
    "key1": "value 1",
    "key2": "value 2"
  }
}
"""


@click.command("init")
@click.option("-out", "--out", "out", type=click.Choice(["hcl", "json"]), default="hcl",
              help="The specification's format.")
@click.option("-quiet", "--quiet", is_flag=True, help="Print nothing on success.")
@click.argument("file", required=False)
def var_init(out: str, quiet: bool, file: str | None) -> None:
    """Create an example variable specification file."""
    name = file or ("spec.nv.json" if out == "json" else "spec.nv.hcl")
    try:
        # O_EXCL: never overwrite, not even a file created between a check and the write.
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o660)
    except FileExistsError:
        fail(f'File "{name}" already exists')
    except OSError as e:
        fail(f'Failed to write "{name}": {e.strerror or e}')
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_JSON_SPEC if out == "json" else _HCL_SPEC)
    if not quiet:
        echo(f"Example variable specification written to {name}")
