"""The fuzz targets: one per parser of a file Spark writes into a checkpoint.

Each target takes arbitrary bytes and feeds them to the daemon's parser of one kind
of file, as the daemon would (same entry points, same decoders). The property
every target checks: the parser returns, or raises one of the project's domain
errors (:class:`~epochstate.core.errors.EpochStateError` and its subclasses:
``CorruptStateFile``, ``CorruptRow``, ``UnsupportedCheckpoint``,
``SstFormatError``, ...). Any other exception escapes :func:`check` and is a
finding; so are a hang and unbounded memory, which the runner
(:mod:`tests.fuzz.run`) bounds per input.

Checksums would stop a mutating fuzzer at the first block, so the targets whose
format has them (LZ4 block streams, SST blocks) parse each input twice: as given,
and with every checksum that can be located recomputed, which lets mutations
reach the decoders behind the checksums.

Inputs that pick a schema (``unsafe_row``, ``avro``) start with a selector byte;
the schemas are real Spark schemas kept in ``tests/fuzz/schemas/`` (written by
:mod:`tests.fuzz.seeds`, like the seed corpus in ``tests/fuzz/corpus/``).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lz4.block
import xxhash

from epochstate.core.checkpoint.log import QueryLog
from epochstate.core.errors import EpochStateError
from epochstate.core.sparktypes import StructType, parse_struct, type_to_simple_string
from epochstate.core.storage.location import open_location
from epochstate.daemon.codec import keycodec
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.ingest import registry_publisher
from epochstate.daemon.ingest.transcoder import Transcoder
from epochstate.daemon.server import positions
from epochstate.daemon.sources.changes import RowFraming
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.checkpoint.schemafile import (
    NO_PREFIX,
    ColumnFamilySchema,
    decode_modified_utf8,
    parse_column_family_schemas,
    parse_schema_file,
)
from epochstate.daemon.sources.rocksdb import sst
from epochstate.daemon.sources.rocksdb.changelog import iter_changelog, iter_changelog_ops
from epochstate.daemon.sources.rocksdb.manifest import parse_manifest, read_snapshot_manifest
from epochstate.daemon.sources.rocksdb.rows import StateRowDecoder
from epochstate.daemon.sources.rocksdb.snapshot import (
    SnapshotReader,
    parse_snapshot_metadata,
    read_snapshot_metadata,
)
from epochstate.daemon.sources.rocksdb.store_files import RawState, apply_record
from epochstate.daemon.sources.rows import lz4stream
from epochstate.daemon.sources.rows.avro import AvroStateDecoder
from epochstate.daemon.sources.rows.statefile import iter_records
from epochstate.daemon.sources.rows.unsaferow import RowDecoder
from epochstate.daemon.sources.tws.reader import split_list

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
SCHEMAS = HERE / "schemas"
# Where the targets write files (the runner sets it and removes it afterwards).
SCRATCH_ENV = "EPOCHSTATE_FUZZ_SCRATCH"


@dataclass(frozen=True)
class Target:
    """A fuzz target: ``run`` parses one input; ``about`` says what it covers."""

    name: str
    run: Callable[[bytes], None]
    about: str


class Finding(AssertionError):
    """A property of a target other than "raises only domain errors" does not hold."""


def check(target: Target, data: bytes) -> None:
    """Run ``target`` on ``data``; a domain error is an accepted outcome, any other
    exception propagates (it is a finding)."""
    with suppress(EpochStateError):
        target.run(data)


def _each(*calls: Callable[[], Any]) -> None:
    """Run every call, each allowed to fail with a domain error, so one rejection
    does not hide the parsers after it."""
    for call in calls:
        with suppress(EpochStateError):
            call()


# -- scratch files ------------------------------------------------------------------


@functools.cache
def _scratch() -> Path:
    """A directory of this process for targets that parse files on disk (in memory
    where the system has a tmpfs: removing directories on disk costs milliseconds)."""
    chosen = os.environ.get(SCRATCH_ENV)
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)
    made = Path(tempfile.mkdtemp(prefix="epochstate-fuzz-", dir=memory_scratch_root()))
    atexit.register(shutil.rmtree, made, ignore_errors=True)  # a normal exit (pytest) cleans up
    return made


# An input of MAX_INPUT_BYTES can expand to ~64 MiB (deflate), and a container's
# /dev/shm is often just 64 MiB: below this much free, scratch files go to disk.
_MEMORY_SCRATCH_FREE_BYTES = 512 << 20


def memory_scratch_root() -> Path | None:
    """``/dev/shm`` where the system has it with room to spare, else None (the
    default temporary directory)."""
    memory = Path("/dev/shm")
    if not memory.is_dir() or shutil.disk_usage(memory).free < _MEMORY_SCRATCH_FREE_BYTES:
        return None
    return memory


# -- checksum fix-ups -------------------------------------------------------------------


def fix_lz4_checksums(data: bytes) -> bytes:
    """``data`` with the checksum of every LZ4 block that decodes set to its content's."""
    out = bytearray(data)
    pos = 0
    header = lz4stream.HEADER
    while pos + header.size <= len(out):
        magic, token, clen, dlen, _ = header.unpack_from(out, pos)
        start, end = pos + header.size, pos + header.size + clen
        if magic != lz4stream.MAGIC or clen < 0 or dlen < 0 or end > len(out) or dlen > 1 << 25:
            break
        if dlen:
            try:
                block = (
                    bytes(out[start:end])
                    if token & 0xF0 == lz4stream.METHOD_RAW
                    else lz4.block.decompress(bytes(out[start:end]), uncompressed_size=dlen)
                )
            except lz4.block.LZ4BlockError:
                break
            checksum = xxhash.xxh32_intdigest(block, seed=lz4stream.CHECKSUM_SEED) & lz4stream.CHECKSUM_MASK
            struct.pack_into("<I", out, pos + 17, checksum)
        pos = end
    return bytes(out)


