"""``epochstate jobs``, ``describe`` and ``epochs``: what a daemon follows and serves.

With ``--json`` each prints exactly one JSON document:

* ``jobs``: an array of ``{"job", "checkpoint", "query_id", "provider",
  "latest_epoch", "oldest_epoch", "committed_epoch", "problems",
  "held_partitions"}``; epochs are -1 when there are none yet; ``problems`` is a
  list of ``{"epoch", "reason"}`` (committed epochs that cannot be served);
  ``held_partitions`` the ``[first, last]`` ranges of Spark partitions the daemon
  holds, ``[]`` for every one (a group replica of some shards holds theirs only).
* ``describe``: ``{"job", "checkpoint", "query_id", "latest_epoch",
  "oldest_epoch", "committed_epoch", "problems", "held_partitions", "stores"}``; each store is
  ``{"operator", "operator_name", "store", "kind", "partitions", "from_epoch",
  "key", "value", "earlier"}`` with ``key``/``value`` as Spark's simple strings
  (``struct<user:string>``), in force from ``from_epoch``; ``earlier`` lists the
  schemas of earlier epochs, oldest first, as ``{"from_epoch", "key", "value"}``.
* ``epochs``: an array of epoch objects (:func:`epoch_record`), oldest first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Annotated, Any

import typer

from epochstate.cli.arguments import DEFAULT_TARGET, JsonOpt, TargetOpt, TimeoutOpt
from epochstate.cli.connection import connect
from epochstate.cli.console import run_client
from epochstate.cli.output import print_document, print_line
from epochstate.cli.tables import print_table
from epochstate.client.client import StoreSchema
from epochstate.core.partition_ranges import PartitionRanges
from epochstate.core.sparktypes import type_to_simple_string
from epochstate.v1 import epochstate_pb2 as pb


def jobs(target: TargetOpt = DEFAULT_TARGET, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0) -> None:
    """List the jobs the daemon follows."""
    with connect(target, timeout) as client:
        found = run_client(client.jobs)
    rows = [
        {
            "job": j.job,
            "checkpoint": j.checkpoint,
            "query_id": j.query_id,
            "provider": j.provider,
            "latest_epoch": j.latest_epoch,
            "oldest_epoch": j.oldest_epoch,
            "committed_epoch": j.committed_epoch,
            "problems": _problems(j.problems),
            "held_partitions": [[r.first, r.last] for r in j.held_partitions],
        }
        for j in found
    ]
    if as_json:
        print_document(rows)
        return
    columns = ("job", "latest_epoch", "oldest_epoch", "query_id", "checkpoint")
    headers = ("job", "latest epoch", "oldest epoch", "query id", "checkpoint", "partitions held")
    print_table(
        headers,
        [
            (*(str(r[c]) for c in columns), _held((h.first, h.last) for h in j.held_partitions))
            for r, j in zip(rows, found, strict=True)
        ],
    )


def _held(ranges: Iterable[Sequence[int]]) -> str:
    """``0-1, 4`` for the ranges [0, 1] and [4, 4]; ``all`` for none (every partition)."""
    spans = tuple((first, last) for first, last in ranges)
    return str(PartitionRanges(spans)) if spans else "all"


def describe(
    job: Annotated[str, typer.Argument(help="job name")],
    target: TargetOpt = DEFAULT_TARGET,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Show a job's operators, stores, schemas and retained epochs."""
    with connect(target, timeout) as client:
        d = run_client(lambda: client.describe(job, refresh=True))
    stores = [_store_record(s) for s in d.stores]
    if as_json:
        print_document(
            {
                "job": d.job,
                "checkpoint": d.checkpoint,
                "query_id": d.query_id,
                "latest_epoch": d.latest_epoch,
                "oldest_epoch": d.oldest_epoch,
                "committed_epoch": d.committed_epoch,
                "problems": _problems(d.problems),
                "held_partitions": [list(r) for r in d.held_partitions],
                "stores": stores,
            }
        )
        return
    print_line(f"job {d.job}  query {d.query_id}  epochs {d.oldest_epoch}..{d.latest_epoch}")
    print_line(f"checkpoint {d.checkpoint}")
    if d.held_partitions:
        print_line(f"holds Spark partitions {_held(d.held_partitions)} only (a group replica of some shards)")
    for problem in d.problems:
        print_line(f"epoch {problem.epoch} cannot be served: {problem.reason}")
    headers = ("operator", "name", "store", "kind", "partitions", "from epoch", "key schema", "value schema")
    columns = ("operator", "operator_name", "store", "kind", "partitions", "from_epoch", "key", "value")
    rows: list[tuple[str, ...]] = []
    for s in stores:
        rows.append(tuple(str(s[c]) for c in columns))
        # An earlier schema version gets a row of its own under its store, newest first.
        for e in reversed(s["earlier"]):
            rows.append(("", "", "", "", "", str(e["from_epoch"]), e["key"], e["value"]))
    print_table(headers, rows)


