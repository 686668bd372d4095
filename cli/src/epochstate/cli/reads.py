"""``epochstate get`` and ``epochstate scan``: keys of a job's state, pinned to one epoch.

With ``--json`` each record is one line of JSON (NDJSON), in request order for
``get`` and key order for ``scan`` (written as the daemon's pages arrive; should
a later page fail, the lines before stay written and the exit code says so)::

    {"job": "orders", "operator": 0, "store": "default", "epoch": 12, "query_id": "3f0c...",
     "key": {"user": "alice"}, "found": true, "value": {"count": 3}, "partition": 1}

``epoch`` is the epoch that answered (all records of one command share it), and
``query_id`` the query (the job's incarnation) it belongs to: a recreated
checkpoint holds another query, whose epochs restart at 0. ``--query-id`` pins
the read to one query: it fails (exit code of FAILED_PRECONDITION) rather than be
answered by another. A read of an alias (docs/swap.md#aliases) adds ``answered_by``,
the job whose state answered, ``epoch`` being the alias's;
``value`` and ``partition`` are null when ``found`` is false (a scan lists only
found keys). Keys and values are objects, field name -> value in schema order,
converted as :func:`epochstate.cli.output.jsonable` says; a struct whose schema
repeats a field name (an aggregation buffer's ``count``, ``sum``, ``count``) is
an array of ``[name, value]`` pairs instead, so every field is kept::

    {"job": "orders", ..., "value": [["count", 3], ["sum", 9.5], ["count", 2]], ...}
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer

from epochstate.cli.arguments import (
    DEFAULT_TARGET,
    AsOfTimeOpt,
    AtLeastOpt,
    EpochOpt,
    OperatorOpt,
    QueryIdOpt,
    RecordLinesOpt,
    StoreOpt,
    TargetOpt,
    TimeoutOpt,
    WaitOpt,
    parse_aligned,
    parse_epoch,
    parse_json,
    parse_position,
)
from epochstate.cli.connection import connect
from epochstate.cli.console import fail, run_client
from epochstate.cli.formats import Format, write_scan
from epochstate.cli.output import compact, print_json_line
from epochstate.cli.tables import print_table
from epochstate.client.client import Lookup

T = TypeVar("T")


def get(
    job: Annotated[str, typer.Argument(help="job name")],
    key: Annotated[list[str], typer.Argument(help="key(s) as JSON: '[42, \"x\"]' or '{\"k\": 42}'")],
    target: TargetOpt = DEFAULT_TARGET,
    epoch: EpochOpt = "latest",
    at_least: AtLeastOpt = None,
    covers: Annotated[
        str | None,
        typer.Option(help='earliest epoch that has read this far: \'{"topic": {"0": 42}}\''),
    ] = None,
    aligned_with: Annotated[
        str | None,
        typer.Option(help="the epoch aligned with epoch M of job B: 'B:M' (or 'B:M@SUBJECT')"),
    ] = None,
    as_of_time: AsOfTimeOpt = None,
    wait: WaitOpt = False,
    operator: OperatorOpt = 0,
    store: StoreOpt = "default",
    query_id: QueryIdOpt = None,
    timeout: TimeoutOpt = 10.0,
    as_json: RecordLinesOpt = False,
) -> None:
    """Look up key(s) in a job's state, pinned to one epoch."""
    keys = [parse_json(k, "key") for k in key]
    chosen = parse_epoch(epoch)
    position = parse_position(covers) if covers is not None else None
    aligned = parse_aligned(aligned_with) if aligned_with is not None else None
    with connect(target, timeout) as client:
        lookups = _read(
            lambda: client.multi_get(
                job,
                keys,
                epoch=chosen,
                at_least=at_least,
                covers=position,
                aligned_with=aligned,
                as_of_time=as_of_time,
                wait=wait,
                operator_id=operator,
                store=store,
                query_id=query_id,
            )
        )
    _print_lookups(job, operator, store, lookups, as_json)


def scan(
    job: Annotated[str, typer.Argument(help="job name")],
    prefix: Annotated[str, typer.Option(help="leading key fields as JSON")] = "[]",
    target: TargetOpt = DEFAULT_TARGET,
    epoch: EpochOpt = "latest",
    as_of_time: AsOfTimeOpt = None,
    operator: OperatorOpt = 0,
    store: StoreOpt = "default",
    limit: Annotated[int, typer.Option(help="at most this many records (0: every one)")] = 100,
    query_id: QueryIdOpt = None,
    timeout: TimeoutOpt = 10.0,
    as_json: RecordLinesOpt = False,
    fmt: Annotated[
        Format | None, typer.Option("--format", help="ndjson (as --json), csv or parquet (to stdout)")
    ] = None,
) -> None:
    """List a job's state at one epoch, in key order."""
    parsed = parse_json(prefix, "prefix")
    chosen = parse_epoch(epoch)
    if fmt in (Format.csv, Format.parquet):
        with connect(target, timeout) as client:
            write_scan(
                fmt,
                client,
                job,
                sys.stdout.buffer,
                prefix=parsed,
                epoch=chosen,
                operator_id=operator,
                store=store,
                limit=limit or None,
                query_id=query_id,
                as_of_time=as_of_time,
            )
        return
    as_json = as_json or fmt is Format.ndjson
    with connect(target, timeout) as client:
        pages = client.scan(
            job,
            prefix=parsed,
            epoch=chosen,
            operator_id=operator,
            store=store,
            limit=limit or None,
            query_id=query_id,
            as_of_time=as_of_time,
        )
        if as_json:
            # A line per record as the pages arrive: a long scan starts printing at once.
            while (lookup := _read(lambda: next(pages, None))) is not None:
                print_json_line(lookup_record(job, operator, store, lookup))
            return
        lookups = _read(lambda: list(pages))
    _print_lookups(job, operator, store, lookups, as_json=False)


def _read(action: Callable[[], T]) -> T:
    try:
        return run_client(action)
    except (ValueError, TypeError) as error:
        # The client fits keys to the key schema before sending; what does not fit
        # is an invalid argument, as the daemon would have said.
        raise fail(f"key does not match the key schema: {error}", 4) from None


def lookup_record(job: str, operator: int, store: str, lookup: Lookup) -> dict[str, Any]:
    """The JSON object of one record (see the module docstring)."""
    record = {
        "job": job,
        "operator": operator,
        "store": store,
        "epoch": lookup.epoch,
        "query_id": lookup.query_id,
        "key": lookup.key,
        "found": lookup.found,
        "value": lookup.value,
        "partition": lookup.partition,
    }
    if lookup.job:  # a read of an alias: the job that answered
        record["answered_by"] = lookup.job
    return record


def _print_lookups(job: str, operator: int, store: str, lookups: Sequence[Lookup], as_json: bool) -> None:
    if as_json:
        for lookup in lookups:
            print_json_line(lookup_record(job, operator, store, lookup))
        return
    print_table(
        ("epoch", "key", "found", "value", "partition"),
        [
            (
                str(lk.epoch),
                compact(lk.key),
                "yes" if lk.found else "no",
                compact(lk.value) if lk.found else "-",
                "-" if lk.partition is None else str(lk.partition),
            )
            for lk in lookups
        ],
    )
