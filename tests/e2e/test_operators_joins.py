"""Stream-stream joins (inner and full outer, with watermarks and time ranges), run
on every state store provider through a restart and a re-run epoch (see
:mod:`tests.fixtures.scenario`): all four stores of each join equal Spark's state
reader at every committed epoch.

A join keeps, per side, two stores, partitioned alike by the join key, whose
fields Spark names ``field0``, ``field1``, ...:

* ``<side>-keyToNumValues``: join key -> ``{value: n}``, how many rows are buffered;
* ``<side>-keyWithIndexToValue``: (join key fields..., ``index``) -> the buffered row
  plus ``matched`` (whether it has joined yet), for ``index`` in ``0..n-1``.

epochstate serves these four stores, as Spark's reader does with ``storeName``.
Spark's ``joinSide`` view (``.option("joinSide", "left")``) is not a store but is
derived from the two of a side: one row per buffered row, key = the join key,
value = the row without ``matched``, so a join key repeats. Through epochstate a
user looks a join key up with one Scan of ``<side>-keyWithIndexToValue`` whose
prefix is the join key fields (pinned to one epoch, so count and rows agree), or
with a Get on ``<side>-keyToNumValues`` for ``n`` and a MultiGet of
``(key..., i)`` for ``i < n`` at the same epoch. :func:`daemon_join_side` builds
the view that way; at every epoch it equals the view derived from Spark's reading
of the stores, which equals Spark's ``joinSide`` view.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import EpochStateClient
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import StoreOracle, canon, spark_join_side
from tests.fixtures.scenario import Scenario, run_scenario
from tests.fixtures.streams import PROVIDERS, Provider

STORES = (
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)


def at(second: int) -> str:
    return f"2024-01-01T00:{second // 60:02d}:{second % 60:02d}Z"


def joins(frame: Any) -> Any:
    """Both sides come from one file source (column ``side``); the query runs an
    inner join (operator 0) and a full outer join with a narrower time range
    (operator 1) of them, side by side. (A left outer join keeps the same state as
    a full outer one, whose rows of both sides may stay unmatched.)"""
    from pyspark.sql import functions as F

    def side(name: str, prefix: str) -> Any:
        rows = frame.where(F.col("side") == name).select(
            *(F.col(c).alias(prefix + c) for c in ("name", "k", "v", "ts"))
        )
        return rows.withWatermark(f"{prefix}ts", "10 seconds")

    left, right = side("L", "l"), side("R", "r")
    same = "lname = rname AND lk = rk"
    wide = F.expr(f"{same} AND rts BETWEEN lts - INTERVAL 5 SECONDS AND lts + INTERVAL 5 SECONDS")
    narrow = F.expr(f"{same} AND rts BETWEEN lts - INTERVAL 1 SECONDS AND lts + INTERVAL 1 SECONDS")
    return left.join(right, wide, "inner").union(left.join(right, narrow, "full_outer"))


def join_row(side: str, k: int, v: int, second: int) -> dict[str, Any]:
    # The join key is (name, k); names are prefixes of one another ("u1", "u11", ...),
    # which a prefix Scan by join key must tell apart.
    return {"side": side, "name": "u" + "1" * (1 + k % 3), "k": k, "v": v, "ts": at(second)}


def join_rows(batch: int) -> list[dict[str, Any]]:
    # 15 s of event time per batch. Join keys move on (batch, batch + 1), so a key's
    # rows are evicted and the key disappears; two rows per key and side (index 1);
    # every other row matches only in the wide range, so the full outer join buffers
    # rows of both sides with matched = false.
    base = batch * 15
    left = [join_row("L", batch + i // 2, batch * 10 + i, base + 3 * i) for i in range(4)]
    right = [
        join_row("R", batch + i // 2, -(batch * 10 + i), base + 3 * i + 1 + 3 * (i % 2)) for i in range(4)
    ]
    return left + right


def daemon_join_side(
    client: EpochStateClient, job: str, epoch: int, operator_id: int, side: str
) -> dict[str, Any]:
    """A join side as a user reads it from epochstate: join key -> (partition, the
    buffered rows without ``matched``, sorted)."""
    counts, with_index = f"{side}-keyToNumValues", f"{side}-keyWithIndexToValue"
    view: dict[str, Any] = {}
    for count in client.scan(job, epoch=epoch, operator_id=operator_id, store=counts):
        assert count.value is not None
        n = count.value["value"]
        # One Scan: the join key fields lead the keyWithIndexToValue key.
        rows = list(
            client.scan(job, prefix=count.key, epoch=epoch, operator_id=operator_id, store=with_index)
        )
        assert [r.key["index"] for r in rows] == list(range(n)), count.key
        assert {r.partition for r in rows} == {count.partition}
        # The other way: Get the count, then MultiGet the rows by index.
        assert client.get(job, count.key, epoch=epoch, operator_id=operator_id, store=counts) == count
        keys = [{**count.key.asdict(), "index": i} for i in range(n)]
        assert client.multi_get(job, keys, epoch=epoch, operator_id=operator_id, store=with_index) == rows
        values = [{f: v for f, v in (r.value.fields if r.value else ()) if f != "matched"} for r in rows]
        view[canon(count.key)] = (count.partition, sorted(canon(v) for v in values))
    return view


def derived_join_side(with_index: StoreOracle, epoch: int) -> dict[str, Any]:
    """The same view derived from Spark's reading of ``<side>-keyWithIndexToValue``."""
    grouped: dict[str, tuple[int, list[str]]] = {}
    for key, value, partition in with_index.states[epoch].values():
        join_key = {n: v for n, v in key.items() if n != "index"}
        _, rows = grouped.setdefault(canon(join_key), (partition, []))
        rows.append(canon({n: v for n, v in value.items() if n != "matched"}))
    return {k: (p, sorted(rows)) for k, (p, rows) in grouped.items()}


