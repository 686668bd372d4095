"""A damaged state file: the epoch is refused with its reason, everything else serves on.

Without a later snapshot ingest waits for a repair; with one it skips ahead: the
epochs in between become unavailable for good and later epochs equal Spark's reader.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import EpochDamaged, EpochNotReady, EpochStateClient
from tests.e2e.test_oracle import windowed, windowed_rows
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_state
from tests.fixtures.over_time import served_changes, state_difference
from tests.fixtures.snapshots import feed_until_skippable, full_versions, one_partition
from tests.fixtures.streams import FileStream

CHECKSUM_OFFSET = 17  # "LZ4Block", token, two lengths: the first block's checksum
# Ingest tries a damaged epoch three times before skipping past it, and tries again
# until a repair otherwise: 2 s apart by default, which these tests would only wait out.
FAST_RETRY = {"EPOCHSTATE_INGEST_RETRY_INTERVAL": "0.1"}


def _damage(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[CHECKSUM_OFFSET] ^= 0xFF
    path.write_bytes(bytes(raw))


def _problems(client: EpochStateClient, job: str, count: int) -> dict[int, str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = {p.epoch: p.reason for p in client.describe(job, refresh=True).problems}
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} problems reported for {job}")


def _scanned(client: EpochStateClient, job: str, epoch: int) -> dict[str, Any]:
    return {
        canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition)
        for lk in client.scan(job, epoch=epoch, page_size=3)
    }


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
    for snapshot in checkpoint.glob("state/0/*/*.snapshot"):
        if int(snapshot.stem) >= 3:
            snapshot.unlink()  # no later version loads in full: ingest must wait for a repair
    damaged = checkpoint / "state" / "0" / "0" / "3.delta"  # version 3 = epoch 2
    original = tmp_path / "3.delta.orig"
    shutil.copy(damaged, original)
    _damage(damaged)

    daemon = daemon_factory({"dmg": str(checkpoint)}, env=FAST_RETRY)
    daemon.wait_for_epoch("dmg", 1)
    with daemon.client() as client:
        (problem,) = _problems(client, "dmg", 1).items()
        assert problem[0] == 2 and "3.delta" in problem[1]
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
            assert _scanned(client, "dmg", epoch) == spark_state(spark, checkpoint, epoch)


def test_damaged_epoch_is_skipped_when_a_later_snapshot_loads_in_full(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    # Windows fall behind the watermark, so epochs remove keys: the epoch after the
    # gap must remove what the skipped epochs removed.
    checkpoint = tmp_path / "cp"
    build_schema = "k long, s string, v double, ts timestamp"
    stream = FileStream(
        one_partition(spark), tmp_path / "in", checkpoint, windowed, build_schema, "update"
    ).start()
    try:
        damaged_version = feed_until_skippable(stream, windowed_rows)
    finally:
        stream.stop()
    assert damaged_version is not None, "Spark wrote no snapshots to skip ahead to"
    committed = stream.committed()
    resume = min(v for v in full_versions(checkpoint, 1) if v > damaged_version) - 1
    gap = list(range(damaged_version - 1, resume))
    _damage(checkpoint / "state" / "0" / "0" / f"{damaged_version}.delta")
    expected = {e: spark_state(spark, checkpoint, e) for e in committed if e not in gap}
    assert any(set(expected[a]) - set(expected[b]) for a in expected for b in expected if a < b)

    key = next(key for state in expected.values() for key, _, _ in state.values())
    daemon = daemon_factory({"skip": str(checkpoint)}, env=FAST_RETRY)
    daemon.wait_for_epoch("skip", committed[-1], timeout=60)
    with daemon.client() as client:
        problems = {p.epoch: p.reason for p in client.describe("skip", refresh=True).problems}
        assert sorted(problems) == gap
        assert f"{damaged_version}.delta" in problems[gap[0]]
        for epoch in gap:
            with pytest.raises(EpochDamaged):
                client.get("skip", key, epoch=epoch)
        for epoch, state in expected.items():
            assert _scanned(client, "skip", epoch) == state, f"epoch {epoch}"
        _assert_changes_across_the_gap(client, gap, resume, expected)
    daemon.stop()

    daemon.start()  # the unavailable epochs are remembered
    with daemon.client() as client:
        assert sorted(p.epoch for p in client.describe("skip", refresh=True).problems) == gap
        with pytest.raises(EpochDamaged, match=f"{damaged_version}.delta"):
            client.get("skip", key, epoch=gap[0])
        assert _scanned(client, "skip", resume) == expected[resume]


def _assert_changes_across_the_gap(
    client: EpochStateClient, gap: list[int], resume: int, expected: dict[int, Any]
) -> None:
    """A feed reaching a skipped epoch fails with its reason, never skips it silently; the
    epoch after the gap carries the gap's changes: Spark's reader before the gap against
    Spark's reader at that epoch (a key loaded in full but unchanged is an upsert of the
    value it had)."""
    with pytest.raises(EpochDamaged) as refused:
        list(client.changes("skip", from_epoch=gap[0] - 1, to_epoch=resume))
    assert refused.value.reason == "EPOCH_UNAVAILABLE"
    before = expected[gap[0] - 1]
    (feed,) = client.changes("skip", from_epoch=resume, to_epoch=resume)
    got = served_changes([feed])[resume]
    want = state_difference(before, expected[resume])
    unchanged = {k: c for k, c in got.items() if k not in want}
    assert all(kind == "upsert" and before[k][1] == value for k, (kind, value, _) in unchanged.items())
    assert {k: c for k, c in got.items() if k not in unchanged} == want
    assert want, "the gap changed nothing: the check would be empty"