def fix_sst_checksums(data: bytes) -> bytes:
    """``data`` with the trailer checksum of every block the footer, the metaindex and
    the index reach set to the block's (in the footer's checksum type)."""
    out = bytearray(data)

    def fix(offset: int, size: int, kind: int) -> None:
        end = offset + size
        if offset >= 0 and end + 5 <= len(out):
            stored, compression = bytes(out[offset:end]), out[end]
            struct.pack_into("<I", out, end + 1, sst._checksum(kind, stored, compression))

    try:
        footer = sst._footer(bytes(out))
        fix(*footer.metaindex_handle, footer.checksum)
        fix(*footer.index_handle, footer.checksum)
        for offset, size in sst._data_handles(bytes(out), footer):
            fix(offset, size, footer.checksum)
        metaindex = dict(sst._entries(sst._block(bytes(out), *footer.metaindex_handle, footer.checksum)))
        handle = metaindex.get(b"rocksdb.properties", b"")
        offset, pos = sst._varint(handle, 0)
        size, _ = sst._varint(handle, pos)
        fix(offset, size, footer.checksum)
    except (EpochStateError, IndexError, struct.error):
        pass
    return bytes(out)


# -- schemas ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RowSchemas:
    """A store's key and value schemas and its prefix-scan key columns (RocksDB)."""

    key: StructType
    value: StructType
    num_cols_prefix_key: int


@functools.cache
def row_schemas() -> tuple[RowSchemas, ...]:
    """The schemas of the stores the seed queries wrote (``schemas/rows.json``)."""
    listed = json.loads((SCHEMAS / "rows.json").read_text())
    return tuple(
        RowSchemas(parse_struct(s["key"]), parse_struct(s["value"]), int(s["numColsPrefixKey"]))
        for s in listed
    )


@functools.cache
def avro_families() -> tuple[ColumnFamilySchema, ...]:
    """The column families of the seed transformWithState query (Avro rows), then
    one family per store of :func:`row_schemas` (every type Avro rows may hold)."""
    real = parse_column_family_schemas((SCHEMAS / "tws_avro.schema").read_bytes())
    synthetic = tuple(
        ColumnFamilySchema(f"rows{i}", s.key, s.value, NO_PREFIX) for i, s in enumerate(row_schemas())
    )
    return real + synthetic


@functools.cache
def _avro_decoder(index: int) -> AvroStateDecoder | None:
    try:
        return AvroStateDecoder(avro_families()[index])
    except EpochStateError:
        return None  # a type Spark never writes in Avro


@functools.cache
def _row_codecs(
    index: int, rocksdb: bool
) -> tuple[Callable[[bytes], Any], Callable[[bytes], Any], Transcoder]:
    schemas = row_schemas()[index]
    if rocksdb:
        keys = StateRowDecoder(schemas.key, schemas.num_cols_prefix_key).decode
        values = StateRowDecoder(schemas.value).decode
        framing = RowFraming(version_byte=True, num_cols_prefix_key=schemas.num_cols_prefix_key)
    else:
        keys, values, framing = RowDecoder(schemas.key).decode, RowDecoder(schemas.value).decode, RowFraming()
    return keys, values, Transcoder(schemas.key, schemas.value, framing, keys, values)


# -- targets -----------------------------------------------------------------------------


