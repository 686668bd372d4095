"""The ``epochstate`` command line.

Exit codes: 0 success; 1 unexpected error; 2 bad usage; 3 not found; 4 invalid
argument (e.g. a key that does not match the key schema); 5 epoch not available
(not committed yet, older than retention, or deadline passed); 6 daemon
unavailable. Errors are one line on stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Table

from epochstate.cli.align import align_app
from epochstate.cli.console import EXIT_BY_CODE, fail, out, run_client
from epochstate.cli.daemon_command import daemon
from epochstate.cli.dev_commands import demo, demo_chain, zookeeper
from epochstate.client.client import AlignedWith, EpochArg, EpochStateClient, Lookup
from epochstate.client.errors import EpochStateClientError

app = typer.Typer(
    name="epochstate",
    help="Epoch-pinned, repeatable lookups into the state of Spark streaming jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(align_app, name="align")
app.command()(daemon)
app.command()(zookeeper)
app.command()(demo)
app.command("demo-chain")(demo_chain)

TargetOpt = Annotated[
    str,
    typer.Option(
        "--target",
        "-t",
        envvar="EPOCHSTATE_TARGET",
        help="daemon address: host:port or unix:///path/to/socket",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
EpochOpt = Annotated[str, typer.Option("--epoch", "-e", help="an epoch number, or 'latest'")]
AtLeastOpt = Annotated[
    int | None, typer.Option("--at-least", help="newest epoch, once it is >= this (waits)")
]
WaitOpt = Annotated[bool, typer.Option("--wait", help="wait (up to --timeout) for the epoch")]
OperatorOpt = Annotated[int, typer.Option("--operator", "-o", help="stateful operator id")]
StoreOpt = Annotated[str, typer.Option("--store", "-s", help="store name")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="deadline in seconds")]

def _parse_epoch(text: str) -> EpochArg:
    if text == "latest":
        return "latest"
    try:
        value = int(text)
    except ValueError:
        raise fail(f"--epoch must be a number or 'latest', got {text!r}", 2) from None
    if value < 0:
        raise fail(f"--epoch must be >= 0, got {value}", 2)
    return value


def _parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # A bare word is a one-field string key: `epochstate get job alice`.
        if what == "key" and text and not text.lstrip().startswith(("[", "{", '"')):
            return text
        raise fail(f"{what} must be JSON (e.g. '[42, \"x\"]' or '{{\"k\": 42}}'), got {text!r}", 2) from None


def _parse_position(text: str) -> dict[tuple[str, int], int]:
    parsed = _parse_json(text, "position")
    try:
        return {
            (str(topic), int(partition)): int(offset)
            for topic, partitions in parsed.items()
            for partition, offset in partitions.items()
        }
    except (AttributeError, TypeError, ValueError):
        raise fail(f'--covers takes {{"<topic>": {{"<partition>": offset}}}}, got {text!r}', 2) from None


def _parse_aligned(text: str) -> AlignedWith:
    """``JOB:EPOCH`` or ``JOB:EPOCH@SUBJECT``."""
    job, _, rest = text.rpartition(":")
    epoch, _, subject = rest.partition("@")
    if not job or not epoch.isdigit():
        raise fail(f"--aligned-with takes JOB:EPOCH (or JOB:EPOCH@SUBJECT), got {text!r}", 2)
    return AlignedWith(job, int(epoch), subject)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def _print_lookups(lookups: list[Lookup], as_json: bool) -> None:
    if as_json:
        for lk in lookups:
            out.print_json(
                json.dumps(
                    {
                        "epoch": lk.epoch,
                        "key": _jsonable(lk.key),
                        "found": lk.found,
                        "value": _jsonable(lk.value),
                        "partition": lk.partition,
                    }
                )
            )
        return
    table = Table("epoch", "key", "found", "value", "partition")
    for lk in lookups:
        table.add_row(
            str(lk.epoch),
            json.dumps(_jsonable(lk.key)),
            "yes" if lk.found else "no",
            json.dumps(_jsonable(lk.value)) if lk.found else "-",
            "-" if lk.partition is None else str(lk.partition),
        )
    out.print(table)


@app.command()
def get(
    job: Annotated[str, typer.Argument(help="job name")],
    key: Annotated[list[str], typer.Argument(help="key(s) as JSON: '[42, \"x\"]' or '{\"k\": 42}'")],
    target: TargetOpt = "127.0.0.1:7070",
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
    wait: WaitOpt = False,
    operator: OperatorOpt = 0,
    store: StoreOpt = "default",
    timeout: TimeoutOpt = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """Look up key(s) in a job's state, pinned to one epoch."""
    keys = [_parse_json(k, "key") for k in key]
    chosen = _parse_epoch(epoch)
    position = _parse_position(covers) if covers is not None else None
    aligned = _parse_aligned(aligned_with) if aligned_with is not None else None
    with EpochStateClient(target, timeout=timeout) as client:
        lookups = run_client(
            lambda: client.multi_get(
                job,
                keys,
                epoch=chosen,
                at_least=at_least,
                covers=position,
                aligned_with=aligned,
                wait=wait,
                operator_id=operator,
                store=store,
            )
        )
    _print_lookups(lookups, as_json)


