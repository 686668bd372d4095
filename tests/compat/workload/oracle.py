"""Spark's own state reader, run in a release's driver, dumped per (operator, store, epoch).

Every store of a checkpoint (``state-metadata``), and every transformWithState
variable and the timers (``statestore`` with ``stateVarName`` /
``readRegisteredTimers``), at every committed epoch, in the representation the
daemon serves (see ``tests/fixtures/tws_oracle.py`` for the transformWithState
shapes): each store is one Spark job over all epochs. A store the reader fails on
is dumped with the error instead of its rows, so a release's reader that cannot
read another release's checkpoint says so store by store.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from .queries import FORMAT_VERSION
from .values import encode

# One dumped row: key, value, partition.
Entry = tuple[Any, Any, int]


def describe_error(error: BaseException) -> str:
    """One line per cause: Python's message, and for a JVM exception its cause chain."""
    lines = [
        f"{type(error).__name__}: {str(error).splitlines()[0][:300]}" if str(error) else type(error).__name__
    ]
    cause = getattr(error, "java_exception", None)
    seen = 0
    while cause is not None and seen < 8:
        lines.append(str(cause.toString()).splitlines()[0][:300])
        cause, seen = cause.getCause(), seen + 1
    return "\n".join(lines)


def _read(spark: Any, checkpoint: Path, epochs: list[int], options: dict[str, str]) -> list[Any]:
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    frames = []
    for epoch in epochs:
        reader = spark.read.format("statestore").option("batchId", epoch)
        for name, value in options.items():
            reader = reader.option(name, value)
        frames.append(reader.load(str(checkpoint)).withColumn("_epoch", F.lit(epoch)))
    return functools.reduce(DataFrame.unionByName, frames).collect()  # type: ignore[no-any-return]


def _entry(row: Any, kind: str) -> Entry:
    if kind == "list":
        return encode(row.key), {"list_value": encode(row.list_value)}, row.partition_id
    if kind == "map":
        key = {"key": encode(row.key), "user_map_key": encode(row.user_map_key)}
        return key, encode(row.user_map_value), row.partition_id
    if kind == "timers":
        return (
            {"key": encode(row.key), "expiration_timestamp_ms": row.expiration_timestamp_ms},
            {},
            row.partition_id,
        )
    return encode(row.key), encode(row.value), row.partition_id


def _options(operator_id: int, store: str, kind: str) -> dict[str, str]:
    options = {"operatorId": str(operator_id)}
    if kind == "store":
        options["storeName"] = store
    elif kind == "timers":
        options["readRegisteredTimers"] = "true"
    else:
        options["stateVarName"] = store
        if kind == "list":
            options["flattenCollectionTypes"] = "false"
    return options


def dump_store(
    spark: Any, checkpoint: Path, epochs: list[int], operator_id: int, store: str, kind: str
) -> dict[str, Any]:
    """One store at each epoch: ``{"epochs": {"<e>": [[key, value, partition], ...]}}``,
    or ``{"error": ...}`` when the reader fails."""
    dumped: dict[str, Any] = {"operator_id": operator_id, "store": store, "kind": kind}
    try:
        rows = _read(spark, checkpoint, epochs, _options(operator_id, store, kind))
    except Exception as error:  # the reader's verdict is the finding
        dumped["error"] = describe_error(error)
        return dumped
    states: dict[str, list[Entry]] = {str(e): [] for e in epochs}
    for row in rows:
        states[str(row["_epoch"])].append(_entry(row, kind))
    dumped["epochs"] = states
    return dumped


def dump_checkpoint(
    spark: Any,
    checkpoint: Path,
    committed: list[int],
    stores: list[str],
    variables: dict[str, str],
    format_v2: bool,
) -> dict[str, Any]:
    """Every store of ``checkpoint`` at every epoch of ``committed``; ``variables``
    (transformWithState variable -> kind) for a transformWithState query.

    The operators and their stores come from ``state-metadata``; a checkpoint without
    operator metadata (Spark 3.5 writes none) is read by the one operator's
    ``stores`` that the workload knows it has."""
    if format_v2:  # the reader finds format 2's files only with the format set in its session
        spark.conf.set(FORMAT_VERSION, "2")
    try:
        try:
            metadata = spark.read.format("state-metadata").load(str(checkpoint)).collect()
        except Exception as error:
            return {"error": f"state-metadata: {describe_error(error)}"}
        operators = [
            {
                "operator_id": r.operatorId,
                "operator_name": r.operatorName,
                "store": r.stateStoreName,
                "partitions": r.numPartitions,
            }
            for r in metadata
        ]
        if variables:
            wanted = [(0, name, kind) for name, kind in variables.items()]
        elif operators:
            wanted = [(o["operator_id"], o["store"], "store") for o in operators]
        else:
            wanted = [(0, name, "store") for name in stores]
        dumped: list[dict[str, Any]] = []
        for op, name, kind in wanted:
            failed = next((d["error"] for d in dumped if "error" in d), None)
            if failed is None:
                dumped.append(dump_store(spark, checkpoint, committed, op, name, kind))
            else:  # a reader that cannot read one store of a checkpoint reads none (format 2 in 4.0)
                not_tried = f"not tried: {failed}"
                dumped.append({"operator_id": op, "store": name, "kind": kind, "error": not_tried})
        return {"operators": operators, "stores": dumped}
    finally:
        if format_v2:
            spark.conf.unset(FORMAT_VERSION)


def unread(dump: dict[str, Any] | None) -> bool:
    """Whether a reader left (some of) a checkpoint's dump unread."""
    return dump is None or "error" in dump or any("error" in store for store in dump["stores"])


def dump_job(spark: Any, job: dict[str, Any]) -> dict[str, Any]:
    """:func:`dump_checkpoint` of one job as the workload's ``result.json`` describes it."""
    return dump_checkpoint(
        spark, Path(job["checkpoint"]), job["committed"], job["stores"], job["variables"], job["format_v2"]
    )
