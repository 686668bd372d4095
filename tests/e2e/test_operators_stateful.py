"""dropDuplicatesWithinWatermark chained into a session window aggregation, and
applyInPandasWithState, followed by the real daemon and compared, operator by
operator, with Spark's own state reader at every committed epoch (HDFS provider)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from epochstate.client import EpochStateClient
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import (
    assert_described,
    assert_store_equals_oracle,
    spark_store,
    without_no_data_batches,
)
from tests.fixtures.streams import FileStream

BATCHES = 4
SCHEMA = "id string, user string, v long, ts timestamp"


def at(second: int) -> str:
    return f"2024-01-01T00:{second // 60:02d}:{second % 60:02d}Z"


def follow(
    spark: Any,
    tmp_path: Path,
    daemon_factory: Callable[..., DaemonProcess],
    job: str,
    build: Callable[[Any], Any],
    rows: Callable[[int], list[dict[str, Any]]],
    mode: str,
    *,
    no_data_batches: bool = True,
) -> tuple[DaemonProcess, list[int]]:
    """Run ``BATCHES`` input files through the query with a daemon following it;
    returns the daemon, caught up, and the committed epochs."""
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", build, SCHEMA, mode)
    with nullcontext() if no_data_batches else without_no_data_batches(spark):
        stream.start()
    daemon = daemon_factory({job: str(tmp_path / "cp")})
    try:
        for batch in range(BATCHES):
            stream.feed(rows(batch))
    finally:
        stream.stop()
    committed = stream.committed()
    # No-data batches run whenever the watermark moves: more epochs than files.
    assert len(committed) > BATCHES if no_data_batches else len(committed) == BATCHES
    daemon.wait_for_epoch(job, committed[-1])
    return daemon, committed


def late_daemon(
    daemon_factory: Callable[..., DaemonProcess], job: str, tmp_path: Path, committed: list[int]
) -> EpochStateClient:
    """A client of a daemon started after the query stopped: it loads its oldest
    retained epoch (of two) whole, from snapshot and deltas, then follows deltas."""
    late = daemon_factory({job: str(tmp_path / "cp")}, name="late", extra_args=["--retention-epochs", "2"])
    late.wait_for_epoch(job, committed[-1])
    return late.client()


# -- dropDuplicatesWithinWatermark, then session windows ------------------------------


def deduplicated_sessions(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return (
        frame.withWatermark("ts", "10 seconds")
        .dropDuplicatesWithinWatermark(["id"])
        .groupBy(F.session_window("ts", "5 seconds"), "user")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    )


def session_rows(batch: int) -> list[dict[str, Any]]:
    # 12 s of event time per batch: sessions grow and merge within a batch, the one
    # started at 11 s is extended by the next batch's event at 12 s, and closed
    # sessions fall behind the watermark and are removed. Events are redelivered
    # (same id, other time) within a batch and across batches; the dedup entries
    # (expiring at ts + 10 s) are removed as the watermark passes them.
    offsets = [("a", 0), ("b", 1), ("a", 3), ("c", 4), ("d", 6), ("b", 9), ("a", 11)]
    rows = [
        {"id": f"e{batch}-{i}", "user": u, "v": batch * 10 + i, "ts": at(batch * 12 + o)}
        for i, (u, o) in enumerate(offsets)
    ]
    rows.append({**rows[1], "v": -1, "ts": at(batch * 12 + 2)})
    if batch:
        rows.append({"id": f"e{batch - 1}-6", "user": "a", "v": -2, "ts": at(batch * 12)})
    return rows


def test_dedup_within_watermark_then_session_window_equal_spark_reader(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    daemon, committed = follow(
        spark, tmp_path, daemon_factory, "sessions", deduplicated_sessions, session_rows, "append"
    )
    # Spark numbers operators from the sink: the session window aggregation is
    # operator 0 (key: user and session start), the dedup operator 1 (key: id).
    sessions, dedup = (spark_store(spark, tmp_path / "cp", committed, operator_id=op) for op in (0, 1))
    assert sessions.key_type == "struct<user:string,sessionStartTime:timestamp>"
    assert dedup.value_type == "struct<expiresAtMicros:bigint>"
    for oracle in (sessions, dedup):
        assert oracle.removes(), f"operator {oracle.operator_id} should evict by watermark"
        partitions = {p for state in oracle.states.values() for _, _, p in state.values()}
        assert partitions == {0, 1}, f"operator {oracle.operator_id}"
    with daemon.client() as client:
        assert_described(client, "sessions", spark, tmp_path / "cp", [sessions, dedup])
        assert_store_equals_oracle(client, "sessions", sessions)
        assert_store_equals_oracle(client, "sessions", dedup)
    with late_daemon(daemon_factory, "sessions", tmp_path, committed) as client:
        assert_store_equals_oracle(client, "sessions", sessions, committed[-2:])
        assert_store_equals_oracle(client, "sessions", dedup, committed[-2:])


# -- applyInPandasWithState with an event-time timeout ---------------------------------


def count_until_quiet(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """Per user: how many events, their sum, the newest event time and the ids so far;
    forgotten 5 s (event time) after the newest event."""
    import pandas as pd  # type: ignore[import-untyped]

    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"user": [key[0]], "n": [-1]})
        return
    n, total, newest, ids = state.get if state.exists else (0, 0.0, None, [])
    for frame in frames:
        n += len(frame)
        total += float(frame["v"].sum()) / 4
        newest = pd.Timestamp(max(frame["ts"].max(), newest or frame["ts"].min()))
        ids = [*ids, *sorted(frame["id"])]
    state.update((n, total, newest.to_pydatetime(), ids))
    state.setTimeoutTimestamp(int(newest.timestamp() * 1000) + 5000)
    yield pd.DataFrame({"user": [key[0]], "n": [n]})


def with_pandas_state(frame: Any) -> Any:
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (
        frame.withWatermark("ts", "10 seconds")
        .groupBy("user")
        .applyInPandasWithState(
            count_until_quiet,
            "user string, n long",
            "n long, total double, newest timestamp, ids array<string>",
            "update",
            GroupStateTimeout.EventTimeTimeout,
        )
    )


def pandas_rows(batch: int) -> list[dict[str, Any]]:
    # Each batch touches two of five users, 20 s of event time later: a user left out
    # for a batch times out in the next one (without no-data batches, timeouts fire
    # in data batches) and its state is removed; u1 comes back after that.
    return [
        {
            "id": f"e{batch}-{i}",
            "user": f"u{(batch * 2 + i) % 5}",
            "v": batch * 10 + i,
            "ts": at(batch * 20 + i),
        }
        for i in range(2)
    ] + [{"id": f"e{batch}-2", "user": f"u{batch * 2 % 5}", "v": 7, "ts": at(batch * 20 + 1)}]


def test_apply_in_pandas_with_state_equals_spark_reader(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    daemon, committed = follow(
        spark,
        tmp_path,
        daemon_factory,
        "pandas",
        with_pandas_state,
        pandas_rows,
        "update",
        no_data_batches=False,
    )
    oracle = spark_store(spark, tmp_path / "cp", committed)
    assert oracle.removes(), "timed-out users should be removed"
    state = "struct<n:bigint,total:double,newest:timestamp,ids:array<string>>"
    assert oracle.value_type == f"struct<groupState:{state},timeoutTimestamp:bigint>"
    with daemon.client() as client:
        assert_described(client, "pandas", spark, tmp_path / "cp", [oracle])
        assert_store_equals_oracle(client, "pandas", oracle)
    with late_daemon(daemon_factory, "pandas", tmp_path, committed) as client:
        assert_store_equals_oracle(client, "pandas", oracle, committed[-2:])