@app.command()
def scan(
    job: Annotated[str, typer.Argument(help="job name")],
    prefix: Annotated[str, typer.Option(help="leading key fields as JSON")] = "[]",
    target: TargetOpt = "127.0.0.1:7070",
    epoch: EpochOpt = "latest",
    operator: OperatorOpt = 0,
    store: StoreOpt = "default",
    limit: Annotated[int, typer.Option(help="at most this many records")] = 100,
    timeout: TimeoutOpt = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """List a job's state at one epoch, in key order."""
    parsed = _parse_json(prefix, "prefix")
    chosen = _parse_epoch(epoch)
    with EpochStateClient(target, timeout=timeout) as client:
        lookups = run_client(
            lambda: list(
                client.scan(job, prefix=parsed, epoch=chosen, operator_id=operator, store=store, limit=limit)
            )
        )
    _print_lookups(lookups, as_json)


@app.command()
def jobs(target: TargetOpt = "127.0.0.1:7070", as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0) -> None:
    """List the jobs the daemon follows."""
    with EpochStateClient(target, timeout=timeout) as client:
        found = run_client(client.jobs)
    rows = [
        {
            "job": j.job,
            "latest_epoch": j.latest_epoch,
            "oldest_epoch": j.oldest_epoch,
            "query_id": j.query_id,
            "checkpoint": j.checkpoint,
        }
        for j in found
    ]
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table("job", "latest epoch", "oldest epoch", "query id", "checkpoint")
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    out.print(table)


@app.command()
def describe(
    job: str, target: TargetOpt = "127.0.0.1:7070", as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0
) -> None:
    """Show a job's operators, stores, schemas and retained epochs."""
    from epochstate.core.sparktypes import type_to_simple_string

    with EpochStateClient(target, timeout=timeout) as client:
        d = run_client(lambda: client.describe(job, refresh=True))
    stores: list[dict[str, Any]] = [
        {
            "operator": s.operator_id,
            "operator_name": s.operator_name,
            "store": s.store,
            "kind": s.kind,
            "partitions": s.num_partitions,
            "key": type_to_simple_string(s.key),
            "value": type_to_simple_string(s.value),
            "from_epoch": s.first_epoch,
            # Schemas of earlier epochs, oldest first (a restart with a changed schema).
            "earlier": [
                {
                    "from_epoch": e.first_epoch,
                    "key": type_to_simple_string(e.key),
                    "value": type_to_simple_string(e.value),
                }
                for e in s.earlier
            ],
        }
        for s in d.stores
    ]
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "job": d.job,
                    "checkpoint": d.checkpoint,
                    "query_id": d.query_id,
                    "latest_epoch": d.latest_epoch,
                    "oldest_epoch": d.oldest_epoch,
                    "committed_epoch": d.committed_epoch,
                    "problems": [{"epoch": p.epoch, "reason": p.reason} for p in d.problems],
                    "stores": stores,
                }
            )
        )
        return
    out.print(f"job [bold]{d.job}[/bold]  query {d.query_id}  epochs {d.oldest_epoch}..{d.latest_epoch}")
    out.print(f"checkpoint {d.checkpoint}", highlight=False)
    for problem in d.problems:
        out.print(f"[red]epoch {problem.epoch} cannot be served:[/red] {problem.reason}", highlight=False)
    headers = ("operator", "name", "store", "kind", "partitions", "from epoch", "key schema", "value schema")
    columns = ("operator", "operator_name", "store", "kind", "partitions", "from_epoch", "key", "value")
    table = Table(*headers)
    for s in stores:
        table.add_row(*(str(s[c]) for c in columns))
        # An earlier schema version gets a row of its own under its store, newest first.
        for e in reversed(s["earlier"]):
            table.add_row("", "", "", "", "", str(e["from_epoch"]), str(e["key"]), str(e["value"]))
    out.print(table)


@app.command()
def epochs(
    job: str,
    target: TargetOpt = "127.0.0.1:7070",
    from_epoch: Annotated[int, typer.Option("--from")] = 0,
    limit: int = 0,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """List a job's queryable epochs with their commit times and source offsets."""
    with EpochStateClient(target, timeout=timeout) as client:
        found = run_client(lambda: client.epochs(job, from_epoch=from_epoch, limit=limit))
    rows: list[dict[str, Any]] = [
        {
            "epoch": e.epoch,
            "committed_at_ms": e.committed_at_ms,
            "ingested_at_ms": e.ingested_at_ms,
            "watermark_ms": e.watermark_ms,
            "sources": [
                {"source": s.source, "start": s.start_offset_json, "end": s.end_offset_json}
                for s in e.sources
            ],
        }
        for e in found
    ]
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table("epoch", "committed (ms)", "queryable after (ms)", "end offsets")
    for r in rows:
        lag = r["ingested_at_ms"] - r["committed_at_ms"]
        table.add_row(
            str(r["epoch"]), str(r["committed_at_ms"]), str(lag), "; ".join(s["end"] for s in r["sources"])
        )
    out.print(table)


@app.command()
def watch(
    job: str,
    target: TargetOpt = "127.0.0.1:7070",
    count: Annotated[int, typer.Option(help="stop after this many epochs (0: never)")] = 0,
) -> None:
    """Print each new epoch of a job as it becomes queryable."""
    with EpochStateClient(target) as client:
        seen = 0
        try:
            for e in client.watch(job):
                out.print(
                    f"epoch {e.epoch} queryable ({e.ingested_at_ms - e.committed_at_ms} ms after commit)"
                )
                seen += 1
                if count and seen >= count:
                    return
        except EpochStateClientError as error:
            raise fail(str(error), EXIT_BY_CODE.get(error.code, 1)) from None


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
