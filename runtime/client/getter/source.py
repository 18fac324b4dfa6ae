"""What an artifact `source` asks for, in go-getter's URL syntax: pure parsing, no I/O.

go-getter reads a handful of "magic" query parameters out of the source URL before it fetches:
`archive=<type>|false` (unpack as that type, or not at all), `checksum=[type:]<hex>` or
`checksum=file:<url>` (verify the download), and `filename=` (the file's name in `any` mode).
Nomad first merges the artifact's `options` into that query (`getter/util.go getURL`), so
`options { checksum = "…" }` and `?checksum=…` are the same thing. Without `archive`, the
longest matching suffix of the URL's path picks the unpacker (`.tar.gz` over `.gz`).

What lives here: `parse_source` (→ `Source`), `plan` (→ `Plan`: where the bytes go and how they
are unpacked, go-getter's `Client.Get` mode rules), the checksum parsers (`parse_checksum`,
`parse_checksum_line`, `pick_checksum` for BSD- and GNU-style checksum files) and
`GetterError`. Everything is a function of its arguments, so layer-0 tests cover it all.

Deliberate differences from Nomad: `file://` sources (and absolute paths) are fetched, by
copying, where Nomad's client registers no file getter; git, hg, s3 and gcs are refused with
go-getter's "download not supported" message; `.zst`/`.tar.zst` are not unpacked (Python 3.11
has no zstd), so they download as they are.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from yurt.runtime.structs.artifact import CHECKSUM_SIZES, GETTER_MODE_DIR, GETTER_MODE_FILE


class GetterError(Exception):
    """A download that failed, with go-getter's message. Nomad's artifact hook marks every
    download failure recoverable (a URL fixed on the server side works on the next try), so
    the error carries no recoverability of its own."""


#: go-getter's decompressor keys that yurt unpacks (its `LimitedDecompressors`, minus zstd).
ARCHIVES: Final = ("bz2", "gz", "xz", "tar", "tar.bz2", "tar.gz", "tar.xz", "tbz2", "tgz",
                   "txz", "zip")
SCHEMES: Final = ("http", "https", "file")

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True)
class Checksum:
    """An expected digest. `filename` is what a checksum file said it belongs to."""

    kind: str
    digest: bytes
    filename: str = ""

    def hasher(self) -> hashlib._Hash:
        return hashlib.new(self.kind)


@dataclass(frozen=True)
class Source:
    """A parsed source. `url` is what is fetched (magic parameters removed); for `file`
    sources `path` is the local path, otherwise the URL's path."""

    scheme: str
    url: str
    path: str
    archive: str | None = None
    checksum: Checksum | None = None
    checksum_url: str | None = None  # `checksum=file:<url>`: fetched first, then searched
    filename: str | None = None


def _parse_bool(value: str) -> bool | None:
    """Go's `strconv.ParseBool`; None when it is not a boolean."""
    return True if value in _TRUE else False if value in _FALSE else None


def _checksum(kind: str, value: str, filename: str) -> Checksum:
    try:
        digest = bytes.fromhex(value)
    except ValueError as e:
        raise GetterError(f"invalid checksum: {e}") from None
    kind = kind.lower()
    if kind not in CHECKSUM_SIZES:
        raise GetterError(f"unsupported checksum type: {kind}")
    return Checksum(kind, digest, filename)


def _checksum_by_size(value: str, filename: str) -> Checksum:
    try:
        digest = bytes.fromhex(value)
    except ValueError as e:
        raise GetterError(f"invalid checksum: {e}") from None
    for kind, size in CHECKSUM_SIZES.items():
        if len(digest) == size:
            return Checksum(kind, digest, filename)
    raise GetterError(f"unknown type for checksum {value}")


def parse_checksum(value: str, filename: str) -> Checksum | str:
    """go-getter's `extractChecksum`: a `Checksum`, or the URL of a checksum file."""
    kind, sep, rest = value.partition(":")
    if not sep:
        return _checksum_by_size(value, filename)  # the type guessed from the length
    if kind == "file":
        return rest
    return _checksum(kind, rest, filename)


def parse_checksum_line(line: str) -> Checksum | None:
    """One line of a checksum file: BSD style `SHA256 (file) = <hex>` or GNU style
    `<hex>  file` / `<hex> *file`; None for a blank or unreadable line."""
    parts = line.split()
    try:
        if len(parts) == 4:
            name = parts[1]
            if len(name) <= 2 or name[0] != "(" or name[-1] != ")":
                return None
            return _checksum(parts[0], parts[3], name[1:-1])
        if len(parts) == 2:
            return _checksum_by_size(parts[0], parts[1])
        if parts:
            return _checksum_by_size(parts[0], "")
    except GetterError:
        return None
    return None


