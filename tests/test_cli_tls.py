"""The CLI over TLS (runtime/cli/tls.py `tls_context`, Nomad's api/api.go `ConfigureTLS`):
`yurt` as a real process against a real https server on loopback (tests/http_support.py)
with certificates made here: a CA file or directory, a wrong CA, a server that requires a client
certificate, a certificate for a name other than the address's, and the event websocket over
the same settings (layer 2; the agent itself serves no TLS yet).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.cli_proc_support import YURT
from tests.http_support import Route, open_file_server
from tests.test_cli_nomad_env import nomad_shell

ROUTES = {"/v1/jobs": Route(b"[]"), "/v1/event/ws": Route(b"no", status=403)}


def _name(common: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(path: Path, cert: Any, key: Any = None) -> Path:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.with_suffix(".key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
    return path


class Pki:
    """A CA and the certificates it signs, as PEM files under `root`."""

    def __init__(self, root: Path, name: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        self.root = root
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(hours=1))
                     .not_valid_after(now + datetime.timedelta(hours=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                    critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.ca_file = _write(root / f"{name}.pem", self.cert)

    def issue(self, name: str, sans: list[Any]) -> Path:
        """A leaf certificate (and `<name>.key`) for `sans`; its path."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(_name(name))
                .issuer_name(self.cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(hours=1))
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .sign(self.key, hashes.SHA256()))
        return _write(self.root / f"{name}.pem", cert, key)


