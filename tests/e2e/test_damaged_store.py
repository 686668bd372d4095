"""The daemon's own store damaged: reads fail with DATA_LOSS (STORE_DAMAGED), never
"absent"; a store it cannot read at start-up stops it with one error line.

The daemon ingests a real Spark checkpoint and stops (its store lands in an SST
file). Started again, it serves; then a byte of a data block of that file is
flipped under it. Every key at every epoch either reads as Spark's reader says or
fails with DATA_LOSS and the reason STORE_DAMAGED, and a scan is refused rather
than cut short. Then the block holding the job's descriptor is damaged: the
daemon refuses to start.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import DataLoss
from epochstate.core import reasons
from epochstate.daemon.store import layout
from tests.e2e.test_crash import rows, totals
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_store
from tests.fixtures.streams import FileStream

JOB = "dmg"

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def _flip(table: Path, offset: int) -> None:
    # In place (same inode): the running daemon's open file sees it.
    with table.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_damaged_store_is_refused_while_serving_and_at_start_up(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    stream = FileStream(
        spark, tmp_path / "in", tmp_path / "cp", totals, "user long, region string, amount long", name=JOB
    ).start()
    try:
        for batch in range(3):
            stream.feed(rows(batch))
    finally:
        stream.stop()
    committed = stream.committed()
    oracle = spark_store(spark, tmp_path / "cp", committed)

    daemon = daemon_factory({JOB: str(tmp_path / "cp")})
    daemon.wait_for_epoch(JOB, committed[-1])
    daemon.stop()  # the store is flushed into one table file
    (table,) = (daemon.data_dir / "store").glob("*.sst")
    daemon.start()
    _flip(table, table.stat().st_size * 3 // 10)  # a block of versions, not yet read

    refused = same = 0
    with daemon.client(timeout=30) as client:
        for epoch in committed:
            expected = oracle.states[epoch]
            for key, value, partition in expected.values():
                try:
                    (lk,) = client.multi_get(JOB, [key], epoch=epoch)
                except DataLoss as error:
                    assert error.reason == reasons.STORE_DAMAGED, error
                    refused += 1
                    continue
                assert (lk.found, plain(lk.value), lk.partition) == (True, value, partition), (epoch, key)
                same += 1
            with pytest.raises(DataLoss) as caught:
                {canon(lk.key) for lk in client.scan(JOB, epoch=epoch, page_size=10_000)}
            assert caught.value.reason == reasons.STORE_DAMAGED and "Corruption" in str(caught.value)
    print(f"damaged while serving: {same} keys read as Spark's reader, {refused} refused with STORE_DAMAGED")
    assert refused > 0 and same > 0
    daemon.kill()  # no clean shutdown: nothing rewrites the damaged file

    raw = table.read_bytes()
    marker = layout.job_key(JOB)  # the block of the job's descriptor, read at start-up
    assert raw.count(marker) == 1
    _flip(table, raw.index(marker) + len(marker) - 1)
    with pytest.raises(RuntimeError, match="daemon exited") as failed:
        daemon.start()
    assert "cannot be read" in str(failed.value) and "Corruption" in str(failed.value)
