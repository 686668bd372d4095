"""The form in which the daemon stores and serves a state row: ``epochstate.v1.Record``.

Ingest converts each decoded (key, value) once into a serialized ``Record``; the
store keeps those bytes as the version's payload; reads frame the stored bytes
into responses without decoding them. Conversion is deterministic: the same
decoded row always yields the same bytes, which is what makes a pinned read
byte-identical however often it is asked.

The bytes are protobuf wire format written directly (see :mod:`wire`); the
per-row writer on the ingest path is compiled once per schema
(:mod:`record_compiler`). ``tests/test_records.py`` checks both against
protobuf's own message classes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from epochstate.core.sparktypes import StructType
from epochstate.daemon.codec.record_compiler import compile_present
from epochstate.daemon.codec.wire import int64, length_delimited, row_encoder, varint


class RecordEncoder:
    """Serialized ``Record`` messages (key=1, value=2, found=3, partition=4) of one store."""

    def __init__(self, key_schema: StructType, value_schema: StructType) -> None:
        self._key = row_encoder(key_schema)
        self._value = row_encoder(value_schema)
        # The same bytes as reference_present, written by code compiled for the schemas.
        self.present = compile_present(key_schema, value_schema)
        """``present(partition, key, value)``: the ``Record`` of a present row.
        Raises ValueError when a tuple's arity is not its schema's."""

    def reference_present(self, partition: int, key: tuple[Any, ...], value: tuple[Any, ...]) -> bytes:
        """:attr:`present` composed from the per-field closures (what it is checked against)."""
        return b"".join(
            (
                length_delimited(b"\x0a", self._key(key)),
                length_delimited(b"\x12", self._value(value)),
                b"\x18\x01",
                b"\x20" + int64(partition) if partition else b"",
            )
        )

    def absent(self, key: tuple[Any, ...]) -> bytes:
        """The ``Record`` of a key that is not present (only its key field)."""
        return length_delimited(b"\x0a", self._key(key))


class _Frames(dict[int, bytes]):
    """A length-delimited field's tag and length for each record length, made on first use
    (kept for lengths under 16 KiB: bounded, and any longer record dwarfs the framing).
    Filled from any reading thread: two threads missing the same length store equal bytes."""

    def __init__(self, field: int) -> None:
        super().__init__()
        self._tag = bytes([(field << 3) | 2])

    def __missing__(self, length: int) -> bytes:
        frame = self._tag + varint(length)
        if length < 1 << 14:
            self[length] = frame
        return frame


_FRAMES: dict[int, _Frames] = {}


def _frames(field: int) -> _Frames:
    found = _FRAMES.get(field)
    if found is None:
        found = _FRAMES[field] = _Frames(field)
    return found


def response_bytes(
    epoch: int,
    records: Iterable[bytes],
    record_field: int = 2,
    token: bytes = b"",
    query_id: str = "",
    shape_first_epoch: int | None = None,
    job: str = "",
    job_epoch: int | None = None,
) -> bytes:
    """Wire bytes of ``{int64 epoch = 1; repeated Record <record_field>; bytes token = 3;
    string query_id = 4; optional int64 shape_first_epoch = 5; string job = 6;
    optional int64 job_epoch = 7}`` (the read responses share these field numbers)."""
    framed = records if isinstance(records, list) else list(records)
    # Each record's tag and length come from a table and the records are laid between
    # them by slice assignment: no Python-level step per record.
    parts: list[bytes] = [b""] * (2 * len(framed) + 2)
    parts[0], parts[1] = b"\x08", int64(epoch)
    parts[2::2] = map(_frames(record_field).__getitem__, map(len, framed))
    parts[3::2] = framed
    if token:
        parts += (b"\x1a", varint(len(token)), token)
    if query_id:
        encoded = query_id.encode()
        parts += (b"\x22", varint(len(encoded)), encoded)
    if shape_first_epoch is not None:
        parts += (b"\x28", int64(shape_first_epoch))
    if job:
        name = job.encode()
        parts += (b"\x32", varint(len(name)), name)
    if job_epoch is not None:
        parts += (b"\x38", int64(job_epoch))
    return b"".join(parts)


def response_tail(query_id: str, shape_first_epoch: int) -> bytes:
    """What :func:`response_bytes` writes after the records of a response with ``query_id``
    and ``shape_first_epoch`` and no token, job or job epoch: constant per store shape and
    query, so a Get can take it once (:func:`one_record_response`)."""
    encoded = query_id.encode()
    head = b"\x22" + varint(len(encoded)) + encoded if encoded else b""
    return head + b"\x28" + int64(shape_first_epoch)


def one_record_response(epoch: int, record: bytes, tail: bytes) -> bytes:
    """``response_bytes(epoch, [record], query_id=q, shape_first_epoch=s)`` for
    ``tail = response_tail(q, s)``."""
    return b"".join((b"\x08", int64(epoch), b"\x12", varint(len(record)), record, tail))
