"""``local://`` reads of a daemon's store in this process: the client's API, selectors and
errors over a secondary of a real store (its writer in this process, standing in for ingest)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from epochstate.client import (
    EpochDamaged,
    EpochNotReady,
    EpochRetired,
    EpochStateClient,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from epochstate.client.arrow import scan_table
from epochstate.daemon.codec import keycodec
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.store.catalog import StoreSchema
from epochstate.daemon.store.descriptors import EpochRecord, IngestNotes, StoreShape
from epochstate.daemon.store.versioned import VersionedStore

KEY = '{"type":"struct","fields":[{"name":"user","type":"string","nullable":true,"metadata":{}}]}'
VALUE = '{"type":"struct","fields":[{"name":"orders","type":"long","nullable":true,"metadata":{}}]}'


def record(epoch: int) -> EpochRecord:
    return EpochRecord(epoch=epoch, committed_at_ms=epoch, ingested_at_ms=epoch, watermark_ms=0)


class Writer:
    """The daemon's side: epochs written as ingest writes them (serialized Records)."""

    def __init__(self, data_dir: Path) -> None:
        self.store = VersionedStore(data_dir / "store")
        self.job = self.store.add_job("orders", "/cp", "q1", "hdfs")
        self.sid = self.store.add_store("orders", 0, "agg", "default", 1, KEY, VALUE).store_id
        schema = StoreSchema.of(StoreShape(0, KEY, VALUE, 1))
        self.records = RecordEncoder(schema.key, schema.value)

    def epoch(self, epoch: int, counts: dict[str, int | None]) -> None:
        changes = {
            keycodec.encode_fields((user,)): None
            if n is None
            else self.records.reference_present(0, (user,), (n,))
            for user, n in counts.items()
        }
        self.store.apply_epoch(self.job, epoch, {self.sid: changes}, record(epoch), fresh=epoch == 0)


def test_local_reads_answer_and_refuse_as_the_daemon(tmp_path: Path) -> None:
    writer = Writer(tmp_path)
    writer.epoch(0, {"u1": 1, "u2": 5})
    writer.epoch(1, {"u1": 2, "u2": None})
    with EpochStateClient(f"local://{tmp_path}") as client:
        assert [j.job for j in client.jobs()] == ["orders"]
        first = client.get("orders", ["u1"], epoch=0)
        assert (first.found, first.value and first.value["orders"], first.query_id) == (True, 1, "q1")
        assert [lk.found for lk in client.multi_get("orders", [["u1"], ["u2"]], epoch=1)] == [True, False]
        assert client.get("orders", ["u1"]).epoch == 1  # latest
        assert [lk.key["user"] for lk in client.scan("orders", epoch=0, page_size=1)] == ["u1", "u2"]
        table = scan_table(client, "orders", epoch=0, page_size=1)  # pages asked for ahead
        assert table.column("value").to_pylist() == [{"orders": 1}, {"orders": 5}]
        feed = [
            (e.epoch, [(c.key["user"], c.type) for c in e.changes])
            for e in client.changes("orders", from_epoch=0)
        ]
        assert feed == [(0, [("u1", "upsert"), ("u2", "upsert")]), (1, [("u1", "upsert"), ("u2", "delete")])]

        # An epoch written after the reader opened is read at once (it catches up first).
        writer.epoch(2, {"u1": 3})
        assert client.get("orders", ["u1"], epoch=2).value == client.get("orders", ["u1"]).value
        with pytest.raises(EpochNotReady):
            client.get("orders", ["u1"], epoch=7)
        with pytest.raises(NotFound):
            client.get("nobody", ["u1"])
        with pytest.raises(InvalidArgument):
            client.get("orders", [1, 2])
        with pytest.raises(PermissionDenied):  # following a job needs the daemon
            client.follow("other", "/elsewhere")

        # A waiting read wakes when the writer ingests its epoch.
        waited: list[int] = []
        reader = threading.Thread(
            target=lambda: waited.append(client.get("orders", ["u1"], at_least=3, timeout=30).epoch)
        )
        reader.start()
        writer.epoch(3, {"u2": 1})
        reader.join()
        assert waited == [3]

        watch = client.watch("orders", after_epoch=1)
        assert [next(watch).epoch, next(watch).epoch] == [2, 3]

        # What ingest notes beyond the epochs (the newest committed, an epoch it retries)
        # refuses and explains as the daemon does.
        writer.store.note(writer.job, IngestNotes(6, {4: "OSError: cannot read 5.delta"}))
        with pytest.raises(EpochDamaged, match=r"cannot read 5\.delta"):
            client.get("orders", ["u1"], epoch=4)
        with pytest.raises(EpochNotReady, match="committed but not ingested yet"):
            client.get("orders", ["u1"], epoch=5)
        assert client.describe("orders", refresh=True).committed_epoch == 6
        writer.store.note(writer.job, IngestNotes(6, {}))

        writer.store.apply_retention(writer.job, 2)
        writer.epoch(4, {"u1": 4})  # read at once: the reader catches up for it
        assert client.get("orders", ["u1"], epoch=4).found
        with pytest.raises(EpochRetired):
            client.get("orders", ["u1"], epoch=0)
    writer.store.close()
