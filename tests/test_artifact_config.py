"""The agent config file's `[artifact]` table (Nomad's client `artifact` block), layer 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from yurt.runtime.agent.config import ConfigError, load_config
from yurt.runtime.client.getter.config import ArtifactConfig


def test_artifact_limits_are_read_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[artifact]\nhttp_read_timeout = "5m"\nhttp_max_size = "1GiB"\n'
                    'decompression_size_limit = "2GB"\ndecompression_file_count_limit = 10\n')
    assert load_config(path).artifact.to_config() == ArtifactConfig(
        http_read_timeout=300.0, http_max_size=2**30, decompression_size_limit=2 * 10**9,
        decompression_file_count_limit=10)


def test_without_the_table_nomads_defaults_apply(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("")
    assert load_config(path).artifact.to_config() == ArtifactConfig()


@pytest.mark.parametrize(("text", "message"), [
    ('http_read_timeout = "-1s"', "artifact: http_read_timeout must be > 0"),
    ('http_max_size = "big"', "artifact: http_max_size not a valid size"),
    ('decompression_size_limit = "1XB"', "artifact: decompression_size_limit is not a valid"),
    ("decompression_file_count_limit = -2", "must be >= 0 but found -2"),
    ("gcs_timeout = \"1m\"", 'artifact: unknown key "gcs_timeout"'),
])
def test_bad_artifact_settings_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f"[artifact]\n{text}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)
