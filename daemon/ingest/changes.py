"""The store changes one store contributes to an epoch, read three ways.

* ``DELTA``: the version's own changes (a delta or changelog); when that file is
  gone, the difference between the full state and the newest ingested one.
* ``FULL``: every key present (the job has no versions yet).
* ``REBASE``: the difference between the full state and the newest ingested
  state, including removals: after epochs were skipped, the epoch written must be
  a complete version, so no read at it or later can see a version the skipped
  epochs changed.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterator

from epochstate.daemon.ingest.catalog import StoreSchema
from epochstate.daemon.records import RecordEncoder
from epochstate.daemon.sources.errors import MissingStateFile
from epochstate.daemon.sources.readers import StoreReader
from epochstate.daemon.store import keycodec
from epochstate.daemon.store.versioned import Change, StoreView

log = logging.getLogger(__name__)

_PAGE = 10_000


class ReadMode(enum.Enum):
    DELTA = "delta"
    FULL = "full"
    REBASE = "rebase"


def store_changes(
    reader: StoreReader,
    encoder: RecordEncoder,
    store_id: int,
    version: int,
    mode: ReadMode,
    view: StoreView,
    newest: int,
    newest_schema: StoreSchema,
) -> Iterator[Change]:
    """The changes that make the store's ingested state equal its state at ``version``.

    ``newest`` is the newest ingested epoch (read through ``view``) and
    ``newest_schema`` the schema its keys were written with.

    Raises:
        SourceError: the files needed cannot be read (nothing is yielded before a
            missing delta is found).
    """
    encode = encoder.present
    if mode is ReadMode.FULL:
        for c in reader.full_state(version):
            assert c.value is not None
            yield Change(store_id, c.key, encode(c.partition, c.key, c.value))
        return
    if mode is ReadMode.DELTA:
        try:
            delta = list(reader.changes(version))
        except MissingStateFile as error:
            log.info("store %d: no delta for version %d (%s); diffing full states", store_id, version, error)
        else:
            for c in delta:
                payload = None if c.value is None else encode(c.partition, c.key, c.value)
                yield Change(store_id, c.key, payload)
            return
    yield from _rebase(reader, encoder, store_id, version, view, newest, newest_schema)


def _rebase(
    reader: StoreReader,
    encoder: RecordEncoder,
    store_id: int,
    version: int,
    view: StoreView,
    newest: int,
    newest_schema: StoreSchema,
) -> Iterator[Change]:
    current: dict[bytes, bytes] = {}
    after: bytes | None = None
    while page := view.scan(store_id, newest, b"", None, _PAGE, after):
        current.update((v.encoded_key, v.payload) for v in page)
        after = page[-1].encoded_key
    encode = encoder.present
    for c in reader.full_state(version):
        assert c.value is not None
        payload = encode(c.partition, c.key, c.value)
        if current.pop(keycodec.encode_fields(c.key), None) != payload:
            yield Change(store_id, c.key, payload)
    for encoded in current:
        yield Change(store_id, newest_schema.decode_key(encoded), None)
