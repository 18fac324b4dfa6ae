"""The server's workload-identity signing key: RS256 JWTs for tasks, and the JWKS to verify them.

Nomad signs workload identities with its keyring's RSA key (RS256; EdDSA for older keys) and
publishes the public half at `/.well-known/jwks.json`, so anything a task shows its token to
can check it without asking Nomad. yurt keeps one RSA-2048 key in `<data-dir>/server/
workload-key`, beside the variables keyring, and written and read by keyring.py's
`write_once` and `read_private` (0600, never replacing a key a racing start wrote).

Invariants: the private key never leaves this module (repr names the key ID only); a token is
`base64url(header).base64url(claims).base64url(signature)` with the header `{"alg": "RS256",
"kid": <key ID>, "typ": "JWT"}` as go-jose writes it. Signing is pure CPU (about a millisecond);
callers run it where a millisecond is fine or in a worker thread.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any, Final, final

import msgspec
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from yurt.runtime.server.keyring import read_private, write_once

KEY_FILE_NAME: Final = "workload-key"
ALGORITHM: Final = "RS256"
_MAX_FILE: Final = 16 << 10


class WorkloadKeyError(Exception):
    """The key file is unusable."""


class _KeyFile(msgspec.Struct):
    KeyID: str
    Algorithm: str
    Key: str  # PKCS#8 PEM


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


@final
class WorkloadSigner:
    """One RSA key: sign claims as a JWT, describe the public key as a JWK."""

    def __init__(self, key_id: str, key: rsa.RSAPrivateKey) -> None:
        self.key_id = key_id
        self._key = key

    def __repr__(self) -> str:
        return f"WorkloadSigner(key_id={self.key_id!r})"

    def sign(self, claims: dict[str, Any]) -> str:
        header = {"alg": ALGORITHM, "kid": self.key_id, "typ": "JWT"}
        signing_input = (f"{b64url(msgspec.json.encode(header))}."
                         f"{b64url(msgspec.json.encode(claims))}")
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64url(signature)}"

    def jwks(self) -> dict[str, Any]:
        """The JSON Web Key Set of `/.well-known/jwks.json` (go-jose's field order)."""
        public = self._key.public_key().public_numbers()
        return {"keys": [{"use": "sig", "kty": "RSA", "kid": self.key_id, "alg": ALGORITHM,
                          "n": b64url(_int_bytes(public.n)), "e": b64url(_int_bytes(public.e))}]}


def load_or_create(directory: Path) -> WorkloadSigner:
    """The signing key in `directory` (created 0700 if missing), made on first use.

    Blocking (file I/O, key generation): call it from a worker thread.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / KEY_FILE_NAME
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    content = msgspec.json.encode(_KeyFile(KeyID=str(uuid.uuid4()), Algorithm=ALGORITHM,
                                           Key=pem))
    write_once(directory, KEY_FILE_NAME, content)
    return _read(path)


def _read(path: Path) -> WorkloadSigner:
    raw = read_private(path, _MAX_FILE)
    try:
        stored = msgspec.json.decode(raw, type=_KeyFile)
        key = serialization.load_pem_private_key(stored.Key.encode(), password=None)
    except (msgspec.DecodeError, ValueError, TypeError):
        raise WorkloadKeyError(f"{path} is not a yurt workload key") from None
    if stored.Algorithm != ALGORITHM or not isinstance(key, rsa.RSAPrivateKey):
        raise WorkloadKeyError(f"{path}: unknown algorithm {stored.Algorithm!r}")
    return WorkloadSigner(stored.KeyID, key)
