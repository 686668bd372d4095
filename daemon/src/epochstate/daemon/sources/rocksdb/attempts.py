"""Whether a snapshot is the committed attempt's, decided from content (format 1).

Maintenance uploads the snapshot a store instance took when it committed a
version, some time later. When a batch fails after its stores committed (e.g. in
the sink) and runs again, the re-run rewrites ``<v>.changelog``, but a snapshot of
the failed attempt may stay, or be uploaded after the re-run's files (from another
executor). The changelog is the committed attempt's. Modification times cannot
tell the two apart (object stores keep whole seconds, and the upload comes late
anyway); the files' content can:

* **values**: every key the changelog writes must hold, in the snapshot, the value
  of its last write there: absent after a delete, the put's value after a put, and
  after list merges a value ending with the merged operands;
* **sequence numbers**: Spark writes a version's puts, deletes and merges to
  RocksDB in changelog order, one sequence number each, and nothing else, so they
  are the snapshot's last ``n`` sequence numbers (``n`` records in the changelog).
  Every entry the snapshot's table files keep above ``last - n`` must be the
  changelog's record at that position: the same key, and for a put or delete the
  same value (a merge may have been folded into a put by a flush).

A failed attempt that wrote other values fails the first; one that wrote other
keys, or another number of records, fails the second as long as any of its
entries keeps its sequence number (compaction to the last level zeroes them; the
first still checks every key the committed attempt wrote).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from epochstate.daemon.sources.rocksdb.changelog import DELETE, MERGE, PUT, ChangelogRecord
from epochstate.daemon.sources.rocksdb.manifest import Manifest, ManifestFormatError, parse_manifest
from epochstate.daemon.sources.rocksdb.snapshot import SnapshotReader
from epochstate.daemon.sources.rocksdb.sst import SstFormatError, sst_writes_after

RawState = dict[bytes, bytes]


def as_records(rows: Iterable[tuple[bytes, bytes | None]]) -> list[ChangelogRecord]:
    """Untyped changelog rows (value ``None``: a delete) as records."""
    return [ChangelogRecord(DELETE if v is None else PUT, k, v) for k, v in rows]


def value_disagreement(state: RawState, records: Sequence[ChangelogRecord], delimiter: bytes) -> str | None:
    """The first key whose value in ``state`` is not what ``records`` leave it with,
    described; ``None`` when every key agrees."""
    exact: dict[bytes, bytes | None] = {}
    suffix: dict[bytes, bytes] = {}  # merges onto a value the records do not show
    for record in records:
        key = record.key
        if record.op != MERGE:
            exact[key] = record.value
            suffix.pop(key, None)
            continue
        operand = record.value or b""
        if key in exact:
            old = exact[key]
            exact[key] = operand if old is None else old + delimiter + operand
        else:
            suffix[key] = suffix[key] + delimiter + operand if key in suffix else operand
    for key, value in exact.items():
        if state.get(key) != value:
            return f"key {key[:40]!r} holds another value than the changelog's last write"
    for key, tail in suffix.items():
        held = state.get(key)
        if held is None or not held.endswith(tail):
            return f"key {key[:40]!r} does not end with the changelog's list merges"
    return None


def sequence_disagreement(
    manifest: Manifest, table_files: dict[str, Path], records: Sequence[ChangelogRecord]
) -> str | None:
    """The first entry above the snapshot's last ``len(records)`` sequence numbers
    that is not the changelog's record at its position, described; ``None`` when all
    agree (or a table file is in a layout the reader does not take). ``table_files``
    are local copies by local name (``000012.sst``).
    """
    floor = manifest.last_sequence - len(records)
    if floor < 0:
        return f"{manifest.last_sequence} writes in all, fewer than the changelog's {len(records)}"
    for live in manifest.files.values():
        if live.largest_sequence <= floor:
            continue
        path = table_files.get(live.local_name)
        if path is None:
            continue
        try:
            writes = sst_writes_after(path.read_bytes(), live.smallest, live.largest, floor)
        except SstFormatError:
            return None
        for key, sequence, value in zip(writes.keys, writes.sequences, writes.values, strict=True):
            index = sequence - floor - 1
            if index >= len(records):
                return f"sequence number {sequence} is past the changelog's {len(records)} writes"
            record = records[index]
            if record.key != key:
                return f"sequence number {sequence} wrote another key than the changelog's record {index}"
            if (record.op == PUT and value != record.value) or (record.op == DELETE and value is not None):
                return f"sequence number {sequence} wrote another value than the changelog's record {index}"
    return None


def snapshot_sequence_disagreement(
    snapshot: SnapshotReader, records: Sequence[ChangelogRecord]
) -> str | None:
    """:func:`sequence_disagreement` of an opened snapshot (its extracted MANIFEST and
    local table files); ``None`` too for a MANIFEST the reader does not take (the
    values then decide alone)."""
    try:
        current = snapshot.extracted("CURRENT").read_text(encoding="ascii").strip()
        manifest = parse_manifest(snapshot.extracted(current).read_bytes())
    except (OSError, UnicodeDecodeError, ManifestFormatError):
        return None
    files = {f.local_name: snapshot.extracted(f.local_name) for f in snapshot.metadata.files}
    return sequence_disagreement(manifest, files, records)