def pick_checksum(text: str, source_path: str, checksum_url: str) -> Checksum:
    """go-getter's `ChecksumFromFile`: the first line for the source's file (by its base
    name, `*name`, `?name`, or its path relative to the checksum file's directory), or the
    first line naming no file."""
    name = posixpath.basename(source_path)
    checksum_dir = posixpath.dirname(urlsplit(checksum_url).path)
    rel = posixpath.relpath(source_path, checksum_dir) if source_path.startswith("/") \
        and checksum_dir.startswith("/") else name
    options = {name, "*" + name, "?" + name, rel, "./" + rel, source_path}
    for line in text.splitlines():
        found = parse_checksum_line(line)
        if found is None:
            continue
        if not found.filename or found.filename in options:
            return found
    raise GetterError(f"no checksum found in: {checksum_url}")


def parse_source(source: str, options: dict[str, str] | None = None) -> Source:
    """The source URL with the artifact's `options` merged into its query, read as
    go-getter reads it. Raises `GetterError`."""
    forced, sep, _ = source.partition("::")
    if sep and "://" not in forced and forced:
        raise GetterError(f"download not supported for scheme '{forced}'")
    if source.startswith("/"):
        source = "file://" + source
    parts = urlsplit(source)
    scheme = parts.scheme.lower()
    if not scheme:
        raise GetterError(f"failed to parse source URL {source!r}: a URL with a scheme "
                          "(https://, http:// or file://) or an absolute path is needed")
    if scheme not in SCHEMES:
        raise GetterError(f"download not supported for scheme '{scheme}'")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(options or {})

    archive: str | None = None
    archive_v = query.pop("archive", "")
    if archive_v:
        archive = None if _parse_bool(archive_v) is False else (
            archive_v if archive_v in ARCHIVES else None)
    else:
        matches = [k for k in ARCHIVES if parts.path.endswith("." + k)]
        archive = max(matches, key=len) if matches else None

    checksum: Checksum | None = None
    checksum_url: str | None = None
    checksum_v = query.pop("checksum", "")
    if checksum_v:
        found = parse_checksum(checksum_v, posixpath.basename(parts.path))
        if isinstance(found, str):
            checksum_url = found
        else:
            checksum = found
    filename = query.pop("filename", None) or None
    if filename is not None and ("/" in filename or "\\" in filename
                                 or filename in (".", "..")):
        # The name is joined to the destination: it may not lead anywhere else.
        raise GetterError(f"filename must be a plain file name, got {filename!r}")

    url = urlunsplit((scheme, parts.netloc, parts.path, urlencode(sorted(query.items())),
                      parts.fragment))
    path = parts.path
    if scheme == "file" and parts.netloc not in ("", "localhost"):
        raise GetterError(f"file URLs name a local path, got host {parts.netloc!r}")
    return Source(scheme, url, path, archive, checksum, checksum_url, filename)


Unpack = Literal["dir", "file"]


@dataclass(frozen=True)
class Plan:
    """How one source lands at its destination (go-getter `Client.Get`).

    `target` is the path, relative to the destination directory the caller resolved, that
    receives the fetched file (`""`: the destination itself); with `unpack` set, the
    download goes to a temporary file and is unpacked into `target` as a directory or a
    single file. `copy_dir` is a `file://` directory copied as a tree."""

    target: str
    unpack: Unpack | None = None
    copy_dir: bool = False


def plan(source: Source, mode: str, *, source_is_dir: bool = False) -> Plan:
    """The getter's mode rules. `source_is_dir` is what a `file://` source is on disk."""
    if source.archive is not None:
        # The archive is fetched as a file and unpacked: into the destination directory,
        # or (file mode) as the destination file itself.
        if mode == GETTER_MODE_FILE:
            return Plan("", unpack="file")
        return Plan("", unpack="dir")
    if mode == GETTER_MODE_FILE:
        return Plan("")
    is_dir = source_is_dir if source.scheme == "file" else source.path.endswith("/")
    if mode == GETTER_MODE_DIR or is_dir:
        if source.scheme != "file":
            # go-getter's http getter only fetches directories through X-Terraform-Get,
            # which Nomad turns off.
            raise GetterError(f"cannot download a directory over {source.scheme}: "
                              f"{source.url}")
        if source.checksum is not None or source.checksum_url is not None:
            raise GetterError("checksum cannot be specified for directory download")
        return Plan("", copy_dir=True)
    name = source.filename or posixpath.basename(source.path.rstrip("/")) or "."
    return Plan(name)
