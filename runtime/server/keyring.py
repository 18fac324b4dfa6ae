"""The server's root key: AES-256-GCM for what must never sit in a state file in clear.

Nomad encrypts every Variable's items with a root key of its keyring before they reach its
state store; yurt does the same with one key, kept in `<data-dir>/server/keyring`, a file of
its own, 0600, next to the databases it protects but never inside them (a copy of a state file
alone, in a backup or a bug report, then discloses nothing).

The file is written once, under a temporary name opened with O_EXCL (never readable by others,
not even for a moment), synced, then linked to its final name: `link` fails when the name
exists, so two starts racing never replace each other's key, and a crash leaves either no key
or a whole one, never a torn file that would make every stored variable unreadable.

The key is never logged or shown: `Keyring`'s repr names the key ID only, and errors name the
file, not its contents. Each sealed value carries its own random 96-bit nonce; the caller's
associated data (a variable's namespace and path) binds a ciphertext to where it is stored, so
a ciphertext copied to another row does not decrypt.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import uuid
from pathlib import Path
from typing import Final, final

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEYRING_NAME: Final = "keyring"
ALGORITHM: Final = "aes256-gcm"
_NONCE_BYTES: Final = 12


class KeyringError(Exception):
    """The keyring file is unusable, or a sealed value does not open with it."""


class _KeyFile(msgspec.Struct):
    KeyID: str
    Algorithm: str
    Key: str  # base64


@final
class Keyring:
    """One root key: seal and open values with associated data."""

    def __init__(self, key_id: str, key: bytes) -> None:
        if len(key) != 32:
            raise KeyringError("the root key must be 256 bits")
        self.key_id = key_id
        self._aead = AESGCM(key)

    def __repr__(self) -> str:
        return f"Keyring(key_id={self.key_id!r})"

    def seal(self, plaintext: bytes, associated: bytes) -> bytes:
        """The nonce followed by the ciphertext and its tag."""
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext, associated)

    def open(self, sealed: bytes, associated: bytes) -> bytes:
        try:
            return self._aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], associated)
        except (InvalidTag, ValueError):
            raise KeyringError("a sealed value does not open with the root key "
                               f"{self.key_id} (wrong key, or altered)") from None


def load_or_create(directory: Path) -> Keyring:
    """The keyring in `directory` (created 0700 if missing), made on first use.

    Blocking (file I/O): call it from a worker thread.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / KEYRING_NAME
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    key_id = str(uuid.uuid4())
    content = msgspec.json.encode(_KeyFile(
        KeyID=key_id, Algorithm=ALGORITHM,
        Key=base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()))
    write_once(directory, KEYRING_NAME, content)
    return _read(path)


def _read(path: Path) -> Keyring:
    raw = read_private(path, 4096)
    try:
        stored = msgspec.json.decode(raw, type=_KeyFile)
        key = base64.b64decode(stored.Key, validate=True)
    except (msgspec.DecodeError, binascii.Error):
        raise KeyringError(f"{path} is not a yurt keyring") from None
    if stored.Algorithm != ALGORITHM:
        raise KeyringError(f"{path}: unknown algorithm {stored.Algorithm!r}")
    return Keyring(stored.KeyID, key)


def write_once(directory: Path, name: str, content: bytes) -> None:
    """Write `content` to the new file `directory/name`, 0600, unless a racing start wrote
    that name first (its file is kept). Blocking."""
    tmp = directory / f".{name}.{uuid.uuid4().hex}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            os.write(fd, content)
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another start wrote one first: keep it
            os.link(tmp, directory / name)  # link, unlike rename, never replaces an existing key
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_private(path: Path, limit: int) -> bytes:
    """Up to `limit` bytes of a key file, never through a link; a file someone made readable
    by others is closed to 0600 again first. Blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)  # made more open by hand: close it again
        return os.read(fd, limit)
    finally:
        os.close(fd)
