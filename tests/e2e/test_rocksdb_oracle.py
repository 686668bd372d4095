"""The oracle test through the daemon on the RocksDB state store provider, with and
without changelog checkpointing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_oracle import QUERIES, canon, plain, spark_state
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.mark.parametrize("changelog", [True, False], ids=["changelog", "snapshots-only"])
@pytest.mark.parametrize("name", ["windowed", "dedup"])
def test_rocksdb_provider_every_epoch_and_key_equals_spark_reader(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess], name: str, changelog: bool
) -> None:
    session = spark.newSession()
    session.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    session.conf.set(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", str(changelog).lower()
    )
    schema, build, rows, mode = QUERIES[name]
    stream = FileStream(session, tmp_path / "in", tmp_path / "cp", build, schema, mode).start()
    daemon = daemon_factory({name: str(tmp_path / "cp")})
    try:
        for batch in range(5):
            stream.feed(rows(batch))
    finally:
        stream.stop()
    committed = stream.committed()
    daemon.wait_for_epoch(name, committed[-1])
    expected = {e: spark_state(spark, tmp_path / "cp", e) for e in committed}
    all_keys = {k: key for state in expected.values() for k, (key, _, _) in state.items()}
    with daemon.client() as client:
        assert client.describe(name).stores
        for epoch in committed:
            lookups = client.multi_get(name, list(all_keys.values()), epoch=epoch)
            got = {
                canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition) for lk in lookups if lk.found
            }
            assert got == expected[epoch], f"epoch {epoch}"