def server_context(cert: Path, *, client_ca: Path | None = None,
                   names: list[str] | None = None) -> ssl.SSLContext:
    """A server's context; with `client_ca`, one that requires a client certificate it
    signed; `names` collects the server names clients send (SNI)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, cert.with_suffix(".key"))
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    if names is not None:
        def record(_obj: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
            names.append(name or "")

        context.sni_callback = record  # type: ignore[assignment]
    return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path, "ca")


def loopback() -> list[Any]:
    from cryptography import x509

    return [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]


async def yurt(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = await trio.run_process([YURT, *args], capture_stdout=True, capture_stderr=True,
                                  check=False, env=env)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


async def test_the_ca_file_verifies_the_agent_and_a_wrong_or_missing_one_is_said(
        tmp_path: Path, pki: Pki) -> None:
    server = pki.issue("server", loopback())
    other = Pki(tmp_path, "other-ca")
    with trio.fail_after(60):
        async with open_file_server(ROUTES, tls=server_context(server)) as agent:
            env = nomad_shell(tmp_path, NOMAD_ADDR=agent.base_url, NOMAD_TOKEN="s3cret",
                              NOMAD_NAMESPACE="team")
            ok = await yurt({**env, "NOMAD_CACERT": str(pki.ca_file)}, "job", "status")
            assert (ok.returncode, ok.stdout) == (0, "No running jobs\n"), ok
            target, headers = agent.requests[-1]
            assert target == "/v1/jobs?namespace=team"
            assert headers["x-nomad-token"] == "s3cret"

            flag = await yurt(env, "job", "status", f"-ca-cert={pki.ca_file}")
            assert flag.returncode == 0, flag
            # A directory of CA certificates, named by their hashes (`openssl rehash`).
            ca_dir = tmp_path / "cas"
            ca_dir.mkdir()
            (ca_dir / "ca.pem").write_bytes(pki.ca_file.read_bytes())
            await trio.run_process(["openssl", "rehash", str(ca_dir)])
            by_dir = await yurt({**env, "NOMAD_CAPATH": str(ca_dir)}, "job", "status")
            assert by_dir.returncode == 0, by_dir
            wrong_dir = await yurt({**env, "NOMAD_CAPATH": str(ca_dir)}, "job", "status",
                                   f"-ca-cert={other.ca_file}")  # -ca-cert wins, as Nomad's
            assert wrong_dir.returncode == 1
            assert "is -ca-cert the CA that signed" in wrong_dir.stderr, wrong_dir.stderr

            wrong = await yurt({**env, "NOMAD_CACERT": str(other.ca_file)}, "job", "status")
            assert wrong.returncode == 1
            assert wrong.stderr.startswith(f"yurt: TLS with the agent at {agent.base_url} "
                                           "failed: certificate verify failed"), wrong.stderr
            assert "is NOMAD_CACERT the CA that signed the agent's certificate?" in wrong.stderr

            none = await yurt(env, "job", "status")
            assert none.returncode == 1
            assert "certificate verify failed" in none.stderr
            assert "set -ca-cert or NOMAD_CACERT" in none.stderr, none.stderr

            skipped = await yurt(env, "job", "status", "-tls-skip-verify")
            assert skipped.returncode == 0, skipped
            assert (await yurt({**env, "NOMAD_SKIP_VERIFY": "true"}, "job", "status")
                    ).returncode == 0

            missing = await yurt(env, "job", "status", f"-ca-cert={tmp_path / 'nope.pem'}")
            assert missing.returncode == 2
            assert "cannot load -ca-cert: No such file or directory" in missing.stderr


async def test_a_server_that_requires_a_client_certificate(tmp_path: Path, pki: Pki) -> None:
    from cryptography import x509

    server = pki.issue("server", loopback())
    client = pki.issue("client", [x509.DNSName("cli.test")])
    context = server_context(server, client_ca=pki.ca_file)
    with trio.fail_after(60):
        async with open_file_server(ROUTES, tls=context) as agent:
            env = nomad_shell(tmp_path, NOMAD_ADDR=agent.base_url, NOMAD_TOKEN="s3cret",
                              NOMAD_CACERT=str(pki.ca_file))
            without = await yurt(env, "job", "status")
            assert without.returncode == 1
            assert f"yurt: TLS with the agent at {agent.base_url} failed" in without.stderr
            assert "does the agent require a client certificate? set -client-cert" in \
                without.stderr, without.stderr
            assert not agent.requests  # nothing was served without the certificate

            key = client.with_suffix(".key")
            flags = await yurt(env, "job", "status", f"-client-cert={client}",
                               f"-client-key={key}")
            assert (flags.returncode, flags.stdout) == (0, "No running jobs\n"), flags
            by_env = await yurt({**env, "NOMAD_CLIENT_CERT": str(client),
                                 "NOMAD_CLIENT_KEY": str(key)}, "job", "status")
            assert by_env.returncode == 0, by_env

            half = await yurt(env, "job", "status", f"-client-cert={client}")
            assert half.returncode == 2
            assert "Both client cert and client key must be provided" in half.stderr

            # The event websocket: the same TLS, token and namespace (the server refuses the
            # upgrade after reading it, so the command fails; what it sent is what counts).
            ws = await yurt({**env, "NOMAD_CLIENT_CERT": str(client),
                             "NOMAD_CLIENT_KEY": str(key)}, "events", "-namespace", "team")
            assert ws.returncode == 1, ws
            target, headers = agent.requests[-1]
            assert target == "/v1/event/ws?namespace=team"
            assert headers["x-nomad-token"] == "s3cret"
            assert headers["upgrade"].lower() == "websocket"


async def test_the_tls_server_name_is_sent_and_verified(tmp_path: Path, pki: Pki) -> None:
    from cryptography import x509

    server = pki.issue("server", [x509.DNSName("agent.test")])  # not the address's 127.0.0.1
    names: list[str] = []
    with trio.fail_after(60):
        async with open_file_server(ROUTES, tls=server_context(server, names=names)) as agent:
            env = nomad_shell(tmp_path, NOMAD_ADDR=agent.base_url, NOMAD_TOKEN="s3cret",
                              NOMAD_CACERT=str(pki.ca_file))
            mismatch = await yurt(env, "job", "status")
            assert mismatch.returncode == 1
            assert "certificate verify failed" in mismatch.stderr
            assert "mismatch" in mismatch.stderr, mismatch.stderr

            named = await yurt(env, "job", "status", "-tls-server-name=agent.test")
            assert (named.returncode, named.stdout) == (0, "No running jobs\n"), named
            assert names[-1] == "agent.test"
            by_env = await yurt({**env, "NOMAD_TLS_SERVER_NAME": "agent.test"}, "job",
                                "status")
            assert by_env.returncode == 0, by_env
            wrong = await yurt(env, "job", "status", "-tls-server-name=other.test")
            assert wrong.returncode == 1
            assert "is -tls-server-name a name the agent's certificate holds?" in wrong.stderr

            # The event websocket: a failed handshake said at once, the name sent when given.
            ws_mismatch = await yurt(env, "events")
            assert ws_mismatch.returncode == 1
            assert "set -tls-server-name or NOMAD_TLS_SERVER_NAME" in ws_mismatch.stderr
            ws = await yurt(env, "events", "-tls-server-name", "agent.test")
            assert ws.returncode == 1  # the server refuses the upgrade, after reading it
            assert agent.requests[-1][0] == "/v1/event/ws"
            assert names[-1] == "agent.test"
