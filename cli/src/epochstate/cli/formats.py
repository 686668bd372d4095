"""``--format``: how ``epochstate scan`` and ``epochstate changes`` write records for
other programs.

* ``ndjson``: one JSON object per record, as ``--json`` writes it (see
  :mod:`epochstate.cli.reads`); needs nothing beyond the client.
* ``csv``: a header line, then one line per record, from the Arrow table of the
  records (:mod:`epochstate.client.arrow`) with its structs flattened: columns
  ``key.<field>``, ``value.<field>`` (nested structs as ``value.<field>.<child>``;
  a repeated field name gives a repeated column name, every field kept) and
  ``partition_id``. Binary values are base64; arrays and maps are JSON text, as
  ``--json`` writes them; a null is an empty cell.
* ``parquet``: one Parquet file of that Arrow table (structs kept), the epoch and
  query in its metadata; written to stdout, so redirect it to a file.

For ``changes`` the columns are ``epoch`` and ``change_type`` (``upsert`` or
``delete``), then those of a scan (``value`` null for a delete), as Spark's
``readChangeFeed`` has them.

``csv`` and ``parquet`` need the ``arrow`` extra (pyarrow). Records are written as
the daemon's pages arrive, in key order: a scan of a whole epoch is never held in
memory at once; a feed of changes, one epoch at a time.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from epochstate.cli.console import fail, run_client
from epochstate.cli.output import compact
from epochstate.client.client import EpochStateClient

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]


class Format(str, enum.Enum):
    ndjson = "ndjson"
    csv = "csv"
    parquet = "parquet"


ARROW_MISSING = "--format {name} needs pyarrow: pip install 'epochstate[arrow]'"


def arrow_available() -> bool:
    """Whether the Arrow formats can be written (pyarrow imports)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _writable(fmt: Format, out: BinaryIO) -> None:
    if not arrow_available():
        raise fail(ARROW_MISSING.format(name=fmt.value), 1)
    if fmt is Format.parquet and out.isatty():
        raise fail("--format parquet writes a binary file: redirect stdout to a file", 2)


def write_scan(fmt: Format, client: EpochStateClient, job: str, out: BinaryIO, **options: Any) -> None:
    """Write the scan of ``job`` (options of :func:`~epochstate.client.arrow.scan_batches`)
    to ``out`` as ``fmt`` (csv or parquet); a failure ends the command as every read's does."""
    _writable(fmt, out)
    from epochstate.client.arrow import scan_batches

    batches = scan_batches(client, job, **options)
    try:
        first = run_client(lambda: next(batches))
    except (ValueError, TypeError) as error:
        # The client fits the prefix to the key schema before sending.
        raise fail(f"key does not match the key schema: {error}", 4) from None
    run_client(lambda: write_batches(fmt, _chain(first, batches), out))


def write_changes(
    fmt: Format,
    client: EpochStateClient,
    job: str,
    out: BinaryIO,
    *,
    operator_id: int,
    store: str,
    **options: Any,
) -> None:
    """Write the changes of ``job`` (options of
    :func:`~epochstate.client.arrow.changes_batches_of`) to ``out`` as ``fmt`` (csv or
    parquet), epoch by epoch as each completes; a feed with no change is the header (or
    the schema) alone."""
    _writable(fmt, out)
    from epochstate.client.arrow import changes_batches_of, changes_schema

    batches = changes_batches_of(client, job, operator_id=operator_id, store=store, **options)
    first = run_client(lambda: next(batches, None))
    if first is None:
        import pyarrow as pa

        described = run_client(lambda: client.describe(job).store(operator_id, store))
        first = pa.RecordBatch.from_pylist([], schema=changes_schema(described))
    run_client(lambda: write_batches(fmt, _chain(first, batches), out))


def write_batches(fmt: Format, batches: Iterable[pa.RecordBatch], out: BinaryIO) -> int:
    """Write ``batches`` (all of one schema, at least one) to ``out`` as ``fmt`` (csv or
    parquet); returns the number of records written."""
    if fmt is Format.parquet:
        return _parquet(iter(batches), out)
    if fmt is Format.csv:
        return _csv(iter(batches), out)
    raise ValueError(f"{fmt.value} is not written from record batches")


def _parquet(batches: Iterator[pa.RecordBatch], out: BinaryIO) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    first = next(batches)
    written = 0
    # Arrow keeps its own position in a Python stream: a pipe works, no seek is needed.
    with pq.ParquetWriter(pa.PythonFile(out, mode="w"), first.schema) as writer:
        for batch in _chain(first, batches):
            writer.write_batch(batch)
            written += batch.num_rows
    return written


def _csv(batches: Iterator[pa.RecordBatch], out: BinaryIO) -> int:
    import pyarrow.csv as pc  # type: ignore[import-untyped]

    first = csv_batch(next(batches))
    written = 0
    with pc.CSVWriter(out, first.schema) as writer:
        for batch in _chain(first, (csv_batch(b) for b in batches)):
            writer.write_batch(batch)
            written += batch.num_rows
    return written


def csv_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` as CSV can hold it: structs flattened (at every depth), binary as
    base64 text, arrays and maps as JSON text."""
    import pyarrow as pa

    while any(pa.types.is_struct(f.type) for f in batch.schema):
        batch = _flatten(batch)
    columns = []
    fields = []
    for field, array in zip(batch.schema, batch.columns, strict=True):
        if pa.types.is_binary(field.type):
            array = pa.array([None if b is None else base64.b64encode(b).decode() for b in array.to_pylist()])
        elif pa.types.is_list(field.type) or pa.types.is_map(field.type):
            array = pa.array(
                [None if v is None else compact(_plain(v, field.type)) for v in array.to_pylist()]
            )
        columns.append(array)
        fields.append(pa.field(field.name, array.type, field.nullable))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def _flatten(batch: pa.RecordBatch) -> pa.RecordBatch:
    import pyarrow as pa

    columns: list[pa.Array] = []
    fields: list[pa.Field] = []
    for field, array in zip(batch.schema, batch.columns, strict=True):
        if not pa.types.is_struct(field.type):
            columns.append(array)
            fields.append(field)
            continue
        # flatten() folds the struct's own nulls into its children.
        for child, values in zip(field.type, array.flatten(), strict=True):
            columns.append(values)
            fields.append(pa.field(f"{field.name}.{child.name}", child.type, True))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def _plain(value: Any, t: pa.DataType) -> Any:
    """A value of ``to_pylist()`` of Arrow type ``t`` as ``--json`` writes it: a map (a
    list of pairs there) as an object when its keys are hashable."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_map(t):
        pairs = [(k, _plain(v, t.item_type)) for k, v in value]
        try:
            return dict(pairs)
        except TypeError:
            return [list(p) for p in pairs]
    if pa.types.is_list(t):
        return [_plain(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {f.name: _plain(value.get(f.name), f.type) for f in t}
    return value


def _chain(first: pa.RecordBatch, rest: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
