"""``epochstate watch``: each new epoch of a job, as it becomes queryable.

One line per epoch, written and flushed as the daemon streams it: text, or with
``--json`` one JSON object per line (NDJSON), the epoch object of
:func:`epochstate.cli.jobs.epoch_record` (the same as ``epochs --json`` lists).
The stream ends after ``--count`` epochs, when the daemon ends it (shutdown),
or on Ctrl-C (exit code 130).
"""

from __future__ import annotations

from typing import Annotated

import typer

from epochstate.cli.arguments import DEFAULT_TARGET, JsonLinesOpt, TargetOpt
from epochstate.cli.connection import connect
from epochstate.cli.console import run_client
from epochstate.cli.jobs import epoch_record
from epochstate.cli.output import print_json_line, print_line


def watch(
    job: Annotated[str, typer.Argument(help="job name")],
    target: TargetOpt = DEFAULT_TARGET,
    count: Annotated[int, typer.Option(min=0, help="stop after this many epochs (0: never)")] = 0,
    after: Annotated[
        int | None,
        typer.Option(min=0, help="start with the retained epochs after this one (default: the next new one)"),
    ] = None,
    as_json: JsonLinesOpt = False,
) -> None:
    """Print each new epoch of a job as it becomes queryable."""
    with connect(target) as client:
        stream = client.watch(job, after_epoch=after)
        seen = 0
        while not count or seen < count:
            info = run_client(lambda: next(stream, None))
            if info is None:
                return
            if as_json:
                print_json_line(epoch_record(job, info))
            else:
                lag = info.ingested_at_ms - info.committed_at_ms
                print_line(f"epoch {info.epoch} queryable ({lag} ms after commit)")
            seen += 1
