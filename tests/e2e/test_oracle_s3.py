"""The read contract with the checkpoint on S3: the daemon follows ``s3://`` only.

Spark writes locally (no S3A jars in the pyspark wheel); a mirror uploads each file
to a real S3-protocol server in Spark's order. For every committed epoch and every
key ever seen, the daemon's answer equals Spark's own state reader, for each state
store provider.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_oracle import QUERIES
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.metrics import free_port, sample_values
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
    daemon = daemon_factory({"windowed": mirror.uri}, env=s3_server.env, wait=False)
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


def _lists(metrics_port: int) -> float:
    return sample_values(metrics_port, "epochstate_storage_requests_total", "op").get("list", 0.0)


def backed_off(metrics_port: int, timeout: float = 60.0) -> float:
    """Wait until two idle looks (a LIST each) are 1.5 s apart or more: the poll interval,
    doubling from 0.1 s, is at its 2 s ceiling from the next look on. Returns when the
    second of them was seen."""
    seen: tuple[float, float] | None = None  # the LIST count and when it was first seen
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lists = _lists(metrics_port)
        now = time.monotonic()
        if seen is None or lists != seen[0]:
            if seen is not None and now - seen[1] >= 1.5:
                return now
            seen = (lists, now)
        time.sleep(0.05)
    raise AssertionError(f"the daemon's idle looks did not back off to 2 s within {timeout:.0f} s")


def test_an_idle_job_on_s3_costs_one_list_per_max_interval(
    spark: Any, s3_server: S3Server, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    schema, build, rows, mode = QUERIES["dedup"]
    local = tmp_path / "cp"
    local.mkdir()
    mirror = CheckpointMirror(s3_server, local, s3_server.new_bucket(), "cp").start()
    stream = FileStream(spark, tmp_path / "in", local, build, schema, mode).start()
    metrics_port = free_port()
    env = {**s3_server.env, "EPOCHSTATE_METRICS_PORT": str(metrics_port), "EPOCHSTATE_POLL_MAX_INTERVAL": "2"}
    daemon = daemon_factory({"dedup": mirror.uri}, env=env, wait=False)
    try:
        for batch in range(2):
            stream.feed(rows(batch))
    finally:
        stream.stop()
        mirror.stop()
    daemon.wait_for_epoch("dedup", stream.committed()[-1])
    started = backed_off(metrics_port)
    before = sample_values(metrics_port, "epochstate_storage_requests_total", "op")
    # The next three looks, timed from the look just seen rather than over a fixed
    # window: at least 2 s apart each (1.5 s here, for the scrapes' own delay), and
    # not 3 s (nor poll_max_interval's default 5 s) apart.
    looks = 3
    deadline = started + 3.0 * looks
    while _lists(metrics_port) < before["list"] + looks and time.monotonic() < deadline:
        time.sleep(0.05)
    after = sample_values(metrics_port, "epochstate_storage_requests_total", "op")
    elapsed = time.monotonic() - started
    spent = {op: after.get(op, 0) - before.get(op, 0) for op in after}
    # One LIST of commits/ per 2 s while idle, nothing else.
    assert spent["list"] >= looks and elapsed >= 1.5 * spent["list"], (spent, elapsed)
    assert spent["head"] == spent["get"] == spent["get_range"] == 0, spent
