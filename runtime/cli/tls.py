"""The CLI's TLS, as Nomad's api/api.go `ConfigureTLS` builds its `tls.Config` from the general
options (runtime/cli/general.py): `tls_context` (the CA file, else the CA directory, else the
system's trust store; the client certificate and key, both or neither; the server name, sent
as SNI and verified instead of the address's host, for http.client's sockets and trio's
streams alike; skip-verify), and the words of a failure: `tls_reason`, `tls_hint` (which
option to set), `socket_failure` (a websocket's), `tls_cause` (the TLS error behind another).

Invariants: verification is on unless skip-verify is set; a certificate, key or CA that cannot
be loaded is bad input (`GeneralOptionError`, exit 2), said with the flag or variable that
named it. A leaf: `ssl` is loaded by http.client already, so this costs no start-up.
"""

from __future__ import annotations

import socket
import ssl

from yurt.runtime.cli.general import GeneralOptionError, Settings, settings


class _NamedContext(ssl.SSLContext):
    """A client context that sends and verifies `server_name` instead of the host connected
    to (Nomad's `TLSServerName`), for http.client's sockets and trio's streams alike."""

    server_name = ""

    def wrap_socket(self, sock: socket.socket, server_side: bool = False,
                    do_handshake_on_connect: bool = True, suppress_ragged_eofs: bool = True,
                    server_hostname: str | bytes | None = None,
                    session: ssl.SSLSession | None = None) -> ssl.SSLSocket:
        return super().wrap_socket(sock, server_side, do_handshake_on_connect,
                                   suppress_ragged_eofs, self.server_name or server_hostname,
                                   session)

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO,
                 server_side: bool = False, server_hostname: str | bytes | None = None,
                 session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        return super().wrap_bio(incoming, outgoing, server_side,
                                self.server_name or server_hostname, session)


def tls_context(current: Settings | None = None) -> ssl.SSLContext:
    """The client TLS context of the settings (api/api.go `ConfigureTLS`).

    Raises:
        GeneralOptionError: a certificate, key or CA named cannot be loaded, or only one of
            the client certificate and key is given.
    """
    current = current or settings()
    ctx = _NamedContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.server_name = current.tls_server_name

    def named(name: str) -> str:
        return current.source_of(name) or name

    try:
        if current.ca_cert:  # Nomad: "If both -ca-cert and -ca-path are specified, -ca-cert"
            what = named("ca-cert")
            ctx.load_verify_locations(cafile=current.ca_cert)
        elif current.ca_path:
            what = named("ca-path")
            ctx.load_verify_locations(capath=current.ca_path)
        else:
            what = "the system's CA certificates"
            ctx.load_default_certs()
        if current.client_cert or current.client_key:
            if not (current.client_cert and current.client_key):
                raise GeneralOptionError("Both client cert and client key must be provided "
                                         "(-client-cert and -client-key, or NOMAD_CLIENT_CERT "
                                         "and NOMAD_CLIENT_KEY)")
            what = f"{named('client-cert')} and {named('client-key')}"
            ctx.load_cert_chain(current.client_cert, current.client_key)
    except (OSError, ssl.SSLError) as e:
        reason = getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e)
        raise GeneralOptionError(f"cannot load {what}: {reason}") from None
    if current.skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def tls_hint(reason: str, current: Settings | None = None) -> str:
    """What to change after a TLS failure worded `reason` (appended to it): the CA for a
    certificate the CLI could not verify, else a client certificate when none was given."""
    current = current or settings()
    if "wrong version number" in reason:  # a plain HTTP answer to our hello
        return ("; the agent does not speak TLS there: is its address http://, not "
                "https://?")
    if "mismatch" in reason and not current.skip_verify:
        name = current.source_of("tls-server-name")
        return (f"; is {name} a name the agent's certificate holds?" if name else
                "; set -tls-server-name or NOMAD_TLS_SERVER_NAME to a name the agent's "
                "certificate holds")
    if "verify failed" in reason and not current.skip_verify:
        ca = current.source_of("ca-cert") or current.source_of("ca-path")
        return (f"; is {ca} the CA that signed the agent's certificate?" if ca else
                "; set -ca-cert or NOMAD_CACERT to the CA that signed the agent's "
                "certificate")
    if not current.client_cert:
        return ("; does the agent require a client certificate? set -client-cert and "
                "-client-key (or NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY)")
    return ""


def socket_failure(addr: str, error: BaseException | None,
                   current: Settings | None = None) -> str:
    """How a websocket's connection to the agent at `addr` failed, in words: a TLS failure
    with what to set, else the operating system's reason. trio reports a TLS failure as a
    broken stream caused by the `ssl.SSLError`: the causes are followed."""
    tls = tls_cause(error)
    if tls is not None:
        reason = tls_reason(tls)
        return f"TLS with the agent at {addr} failed: {reason}{tls_hint(reason, current)}"
    return f"cannot reach the agent at {addr}" + (
        f": {error}" if isinstance(error, OSError) else "")


def tls_cause(error: BaseException | None) -> ssl.SSLError | None:
    """The TLS failure behind `error` (itself, or a cause of it), if there is one."""
    depth = 0
    while error is not None and not isinstance(error, ssl.SSLError) and depth < 10:
        error, depth = error.__cause__ or error.__context__, depth + 1
    return error if isinstance(error, ssl.SSLError) else None


def tls_reason(e: ssl.SSLError) -> str:
    """The words of a TLS failure: OpenSSL's reason and the verify message when there is."""
    verify = getattr(e, "verify_message", None)
    reason = (e.reason or str(e)).replace("_", " ").lower() if e.reason else str(e)
    return f"{reason}: {verify}" if verify else reason
