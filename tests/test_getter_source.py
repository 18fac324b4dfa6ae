"""Layer 0: go-getter's source syntax, archive detection, checksums and mode rules."""

from __future__ import annotations

import hashlib

import pytest

from yurt.runtime.client.getter.config import ArtifactSettings, parse_size
from yurt.runtime.client.getter.source import (
    Checksum,
    GetterError,
    Plan,
    parse_checksum,
    parse_checksum_line,
    parse_source,
    pick_checksum,
    plan,
)

SHA256 = hashlib.sha256(b"x").hexdigest()


@pytest.mark.parametrize(("url", "archive"), [
    ("https://h/app.tar.gz", "tar.gz"),  # the longest suffix wins over "gz"
    ("https://h/app.tgz", "tgz"),
    ("https://h/app.tar.bz2", "tar.bz2"),
    ("https://h/app.tbz2", "tbz2"),
    ("https://h/app.tar.xz", "tar.xz"),
    ("https://h/app.txz", "txz"),
    ("https://h/app.tar", "tar"),
    ("https://h/app.zip", "zip"),
    ("https://h/app.gz", "gz"),
    ("https://h/app.bz2", "bz2"),
    ("https://h/app.xz", "xz"),
    ("https://h/app.zip?x=1", "zip"),  # the path decides, not the query
    ("https://h/app.bin", None),
    ("https://h/app.tar.zst", None),
    ("https://h/app.zip?archive=false", None),
    ("https://h/app.zip?archive=0", None),
    ("https://h/app.bin?archive=tgz", "tgz"),
    ("https://h/app.bin?archive=rar", None),
])
def test_archive_detection(url: str, archive: str | None) -> None:
    assert parse_source(url).archive == archive


def test_magic_parameters_leave_the_url_and_options_join_the_query() -> None:
    src = parse_source(f"https://h/dl/app.tgz?b=2&checksum=sha256:{SHA256}&archive=tgz",
                       {"a": "1", "filename": "x"})
    assert src.url == "https://h/dl/app.tgz?a=1&b=2"
    assert src.checksum == Checksum("sha256", bytes.fromhex(SHA256), "app.tgz")
    assert src.filename == "x"
    assert (src.scheme, src.path) == ("https", "/dl/app.tgz")


def test_options_checksum_is_the_same_as_the_query() -> None:
    assert parse_source("https://h/a", {"checksum": f"sha256:{SHA256}"}).checksum == \
        parse_source(f"https://h/a?checksum=sha256:{SHA256}").checksum


def test_file_sources_and_absolute_paths() -> None:
    assert parse_source("file:///srv/a.tgz").path == "/srv/a.tgz"
    assert parse_source("/srv/a.tgz").scheme == "file"
    with pytest.raises(GetterError, match="file URLs name a local path"):
        parse_source("file://otherhost/srv/a")


@pytest.mark.parametrize(("url", "message"), [
    ("git::https://h/repo.git", "download not supported for scheme 'git'"),
    ("s3://bucket/key", "download not supported for scheme 's3'"),
    ("relative/path", "a URL with a scheme"),
    ("https://h/a?checksum=sha256:zz", "invalid checksum: "),
    ("https://h/a?checksum=crc:00", "unsupported checksum type: crc"),
    ("https://h/a?checksum=abcd", "unknown type for checksum abcd"),
    # The file name is joined to the destination: it may not climb out of it.
    ("https://h/f?filename=../../etc/cron.d/x", "filename must be a plain file name"),
    ("https://h/f?filename=..", "filename must be a plain file name"),
    ("https://h/f?filename=a%5Cb", "filename must be a plain file name"),
])
def test_refused_sources(url: str, message: str) -> None:
    with pytest.raises(GetterError, match=message):
        parse_source(url)


def test_checksum_type_is_guessed_from_its_length() -> None:
    for kind in ("md5", "sha1", "sha256", "sha512"):
        digest = hashlib.new(kind, b"x").hexdigest()
        assert parse_checksum(digest, "f") == Checksum(kind, bytes.fromhex(digest), "f")
    assert parse_checksum("file:https://h/SHA256SUMS", "f") == "https://h/SHA256SUMS"


def test_checksum_file_lines_bsd_and_gnu() -> None:
    assert parse_checksum_line(f"SHA256 (app.tgz) = {SHA256}") == \
        Checksum("sha256", bytes.fromhex(SHA256), "app.tgz")
    assert parse_checksum_line(f"{SHA256} *app.tgz") == \
        Checksum("sha256", bytes.fromhex(SHA256), "*app.tgz")
    assert parse_checksum_line("") is None
    assert parse_checksum_line("not a checksum") is None


def test_pick_checksum_finds_the_sources_line() -> None:
    other = hashlib.sha256(b"y").hexdigest()
    text = f"{other}  other.tgz\n{SHA256}  ./dl/app.tgz\n"
    found = pick_checksum(text, "/rel/dl/app.tgz", "https://h/rel/SHA256SUMS")
    assert found.digest == bytes.fromhex(SHA256)
    with pytest.raises(GetterError, match="no checksum found in: https://h/SUMS"):
        pick_checksum(f"{other}  other.tgz\n", "/app.tgz", "https://h/SUMS")


@pytest.mark.parametrize(("url", "mode", "is_dir", "expected"), [
    ("https://h/a/tool", "any", False, Plan("tool")),
    ("https://h/a/tool?filename=renamed", "any", False, Plan("renamed")),
    ("https://h/a/tool", "file", False, Plan("")),
    ("https://h/a.tgz", "any", False, Plan("", unpack="dir")),
    ("https://h/a.tgz", "dir", False, Plan("", unpack="dir")),
    ("https://h/a.gz", "file", False, Plan("", unpack="file")),
    ("file:///srv/tree", "any", True, Plan("", copy_dir=True)),
    ("file:///srv/tree", "dir", True, Plan("", copy_dir=True)),
    ("file:///srv/f", "any", False, Plan("f")),
])
def test_mode_rules(url: str, mode: str, is_dir: bool, expected: Plan) -> None:
    assert plan(parse_source(url), mode, source_is_dir=is_dir) == expected


def test_directories_over_http_and_checksummed_directories_are_refused() -> None:
    with pytest.raises(GetterError, match="cannot download a directory over https"):
        plan(parse_source("https://h/dir/"), "any")
    with pytest.raises(GetterError, match="checksum cannot be specified for directory"):
        plan(parse_source(f"file:///srv/tree?checksum=sha256:{SHA256}"), "dir",
             source_is_dir=True)


@pytest.mark.parametrize(("text", "size"), [
    ("100GB", 100 * 10**9), ("1GiB", 2**30), ("512 MiB", 512 * 2**20), ("42", 42),
    ("1.5k", 1500), ("0", 0),
])
def test_sizes_read_as_go_humanize_reads_them(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_client_artifact_settings_defaults_and_errors() -> None:
    config = ArtifactSettings().to_config()
    assert (config.http_read_timeout, config.http_max_size, config.decompression_size_limit,
            config.decompression_file_count_limit) == (1800.0, 10**11, 10**11, 4096)
    with pytest.raises(ValueError, match="http_read_timeout must be > 0"):
        ArtifactSettings(http_read_timeout="0s").to_config()
    with pytest.raises(ValueError, match="http_max_size not a valid size"):
        ArtifactSettings(http_max_size="lots").to_config()
    with pytest.raises(ValueError, match="decompression_file_count_limit must be >= 0"):
        ArtifactSettings(decompression_file_count_limit=-1).to_config()
