"""A query changed between runs on the same checkpoint by adding or removing a
stateful operator, followed by a daemon live across the change and by one started
afterwards: every operator's every store equals Spark's reader at every epoch.

What Spark 4.3 does (found by running it): it numbers a query's stateful operators
from the output down (``dropDuplicates`` then a count has the count as operator 0,
the deduplication as 1) and, on the first batch of a run, checks the planned
operators against the operator metadata the checkpoint holds
(``state/<op>/_metadata``). Any difference is refused before the batch runs:
adding an operator (a count after a ``dropDuplicates``), removing one (the count
again), even removing every stateful operator, fail with
``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``, also with
``spark.sql.streaming.stateStore.stateSchemaCheck`` off; a query that gains its
first stateful operator on a checkpoint of a stateless one fails with
``STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY``. The refused run commits
nothing (it may leave an offset log entry), so the daemon has nothing new to
serve; the user's way on is the original query, whose later epochs continue the
same stores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import StoreOracle, assert_described, assert_store_equals_oracle, spark_store
from tests.fixtures.streams import HDFS, PROVIDERS, FileStream, Provider

SCHEMA = "user string, v long, tag string"
REFUSED = "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"


def rows(batch: int) -> list[dict[str, Any]]:
    """Batch 1 repeats one event of batch 0 (a duplicate the deduplication drops)."""
    users = ["a", "b", "c", "a"][: 2 + batch % 3]
    events = [{"user": u, "v": batch * 10 + i, "tag": f"t{batch}"} for i, u in enumerate(users)]
    return events + ([{"user": "a", "v": 0, "tag": "t0"}] if batch == 1 else [])


def dedup(frame: Any) -> Any:
    return frame.dropDuplicates(["user", "v"])


def dedup_then_count(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return dedup(frame).groupBy("user").agg(F.count("*").alias("n"))


@dataclass(frozen=True)
class Change:
    """A query run on its checkpoint, then changed (which Spark refuses), then run again."""

    name: str
    provider: Provider
    original: Callable[[Any], Any]
    original_mode: str
    changed: Callable[[Any], Any]
    changed_mode: str
    operators: int  # the original query's stateful operators


CHANGES = (
    Change("operator-added", HDFS, dedup, "append", dedup_then_count, "update", 1),
    Change(
        "operator-removed",
        next(p for p in PROVIDERS if p.name == "rocksdb-changelog"),
        dedup_then_count,
        "update",
        dedup,
        "append",
        2,
    ),
)
BEFORE, AFTER = 2, 2  # batches before the refused change, and after it


@dataclass
class Life:
    """What happened to each checkpoint, and the daemon that followed them live."""

    checkpoints: dict[str, Path]
    refusals: dict[str, str]
    committed: dict[str, list[int]]
    live: DaemonProcess
    oracles: dict[str, list[StoreOracle]] = field(default_factory=dict)


def _live(stream: FileStream, first: int, count: int) -> None:
    stream.start(fresh=first == 0)
    try:
        for batch in range(first, first + count):
            stream.feed(rows(batch))
    finally:
        stream.stop()


@pytest.fixture(scope="module")
def life(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Life]:
    """Each change's workload, once for the module: the original query for
    :data:`BEFORE` batches, the changed one (refused), the original again for
    :data:`AFTER` batches; one daemon follows both checkpoints from before their first commit."""
    base = tmp_path_factory.mktemp("life-query")
    checkpoints = {c.name: base / c.name / "cp" for c in CHANGES}
    for checkpoint in checkpoints.values():
        checkpoint.mkdir(parents=True)
    streams = {
        c.name: FileStream(
            c.provider.session(spark, no_data_batches=False),
            base / c.name / "in",
            checkpoints[c.name],
            c.original,
            SCHEMA,
            c.original_mode,
        )
        for c in CHANGES
    }
    for stream in streams.values():
        stream.start()  # writes the checkpoint's metadata, which the daemon needs to follow it
        stream.stop()
    live = DaemonProcess(base / "live", {name: str(cp) for name, cp in checkpoints.items()}).start()
    refusals: dict[str, str] = {}
    try:
        for change in CHANGES:
            stream = streams[change.name]
            stream.start(fresh=False)
            try:
                for batch in range(BEFORE):
                    stream.feed(rows(batch))
            finally:
                stream.stop()
            stream.build, stream.output_mode = change.changed, change.changed_mode
            with pytest.raises(Exception) as refused:
                _live(stream, BEFORE, 1)
            refusals[change.name] = str(refused.value)
            stream.files -= 1  # the next run reads that batch's file
            stream.build, stream.output_mode = change.original, change.original_mode
            _live(stream, BEFORE, AFTER)
        committed = {name: stream.committed() for name, stream in streams.items()}
        for name, epochs in committed.items():
            live.wait_for_epoch(name, epochs[-1])
        result = Life(checkpoints, refusals, committed, live)
        for change in CHANGES:
            result.oracles[change.name] = [
                spark_store(spark, checkpoints[change.name], committed[change.name], operator_id=op)
                for op in range(change.operators)
            ]
        yield result
    finally:
        live.stop()


def test_spark_refuses_adding_or_removing_a_stateful_operator(life: Life, spark: Any) -> None:
    for change in CHANGES:
        assert REFUSED in life.refusals[change.name], life.refusals[change.name]
        # The refused run committed nothing: the epochs run on without a gap.
        assert life.committed[change.name] == list(range(BEFORE + AFTER))
        metadata = spark.read.format("state-metadata").load(str(life.checkpoints[change.name])).collect()
        assert sorted(r.operatorId for r in metadata) == list(range(change.operators))


def _assert_served_as_spark(client: Any, life: Life, spark: Any) -> int:
    compared = 0
    for change in CHANGES:
        oracles = life.oracles[change.name]
        assert_described(client, change.name, spark, life.checkpoints[change.name], oracles)
        assert [j.latest_epoch for j in client.jobs() if j.job == change.name] == [BEFORE + AFTER - 1]
        for oracle in oracles:
            assert_store_equals_oracle(client, change.name, oracle)
            compared += len(oracle.keys()) * len(oracle.states)
    return compared


def test_followed_live_across_the_refused_change(life: Life, spark: Any) -> None:
    with life.live.client() as client:
        assert _assert_served_as_spark(client, life, spark) > 0


def test_started_after_the_refused_change(
    life: Life, spark: Any, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    late = daemon_factory({name: str(cp) for name, cp in life.checkpoints.items()}, name="late")
    for name, epochs in life.committed.items():
        late.wait_for_epoch(name, epochs[-1])
    with late.client() as client:
        assert _assert_served_as_spark(client, life, spark) > 0
