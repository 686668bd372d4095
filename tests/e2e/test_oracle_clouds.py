"""The read contract with the checkpoint on GCS, Azure Blob and HDFS.

One Spark job per state store provider writes locally (the pyspark wheel has no
connector for any of them); mirrors copy each file, in Spark's order, to a real
GCS-protocol server, Azurite and an HDFS cluster at once. One daemon follows the
same job through ``gs://``, ``abfs://``, ``abfss://`` and ``hdfs://`` (four jobs
to it), only ever through those URIs. For every committed epoch and every key ever
seen, each answer equals Spark's own state reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from epochstate.devtools.stores import AzuriteServer, CheckpointMirror, GCSServer, HDFSCluster
from tests.e2e.test_oracle import QUERIES
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import State, canon, plain, spark_state
from tests.fixtures.streams import PROVIDERS, FileStream, Provider

CLOUDS = ("gs", "abfs", "abfss", "hdfs")
PREFIX = "checkpoints/windowed"


@dataclass
class Followed:
    daemon: DaemonProcess
    committed: list[int]
    expected: dict[int, State]


@pytest.fixture(scope="module", params=PROVIDERS, ids=str)
def followed(
    request: pytest.FixtureRequest,
    spark: Any,
    gcs_server: GCSServer,
    azure_server: AzuriteServer,
    hdfs_cluster: HDFSCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Followed]:
    provider: Provider = request.param
    schema, build, rows, mode = QUERIES["windowed"]
    session = provider.session(spark)
    base = tmp_path_factory.mktemp(f"clouds-{provider}")
    local = base / "cp"
    local.mkdir()
    container = azure_server.new_bucket()
    mirrors = [
        CheckpointMirror(gcs_server, local, gcs_server.new_bucket(), PREFIX, interval=0.1),
        CheckpointMirror(azure_server, local, container, PREFIX, interval=0.1),
        CheckpointMirror(hdfs_cluster, local, hdfs_cluster.new_bucket(), PREFIX, interval=0.1),
    ]
    uris = {
        "gs": mirrors[0].uri,
        "abfs": azure_server.uri(container, PREFIX, scheme="abfs"),
        "abfss": mirrors[1].uri,
        "hdfs": mirrors[2].uri,
    }
    env = {**gcs_server.env, **azure_server.env, **hdfs_cluster.env}
    daemon = DaemonProcess(base / "daemon", {f"windowed-{c}": uris[c] for c in CLOUDS}, env=env)
    for mirror in mirrors:
        mirror.start()
    stream = FileStream(session, base / "in", local, build, schema, mode).start()
    daemon.start(timeout=60)
    try:
        try:
            for batch in range(4):
                stream.feed(rows(batch))
        finally:
            stream.stop()
            for mirror in mirrors:
                mirror.stop()
        committed = stream.committed()
        assert len(committed) >= 4 and all(m.uploads > 0 for m in mirrors)
        yield Followed(daemon, committed, {e: spark_state(session, local, e) for e in committed})
    finally:
        daemon.stop()


@pytest.mark.parametrize("cloud", CLOUDS)
def test_every_epoch_and_key_equals_spark_reader(followed: Followed, cloud: str) -> None:
    job = f"windowed-{cloud}"
    followed.daemon.wait_for_epoch(job, followed.committed[-1], timeout=90)
    expected = followed.expected
    all_keys = {k: key for state in expected.values() for k, (key, _, _) in state.items()}
    compared = 0
    with followed.daemon.client() as client:
        assert next(j for j in client.jobs() if j.job == job).checkpoint.startswith(f"{cloud}://")
        for epoch in followed.committed:
            lookups = client.multi_get(job, list(all_keys.values()), epoch=epoch)
            got = {
                canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition) for lk in lookups if lk.found
            }
            assert got == expected[epoch], f"{cloud}: epoch {epoch}"
            scanned = {canon(lk.key) for lk in client.scan(job, epoch=epoch, page_size=3)}
            assert scanned == set(expected[epoch]), f"{cloud}: scan at epoch {epoch}"
            compared += len(all_keys)
    epochs = len(followed.committed)
    print(f"\n{cloud}: {len(all_keys)} keys x {epochs} epochs = {compared} lookups, 0 mismatches")
