"""A whole epoch at once: one Arrow table, or one pandas frame."""

from __future__ import annotations

from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from epochstate.client.arrow.scan import scan_batches
from epochstate.client.client import EpochStateClient


def scan_table(client: EpochStateClient, job: str, **options: Any) -> pa.Table:
    """The batches of :func:`~epochstate.client.arrow.scan.scan_batches` (same options)
    as one table."""
    batches = list(scan_batches(client, job, **options))
    return pa.Table.from_batches(batches, schema=batches[0].schema)


def scan_pandas(client: EpochStateClient, job: str, *, flatten: bool = True, **options: Any) -> Any:
    """:func:`scan_table` as a ``pandas.DataFrame``. ``flatten``: one column per key and
    value field, nested structs too (``key.user``, ``value.count``,
    ``value.first.x``; a repeated field name gives repeated column names, every field
    kept), else ``key`` and ``value`` columns of dicts (pyarrow refuses to convert a
    struct whose field names repeat).

    Raises:
        ImportError: pandas is not installed.
    """
    table = scan_table(client, job, **options)
    return (flatten_structs(table) if flatten else table).to_pandas()


def flatten_structs(table: pa.Table) -> pa.Table:
    """``table`` with every struct column, at every depth, replaced by its fields
    (named ``<column>.<field>``; a struct's null makes its fields null)."""
    while any(pa.types.is_struct(f.type) for f in table.schema):
        table = table.flatten()
    return table
