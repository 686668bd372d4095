"""Options shared by the read commands, and the parsers of their values.

A value that does not parse fails the command with exit code 2 (bad usage)
before anything is sent to the daemon.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from epochstate.cli.console import fail
from epochstate.client.client import AlignedWith, EpochArg

TargetOpt = Annotated[
    str,
    typer.Option(
        "--target",
        "-t",
        envvar="EPOCHSTATE_TARGET",
        help="daemon address: host:port or unix:///path/to/socket; several, comma-separated: "
        "reads are routed to the replicas that serve them",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document instead of a table")]
JsonLinesOpt = Annotated[
    bool, typer.Option("--json", help="print one JSON object per line (NDJSON) instead of a table")
]
RecordLinesOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="print one JSON object per record (NDJSON) instead of a table; a key or value is an"
        " object, or, when a field name repeats, an array of [name, value] pairs in schema order",
    ),
]
EpochOpt = Annotated[str, typer.Option("--epoch", "-e", help="an epoch number, or 'latest'")]
AtLeastOpt = Annotated[
    int | None, typer.Option("--at-least", help="newest epoch, once it is >= this (waits)")
]
AsOfTimeOpt = Annotated[
    int | None,
    typer.Option(
        "--as-of-time",
        min=0,
        help="the newest epoch committed at or before this time, ms since the Unix epoch (waits for a"
        " later commit)",
    ),
]
WaitOpt = Annotated[bool, typer.Option("--wait", help="wait (up to --timeout) for the epoch")]
OperatorOpt = Annotated[int, typer.Option("--operator", "-o", help="stateful operator id")]
StoreOpt = Annotated[str, typer.Option("--store", "-s", help="store name")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="deadline in seconds")]
QueryIdOpt = Annotated[
    str | None,
    typer.Option(
        "--query-id",
        help="read only this query of the job (a result's query_id); fails if its checkpoint was recreated",
    ),
]
DEFAULT_TARGET = "127.0.0.1:7070"


def parse_epoch(text: str) -> EpochArg:
    """``latest`` or an epoch number >= 0."""
    if text == "latest":
        return "latest"
    try:
        value = int(text)
    except ValueError:
        raise fail(f"--epoch must be a number or 'latest', got {text!r}", 2) from None
    if value < 0:
        raise fail(f"--epoch must be >= 0, got {value}", 2)
    return value


def parse_json(text: str, what: str) -> Any:
    """``text`` as JSON; for a key, a bare word is a one-field string key
    (``epochstate get job alice``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if what == "key" and text and not text.lstrip().startswith(("[", "{", '"')):
            return text
        raise fail(f"{what} must be JSON (e.g. '[42, \"x\"]' or '{{\"k\": 42}}'), got {text!r}", 2) from None


def parse_position(text: str) -> dict[tuple[str, int], int]:
    """``{"<topic>": {"<partition>": offset}}`` as ``{(topic, partition): offset}``."""
    parsed = parse_json(text, "position")
    try:
        return {
            (str(topic), int(partition)): int(offset)
            for topic, partitions in parsed.items()
            for partition, offset in partitions.items()
        }
    except (AttributeError, TypeError, ValueError):
        raise fail(f'--covers takes {{"<topic>": {{"<partition>": offset}}}}, got {text!r}', 2) from None


def parse_aligned(text: str) -> AlignedWith:
    """``JOB:EPOCH`` or ``JOB:EPOCH@SUBJECT``."""
    job, _, rest = text.rpartition(":")
    epoch, _, subject = rest.partition("@")
    if not job or not epoch.isdigit():
        raise fail(f"--aligned-with takes JOB:EPOCH (or JOB:EPOCH@SUBJECT), got {text!r}", 2)
    return AlignedWith(job, int(epoch), subject)