def _as_given_and_fixed(data: bytes, fix: Callable[[bytes], bytes], parse: Callable[[bytes], Any]) -> None:
    fixed = fix(data)
    _each(*(functools.partial(parse, variant) for variant in ((data, fixed) if fixed != data else (data,))))


def lz4_block_stream(data: bytes) -> None:
    """A ``.delta``/``.snapshot``/``.changelog`` file as stored: LZ4 blocks, then state records."""

    def parse(stream: bytes) -> None:
        content = lz4stream.read_lz4_block_stream(stream, "<fuzz>")
        _each(
            lambda: list(iter_records(content, "<fuzz>", allow_removals=True)),
            lambda: list(iter_records(content, "<fuzz>", allow_removals=False)),
        )

    _as_given_and_fixed(data, fix_lz4_checksums, parse)


def state_records(data: bytes) -> None:
    """The decompressed records of an HDFS-backed delta or snapshot file."""
    _each(
        lambda: list(iter_records(data, "<fuzz>", allow_removals=True)),
        lambda: list(iter_records(data, "<fuzz>", allow_removals=False)),
    )


def changelog(data: bytes) -> None:
    """A decompressed RocksDB changelog, framings v1 to v4 (lineage, typed records, merges)."""

    def replay() -> None:
        state: RawState = {}
        for record in iter_changelog_ops(data, "<fuzz>")[1]:
            apply_record(state, record)
        for value in state.values():
            with suppress(EpochStateError):
                split_list(value)

    _each(replay, lambda: list(iter_changelog(data, "<fuzz>")[1]))


def unsafe_row(data: bytes) -> None:
    """A key and a value UnsafeRow of a real store's schemas: ``selector | uint16 key
    size | key | value``; the selector picks the schemas and the provider's framing
    (HDFS: bare rows; RocksDB: a version byte, prefix-scan keys split in two).

    Besides the decoders, the ingest transcoder (generated code) must agree with
    them: the same encoded key and ``Record`` bytes when the rows decode, a
    ``CorruptRow`` when they do not.
    """
    if len(data) < 3:
        return
    index = (data[0] >> 1) % len(row_schemas())
    rocksdb = bool(data[0] & 1)
    (size,) = struct.unpack_from(">H", data, 1)
    raw_key, raw_value = data[3 : 3 + size], data[3 + size :]
    decode_key, decode_value, transcoder = _row_codecs(index, rocksdb)
    schemas = row_schemas()[index]
    try:
        key, value = decode_key(raw_key), decode_value(raw_value)
    except EpochStateError:
        key = value = None
    try:
        transcoded = transcoder.row(7, raw_key, raw_value)
    except EpochStateError:
        if key is not None:
            raise Finding("the transcoder refused rows the decoders read") from None
        transcoded = None
    if key is None:
        if transcoded is not None:
            raise Finding("the transcoder read rows the decoders refuse")
        return
    expected = keycodec.encode_fields(key), RecordEncoder(schemas.key, schemas.value).present(7, key, value)
    if transcoded != expected:
        raise Finding(
            f"the transcoder's bytes differ from the reference path: {transcoded!r} != {expected!r}"
        )
    out: dict[bytes, bytes | None] = {}
    transcoder.rows(7, [(raw_key, raw_value), (raw_key, None)], out)
    if out != {expected[0]: None} or transcoder.key(raw_key) != expected[0]:
        raise Finding("the transcoder's loop disagrees with its single-row path")


def avro(data: bytes) -> None:
    """A key or value in the Avro state encoding: ``selector | row``; the selector
    picks the column family and key or value."""
    if not data:
        return
    index = (data[0] >> 1) % len(avro_families())
    decoder = _avro_decoder(index)
    if decoder is not None:
        (decoder.value if data[0] & 1 else decoder.key)(data[1:])


def snapshot_zip(data: bytes) -> None:
    """A RocksDB snapshot ``<version>.zip``: its ``metadata``, its MANIFEST, and the
    extraction before RocksDB opens it (RocksDB's own parsing is not fuzzed)."""
    path = _scratch() / "1.zip"
    path.write_bytes(data)
    location = open_location(path)
    extracted = _scratch() / "extracted"

    def extract() -> None:
        shutil.rmtree(extracted, ignore_errors=True)
        extracted.mkdir()
        SnapshotReader(location)._extract(str(extracted))

    try:
        _each(
            lambda: read_snapshot_metadata(location),
            lambda: read_snapshot_manifest(location),
            extract,
        )
    finally:
        shutil.rmtree(extracted, ignore_errors=True)


def sst_file(data: bytes) -> None:
    """A RocksDB table file (``.sst``) as the snapshot diff reads it."""

    def parse(table: bytes) -> None:
        _each(
            lambda: sst.sst_writes_after(table, b"", b"", 0),
            lambda: sst.sst_writes_after(table, b"", b"\xff", 1 << 40),
        )

    _as_given_and_fixed(data, fix_sst_checksums, parse)