SCHEMA = "side string, name string, k long, v long, ts timestamp"
JOINS = Scenario("joins", SCHEMA, joins, join_rows, "append")


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_join_stores_equal_spark_reader(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess], provider: Provider
) -> None:
    run = run_scenario(spark, tmp_path, daemon_factory, JOINS, provider)
    assert run.operators == {0: "symmetricHashJoin", 1: "symmetricHashJoin"}
    oracles = run.oracles
    assert {store for _, store in oracles} == set(STORES)
    for oracle in oracles.values():
        assert oracle.removes(), f"{oracle.operator_id}/{oracle.store}: rows should be evicted"
        assert oracle.partitions() == {0, 1}, f"{oracle.operator_id}/{oracle.store}"
    assert oracles[0, "left-keyToNumValues"].key_type == "struct<field0:string,field1:bigint>"
    assert (
        oracles[0, "left-keyWithIndexToValue"].key_type == "struct<field0:string,field1:bigint,index:bigint>"
    )
    for side in ("left", "right"):
        buffered = oracles[1, f"{side}-keyWithIndexToValue"].states.values()
        assert {v["matched"] for s in buffered for _, v, _ in s.values()} == {True, False}, side

    with run.daemon.client() as client:
        for op in (0, 1):
            for side in ("left", "right"):
                with_index = oracles[op, f"{side}-keyWithIndexToValue"]
                for epoch in run.committed:
                    got = daemon_join_side(client, "joins", epoch, op, side)
                    assert got == derived_join_side(with_index, epoch), f"operator {op} {side}, epoch {epoch}"
        # Spark's joinSide view is that derivation (read once, for the full outer
        # join's sides at the epoch buffering the most rows, to keep the test short).
        for side in ("left", "right"):
            with_index = oracles[1, f"{side}-keyWithIndexToValue"]
            fullest = max(run.committed, key=lambda e: len(with_index.states[e]))
            expected = spark_join_side(spark, run.checkpoint, fullest, 1, side)
            assert expected == derived_join_side(with_index, fullest), side
