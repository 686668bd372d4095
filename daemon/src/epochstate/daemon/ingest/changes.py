"""The store changes one store contributes to an epoch, read three ways.

* ``DELTA``: the version's own changes (a delta or changelog); when that file is
  gone, the difference between the full state and the newest ingested one.
* ``FULL``: every key present (the job has no versions yet).
* ``REBASE``: the difference between the full state and the newest ingested
  state, including removals: after epochs were skipped, the epoch written must be
  a complete version, so no read at it or later can see a version the skipped
  epochs changed.

Readers that hand out raw rows (:class:`RawStoreReader`: the HDFS-backed and
RocksDB providers) are transcoded straight into store rows; others (state
variables) are decoded into values first and encoded from those.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

from epochstate.core.sparktypes import StructType
from epochstate.daemon.codec.keycodec import encode_fields
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.ingest.transcoder import Transcoder
from epochstate.daemon.sources.changes import RawRows, RowFraming
from epochstate.daemon.sources.errors import CorruptRow, CorruptStateFile, MissingStateFile
from epochstate.daemon.sources.readers import StoreReader
from epochstate.daemon.store.placement import StoreChanges
from epochstate.daemon.store.view import StoreView

log = logging.getLogger(__name__)

_PAGE = 10_000


class ReadMode(enum.Enum):
    DELTA = "delta"
    FULL = "full"
    REBASE = "rebase"


@runtime_checkable
class RawStoreReader(Protocol):
    """A :class:`StoreReader` that also hands out its rows undecoded, as
    :class:`RawRows` of the given framing, with the decoders that define them."""

    framing: RowFraming

    def decode_key(self, raw: bytes) -> tuple[object, ...]: ...

    def decode_value(self, raw: bytes) -> tuple[object, ...]: ...

    def raw_changes(self, version: int) -> list[RawRows]: ...

    def raw_state(self, version: int) -> Iterator[RawRows]: ...


class StoreCodec:
    """How one store's rows (at one schema) become store keys and payloads."""

    def __init__(self, reader: StoreReader, key_schema: StructType, value_schema: StructType) -> None:
        self.encoder = RecordEncoder(key_schema, value_schema)
        self.transcoder: Transcoder | None = None
        if isinstance(reader, RawStoreReader):
            self.transcoder = Transcoder(
                key_schema, value_schema, reader.framing, reader.decode_key, reader.decode_value
            )


def store_changes(
    reader: StoreReader,
    codec: StoreCodec,
    version: int,
    mode: ReadMode,
    view: StoreView,
    store_id: int,
    newest: int,
) -> StoreChanges:
    """The changes (encoded key -> payload, ``None``: removed) that make the store's
    ingested state equal its state at ``version``. ``newest`` is the newest ingested
    epoch (read through ``view``).

    Raises:
        SourceError: the files needed cannot be read (a missing delta is found
            before any row is transcoded).
    """
    if mode is ReadMode.DELTA:
        try:
            return _delta(reader, codec, version)
        except MissingStateFile as error:
            log.info("store %d: no delta for version %d (%s); diffing full states", store_id, version, error)
    out: StoreChanges = {}
    if mode is ReadMode.FULL:
        if codec.transcoder is not None:
            assert isinstance(reader, RawStoreReader)
            transcode = codec.transcoder.rows
            for partition, raw, path in reader.raw_state(version):
                with _naming(path):
                    transcode(partition, raw, out)
            return out
        for rows, where in _full(reader, codec, version):
            with _naming(where):
                for key, payload in rows:
                    out[key] = payload
        return out
    current = _ingested(view, store_id, newest)
    for rows, where in _full(reader, codec, version):
        with _naming(where):
            for key, payload in rows:
                if current.pop(key, None) != payload:
                    out[key] = payload
    for key in current:
        out[key] = None
    return out


def _delta(reader: StoreReader, codec: StoreCodec, version: int) -> StoreChanges:
    out: StoreChanges = {}
    transcoder = codec.transcoder
    if transcoder is None:
        present = codec.encoder.present
        for c in list(reader.changes(version)):
            out[encode_fields(c.key)] = None if c.value is None else present(c.partition, c.key, c.value)
        return out
    assert isinstance(reader, RawStoreReader)
    transcode = transcoder.rows
    for partition, rows, where in reader.raw_changes(version):
        with _naming(where):
            transcode(partition, rows, out)
    return out


def _full(
    reader: StoreReader, codec: StoreCodec, version: int
) -> Iterator[tuple[Iterable[tuple[bytes, bytes]], object]]:
    """Per partition: the (encoded key, payload) of every present row, and where from."""
    transcoder = codec.transcoder
    if transcoder is None:
        present = codec.encoder.present
        rows = (
            (encode_fields(c.key), present(c.partition, c.key, c.value))
            for c in reader.full_state(version)
            if c.value is not None
        )
        yield rows, None
        return
    assert isinstance(reader, RawStoreReader)
    row = transcoder.row
    for partition, raw, where in reader.raw_state(version):
        # Values of a full state are never None.
        yield (row(partition, k, v) for k, v in raw), where  # type: ignore[arg-type]


def _ingested(view: StoreView, store_id: int, newest: int) -> dict[bytes, bytes | None]:
    current: dict[bytes, bytes | None] = {}
    after: bytes | None = None
    while page := view.scan(store_id, newest, b"", None, _PAGE, after):
        current.update((v.encoded_key, v.payload) for v in page)
        after = page[-1].encoded_key
    return current


class _naming:
    """Turns a CorruptRow raised inside into CorruptStateFile naming ``where``."""

    def __init__(self, where: object) -> None:
        self._where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, err: BaseException | None, tb: object) -> None:
        if isinstance(err, CorruptRow):
            raise CorruptStateFile(f"{self._where}: {err}") from err