def manifest(data: bytes) -> None:
    """A RocksDB ``MANIFEST-<n>`` log of version edits."""
    parse_manifest(data)


def schema_file(data: bytes) -> None:
    """A state schema file: ``_metadata/schema`` (v1, v2) or ``_stateSchema/...`` (v3)."""
    _each(
        lambda: parse_schema_file(data, "<fuzz>"),
        lambda: parse_column_family_schemas(data, "<fuzz>"),
        lambda: decode_modified_utf8(data, "<fuzz>"),
    )


def schema_codecs(data: bytes) -> None:
    """What the daemon compiles from the schemas a schema file holds (generated code):
    the UnsafeRow decoders of both providers, the Avro decoder, the ingest
    transcoder and the record encoder. Slow (Python's ``compile``) next to the
    parsers, so a target of its own; same inputs as ``schema_file``."""

    def v1_or_v2() -> None:
        key, value = parse_schema_file(data, "<fuzz>")
        _compile(key, value, prefix=min(1, len(key.fields)))

    def v3() -> None:
        for family in parse_column_family_schemas(data, "<fuzz>")[:2]:
            _each(functools.partial(AvroStateDecoder, family))
            _compile(family.key_schema, family.value_schema, prefix=family.num_cols_prefix_key)

    _each(v1_or_v2, v3)


def _compile(key: StructType, value: StructType, prefix: int) -> None:
    type_to_simple_string(key)
    type_to_simple_string(value)
    Transcoder(key, value, RowFraming(), RowDecoder(key).decode, RowDecoder(value).decode)
    if 0 <= prefix <= len(key.fields):
        rocksdb_keys = StateRowDecoder(key, prefix).decode
        Transcoder(key, value, RowFraming(True, prefix), rocksdb_keys, StateRowDecoder(value).decode)
    RecordEncoder(key, value)


def checkpoint_log(data: bytes) -> None:
    """A checkpoint's text files, read through the checkpoint readers: the query's
    ``metadata``, ``offsets/<n>``, ``commits/<n>``, an operator's
    ``_metadata/metadata`` (v1) and ``_metadata/v2/<n>``, a snapshot's ``metadata``;
    and each line as a source's offsets, as the server (positions for ``covers``)
    and the registry publisher read them."""
    root = _scratch() / "checkpoint"
    names = [
        *("metadata", "offsets/0", "offsets/1", "commits/0", "commits/1"),
        *("state/0/_metadata/metadata", "state/1/_metadata/v2/0"),
    ]
    for name in names:  # the same files every time, overwritten
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "state/0/0").mkdir(exist_ok=True)
    checkpoint = Checkpoint(root)
    log = QueryLog(root)
    text = data.decode("utf-8", "replace")
    _each(
        log.query_id,
        lambda: log.commit_entry(1),
        lambda: log.epoch_log(1),
        lambda: log.source_positions(1),
        checkpoint.operators,
        lambda: checkpoint.provider_kind(1),
        lambda: parse_snapshot_metadata(text, "<fuzz>"),
    )
    for line in text.splitlines():  # an offset log line: a source's offsets
        positions._parse(line)
        registry_publisher._offsets(line)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("lz4_block_stream", lz4_block_stream, "HDFS delta/snapshot and changelog files as stored"),
        Target("state_records", state_records, "decompressed HDFS delta/snapshot records"),
        Target("changelog", changelog, "decompressed RocksDB changelogs v1-v4"),
        Target("unsafe_row", unsafe_row, "UnsafeRow keys and values, and the ingest transcoder"),
        Target("avro", avro, "Avro-encoded transformWithState rows"),
        Target("snapshot_zip", snapshot_zip, "RocksDB snapshot zips: metadata, MANIFEST, extraction"),
        Target("sst", sst_file, "RocksDB table files"),
        Target("manifest", manifest, "RocksDB MANIFEST logs"),
        Target("schema_file", schema_file, "state schema files v1-v3"),
        Target("schema_codecs", schema_codecs, "decoders and encoders compiled from schema files"),
        Target("checkpoint_log", checkpoint_log, "query metadata, offset and commit logs, operator metadata"),
    )
}


def inputs(target: str) -> Iterator[tuple[Path, bytes]]:
    """The seed corpus and the regression inputs of ``target``, by path."""
    for directory in (CORPUS / target, REGRESSIONS / target):
        if directory.is_dir():
            for path in sorted(directory.iterdir()):
                if path.is_file():
                    yield path, path.read_bytes()
