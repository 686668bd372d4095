"""A damaged state file: the epoch is refused with its reason, everything else serves on."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import EpochDamaged, EpochNotReady
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_state
from tests.fixtures.streams import FileStream

CHECKSUM_OFFSET = 17  # "LZ4Block", token, two lengths: the first block's checksum


def test_damaged_delta_is_reported_refused_and_recovered(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    checkpoint = tmp_path / "cp"
    stream = FileStream(spark, tmp_path / "in", checkpoint, counts, SCHEMA, name="dmg").start()
    try:
        for batch in range(4):
            stream.feed(orders(batch))
    finally:
        stream.stop()
    assert stream.committed() == [0, 1, 2, 3]
    damaged = checkpoint / "state" / "0" / "0" / "3.delta"  # version 3 = epoch 2
    original = tmp_path / "3.delta.orig"
    shutil.copy(damaged, original)
    raw = bytearray(damaged.read_bytes())
    raw[CHECKSUM_OFFSET] ^= 0xFF
    damaged.write_bytes(bytes(raw))

    daemon = daemon_factory({"dmg": str(checkpoint)})
    daemon.wait_for_epoch("dmg", 1)
    with daemon.client() as client:
        deadline = time.monotonic() + 30
        while not client.describe("dmg", refresh=True).problems and time.monotonic() < deadline:
            time.sleep(0.1)
        (problem,) = client.describe("dmg", refresh=True).problems
        assert problem.epoch == 2 and "3.delta" in problem.reason
        assert client.get("dmg", ["u1"], epoch=1).epoch == 1  # earlier epochs serve on
        with pytest.raises(EpochDamaged, match=r"3\.delta"):
            client.get("dmg", ["u1"], epoch=2)
        with pytest.raises(EpochNotReady, match="committed but not ingested"):
            client.get("dmg", ["u1"], epoch=3)
        assert client.get("dmg", ["u1"]).epoch == 1  # latest never skips past the damage

        shutil.copy(original, damaged)  # repaired: ingest retries and catches up
        daemon.wait_for_epoch("dmg", 3, timeout=30)
        assert not client.describe("dmg", refresh=True).problems
        for epoch in range(4):
            expected = spark_state(spark, checkpoint, epoch)
            got = {
                canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition)
                for lk in client.scan("dmg", epoch=epoch)
            }
            assert got == expected
