"""The read contract with the checkpoint on S3: the daemon follows ``s3://`` only.

Spark writes locally (no S3A jars in the pyspark wheel); a mirror uploads each file
to a real S3-protocol server in Spark's order. For every committed epoch and every
key ever seen, the daemon's answer equals Spark's own state reader, for each state
store provider.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_oracle import QUERIES
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_state
from tests.fixtures.s3 import CheckpointMirror, S3Server
from tests.fixtures.streams import PROVIDERS, FileStream, Provider


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_every_epoch_and_key_equals_spark_reader_from_s3(
    spark: Any,
    s3_server: S3Server,
    tmp_path: Path,
    daemon_factory: Callable[..., DaemonProcess],
    provider: Provider,
) -> None:
    schema, build, rows, mode = QUERIES["windowed"]
    session = provider.session(spark)
    local = tmp_path / "cp"
    local.mkdir()
    mirror = CheckpointMirror(s3_server, local, s3_server.new_bucket(), "checkpoints/windowed").start()
    stream = FileStream(session, tmp_path / "in", local, build, schema, mode).start()
    daemon = daemon_factory({"windowed": mirror.uri}, env=s3_server.env)
    try:
        for batch in range(6):
            stream.feed(rows(batch))
    finally:
        stream.stop()
        mirror.stop()
    committed = stream.committed()
    assert len(committed) >= 6
    daemon.wait_for_epoch("windowed", committed[-1])
    assert mirror.uploads > 0

    expected = {e: spark_state(session, local, e) for e in committed}
    all_keys = {k: key for state in expected.values() for k, (key, _, _) in state.items()}
    with daemon.client() as client:
        for epoch in committed:
            lookups = client.multi_get("windowed", list(all_keys.values()), epoch=epoch)
            got = {
                canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition) for lk in lookups if lk.found
            }
            assert got == expected[epoch], f"epoch {epoch}"
            scanned = {canon(lk.key) for lk in client.scan("windowed", epoch=epoch, page_size=3)}
            assert scanned == set(expected[epoch]), f"scan at epoch {epoch}"
