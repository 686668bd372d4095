"""Whole epochs of a store as Arrow tables, record batches or pandas frames.

Needs the ``arrow`` extra (``pip install 'epochstate[arrow]'``: pyarrow, pandas);
importing :mod:`epochstate.client` does not need it, importing this module does.

>>> from epochstate.client import EpochStateClient
>>> from epochstate.client.arrow import scan_table
>>> table = scan_table(EpochStateClient("localhost:7070"), "orders", epoch=12)  # doctest: +SKIP

The columns are those of Spark's own reader (``spark.read.format("statestore")``):
``key`` and ``value`` structs with the store's schemas and ``partition_id``; the
types are in :mod:`epochstate.client.arrow.types`. The schema's metadata names
the epoch (``epochstate.epoch``) and query (``epochstate.query_id``) that answered.
"""

from __future__ import annotations

try:
    import pyarrow  # type: ignore[import-untyped]  # noqa: F401
except ImportError as missing:
    raise ImportError(
        "epochstate.client.arrow needs pyarrow, which is not installed: "
        "pip install 'epochstate[arrow]' (pyarrow and pandas)",
        name=missing.name,
    ) from missing

from epochstate.client.arrow.batches import Change, changes_batch, changes_batches, state_batch
from epochstate.client.arrow.changes import changes_batches_of
from epochstate.client.arrow.frames import flatten_structs, scan_pandas, scan_table
from epochstate.client.arrow.scan import lookups_batch, scan_batches
from epochstate.client.arrow.types import arrow_type, changes_schema, state_schema

__all__ = [
    "Change",
    "arrow_type",
    "changes_batch",
    "changes_batches",
    "changes_batches_of",
    "changes_schema",
    "flatten_structs",
    "lookups_batch",
    "scan_batches",
    "scan_pandas",
    "scan_table",
    "state_batch",
    "state_schema",
]