def epochs(
    job: Annotated[str, typer.Argument(help="job name")],
    target: TargetOpt = DEFAULT_TARGET,
    from_epoch: Annotated[int, typer.Option("--from", help="the first epoch to list")] = 0,
    limit: Annotated[int, typer.Option(help="at most this many epochs (0: all retained)")] = 0,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """List a job's queryable epochs with their commit times and source offsets."""
    with connect(target, timeout) as client:
        found = run_client(lambda: client.epochs(job, from_epoch=from_epoch, limit=limit))
    if as_json:
        print_document([epoch_record(job, e) for e in found])
        return
    print_table(
        ("epoch", "committed (ms)", "queryable after (ms)", "end offsets"),
        [
            (
                str(e.epoch),
                str(e.committed_at_ms),
                str(e.ingested_at_ms - e.committed_at_ms),
                "; ".join(s.end_offset_json for s in e.sources),
            )
            for e in found
        ],
    )


def epoch_record(job: str, info: pb.EpochInfo) -> dict[str, Any]:
    """An epoch as JSON: ``{"job", "epoch", "query_id", "committed_at_ms", "ingested_at_ms",
    "watermark_ms", "sources"}`` (``query_id``: the job's incarnation the epoch belongs
    to; an alias's epoch adds ``answered_by`` and ``job_epoch``), times in milliseconds since the Unix epoch
    (``ingested_at_ms``: when it became queryable); each source is ``{"source",
    "start", "end"}`` with Spark's offsets for the epoch, as JSON (null: none)."""
    record = {
        "job": job,
        "epoch": info.epoch,
        "query_id": info.query_id,
        "committed_at_ms": info.committed_at_ms,
        "ingested_at_ms": info.ingested_at_ms,
        "watermark_ms": info.watermark_ms,
        "sources": [
            {"source": s.source, "start": _offset(s.start_offset_json), "end": _offset(s.end_offset_json)}
            for s in info.sources
        ],
    }
    if info.job:  # an epoch of an alias: the job answering it, at its own epoch
        record["answered_by"], record["job_epoch"] = info.job, info.job_epoch
    return record


def _offset(text: str) -> Any:
    """Spark writes offsets as JSON; anything else is kept as the text it is."""
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _problems(problems: Iterable[pb.EpochProblem]) -> list[dict[str, Any]]:
    return [{"epoch": p.epoch, "reason": p.reason} for p in problems]


def _store_record(s: StoreSchema) -> dict[str, Any]:
    return {
        "operator": s.operator_id,
        "operator_name": s.operator_name,
        "store": s.store,
        "kind": s.kind,
        "partitions": s.num_partitions,
        "from_epoch": s.first_epoch,
        "key": type_to_simple_string(s.key),
        "value": type_to_simple_string(s.value),
        "earlier": [
            {
                "from_epoch": e.first_epoch,
                "key": type_to_simple_string(e.key),
                "value": type_to_simple_string(e.value),
            }
            for e in s.earlier
        ],
    }
