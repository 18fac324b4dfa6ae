"""Real etcd for the cluster tests: one single-member cluster per test session on free
loopback ports, and a fresh key prefix per test so tests never see each other's keys.

A missing etcd binary fails the test with the install hint; it never skips."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from yurt.runtime.server.cluster.etcd.process import EtcdCluster, EtcdMissing, start_etcd


@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    try:
        cluster = start_etcd(tmp_path_factory.mktemp("etcd"), name="test")
    except EtcdMissing as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def etcd_urls(etcd_cluster: EtcdCluster) -> list[str]:
    return etcd_cluster.urls


@pytest.fixture
def etcd_prefix() -> bytes:
    """A key prefix no other test uses."""
    return f"/test-{uuid.uuid4().hex[:12]}/".encode()


def data_dir_of(cluster: EtcdCluster) -> Path:
    return cluster.data_dir
