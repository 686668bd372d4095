"""``epochstate history`` and ``epochstate changes``: a job's state over a range of epochs.

``history JOB KEY`` lists every version of one key over ``--from``..``--to`` (default:
the oldest retained to the newest epoch). With ``--json``, one JSON object per
version (NDJSON), oldest first::

    {"job": "orders", "operator": 0, "store": "default", "query_id": "3f0c...",
     "from_epoch": 0, "to_epoch": 12, "key": {"user": "alice"}, "valid_from": 3,
     "valid_to": 7, "deleted": false, "value": {"count": 3}, "partition": 1}

``valid_to`` is null while the version is still valid at ``to_epoch``; a deletion
has ``deleted`` true and a null ``value``.

``changes JOB`` prints the keys each epoch of ``--from``..``--to`` changed, epoch by
epoch, each epoch's in key order; ``--follow`` keeps printing each new epoch as it
becomes queryable (until Ctrl-C). With ``--json``, one JSON object per change, and
after each epoch's changes one line that marks it complete (``type`` tells them
apart): a consumer that stopped after the marker of epoch ``e`` resumes with
``--from e+1``, losing and repeating nothing::

    {"job": "orders", "operator": 0, "store": "default", "query_id": "3f0c...",
     "epoch": 8, "type": "upsert", "key": {"user": "alice"}, "value": {"count": 4},
     "partition": 1}
    {"job": "orders", ..., "epoch": 8, "type": "epoch_complete", "changes": 1,
     "committed_at_ms": 1764321234567}

Keys and values are written as for ``get`` (:mod:`epochstate.cli.reads`).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from epochstate.cli.arguments import (
    DEFAULT_TARGET,
    OperatorOpt,
    QueryIdOpt,
    RecordLinesOpt,
    StoreOpt,
    TargetOpt,
    TimeoutOpt,
    WaitOpt,
    parse_json,
)
from epochstate.cli.connection import connect
from epochstate.cli.console import fail, run_client
from epochstate.cli.formats import Format, write_changes
from epochstate.cli.output import compact, print_json_line
from epochstate.cli.tables import print_table
from epochstate.client.over_time import EpochChanges, KeyHistory

FromOpt = Annotated[
    int | None, typer.Option("--from", min=0, help="first epoch (default: the oldest retained)")
]
ToOpt = Annotated[int | None, typer.Option("--to", min=0, help="last epoch (default: the newest)")]


def history(
    job: Annotated[str, typer.Argument(help="job name")],
    key: Annotated[str, typer.Argument(help="the key as JSON: '[42, \"x\"]' or '{\"k\": 42}'")],
    from_epoch: FromOpt = None,
    to_epoch: ToOpt = None,
    target: TargetOpt = DEFAULT_TARGET,
    wait: WaitOpt = False,
    operator: OperatorOpt = 0,
    store: StoreOpt = "default",
    query_id: QueryIdOpt = None,
    timeout: TimeoutOpt = 10.0,
    as_json: RecordLinesOpt = False,
) -> None:
    """List every version of one key over a range of epochs, deletions included."""
    parsed = parse_json(key, "key")
    with connect(target, timeout) as client:
        start = from_epoch
        if start is None:
            start = max(0, run_client(lambda: client.describe(job, refresh=True)).oldest_epoch)
        found = _keyed(
            lambda: client.history(
                job,
                parsed,
                from_epoch=start,
                to_epoch=to_epoch,
                wait=wait,
                operator_id=operator,
                store=store,
                query_id=query_id,
            )
        )
    if as_json:
        for record in history_records(found, operator, store):
            print_json_line(record)
        return
    print_table(
        ("from", "to", "deleted", "value", "partition"),
        [
            (
                str(v.valid_from),
                "-" if v.valid_to is None else str(v.valid_to),
                "yes" if v.deleted else "no",
                "-" if v.value is None else compact(v.value),
                "-" if v.partition is None else str(v.partition),
            )
            for v in found.versions
        ],
    )


def history_records(found: KeyHistory, operator: int, store: str) -> list[dict[str, Any]]:
    """The JSON object of each version (see the module docstring)."""
    return [
        {
            "job": found.job,
            "operator": operator,
            "store": store,
            "query_id": found.query_id,
            "from_epoch": found.from_epoch,
            "to_epoch": found.to_epoch,
            "key": v.key,
            "valid_from": v.valid_from,
            "valid_to": v.valid_to,
            "deleted": v.deleted,
            "value": v.value,
            "partition": v.partition,
        }
        for v in found.versions
    ]


def changes(
    job: Annotated[str, typer.Argument(help="job name")],
    from_epoch: FromOpt = None,
    to_epoch: ToOpt = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing each new epoch as it becomes queryable")
    ] = False,
    target: TargetOpt = DEFAULT_TARGET,
    operator: OperatorOpt = 0,
    store: StoreOpt = "default",
    query_id: QueryIdOpt = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="deadline in seconds of the whole feed (default: none)")
    ] = None,
    as_json: RecordLinesOpt = False,
    fmt: Annotated[
        Format | None, typer.Option("--format", help="ndjson (as --json), csv or parquet (to stdout)")
    ] = None,
) -> None:
    """Print the keys each epoch changed (upserts with their new value, deletes), epoch by epoch."""
    if follow and to_epoch is not None:
        raise fail("--follow and --to exclude each other", 2)
    as_json = as_json or fmt is Format.ndjson
    with connect(target) as client:
        start = from_epoch
        if start is None:
            summary = run_client(lambda: client.describe(job, refresh=True))
            # The oldest retained epoch may have been loaded whole: its changes are not known.
            start = 0 if summary.oldest_epoch <= 0 else summary.oldest_epoch + 1
        if fmt in (Format.csv, Format.parquet):
            write_changes(
                fmt,
                client,
                job,
                sys.stdout.buffer,
                from_epoch=start,
                to_epoch=to_epoch,
                follow=follow,
                operator_id=operator,
                store=store,
                query_id=query_id,
                timeout=timeout,
            )
            return
        feed = client.changes(
            job,
            from_epoch=start,
            to_epoch=to_epoch,
            follow=follow,
            operator_id=operator,
            store=store,
            query_id=query_id,
            timeout=timeout,
        )
        # Written epoch by epoch as they arrive: a followed feed prints at once.
        while (epoch := run_client(lambda: next(feed, None))) is not None:
            if as_json:
                for record in change_records(job, operator, store, epoch):
                    print_json_line(record)
            else:
                _print_epoch(epoch)


def change_records(job: str, operator: int, store: str, epoch: EpochChanges) -> list[dict[str, Any]]:
    """The JSON objects of one epoch's changes, then its marker (see the module docstring)."""
    head = {
        "job": job,
        "operator": operator,
        "store": store,
        "query_id": epoch.query_id,
        "epoch": epoch.epoch,
    }
    records: list[dict[str, Any]] = [
        {**head, "type": c.type, "key": c.key, "value": c.value, "partition": c.partition}
        for c in epoch.changes
    ]
    records.append(
        {
            **head,
            "type": "epoch_complete",
            "changes": len(epoch.changes),
            "committed_at_ms": epoch.committed_at_ms,
        }
    )
    return records


def _print_epoch(epoch: EpochChanges) -> None:
    rows = [
        (
            str(epoch.epoch),
            c.type,
            compact(c.key),
            "-" if c.value is None else compact(c.value),
            "-" if c.partition is None else str(c.partition),
        )
        for c in epoch.changes
    ]
    print_table(
        ("epoch", "change", "key", "value", "partition"), rows or [(str(epoch.epoch), "-", "-", "-", "-")]
    )


def _keyed(action: Any) -> KeyHistory:
    try:
        found: KeyHistory = run_client(action)
    except (ValueError, TypeError) as error:
        raise fail(f"key does not match the key schema: {error}", 4) from None
    return found
