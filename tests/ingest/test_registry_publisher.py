"""The ingest loop's publisher against a real ZooKeeper, with the ingest loop's own types."""

from __future__ import annotations

import json

from kazoo.client import KazooClient

from epochstate.daemon.config import DaemonSettings
from epochstate.daemon.ingest.registry_publisher import RegistryPublisher
from epochstate.daemon.store.catalog import JobEntry, StoreHandle
from epochstate.daemon.store.descriptors import (
    EpochRecord,
    JobDescriptor,
    JobProgress,
    SourceRange,
    StoreDescriptor,
)
from tests.fixtures.zookeeper import SESSION_TIMEOUT, eventually

SCHEMA = json.dumps(
    {"type": "struct", "fields": [{"name": "k", "type": "long", "nullable": True, "metadata": {}}]}
)


def epoch(number: int) -> EpochRecord:
    return EpochRecord(
        epoch=number,
        committed_at_ms=1000 + number,
        ingested_at_ms=5000 + number,
        watermark_ms=0,
        sources=(SourceRange("source-0", f'{{"t":{{"0":{number}}}}}', f'{{"t":{{"0":{number + 1}}}}}'),),
    )


def test_publisher_announces_node_job_epochs_and_retention(zk_connect: str, zk_client: KazooClient) -> None:
    settings = DaemonSettings(
        node="node-a",
        listen="127.0.0.1:7070",
        advertise="10.0.0.7:7070",
        zookeeper=zk_connect,
        zookeeper_session_timeout=SESSION_TIMEOUT,
    )
    publisher = RegistryPublisher.connect(settings, version="9.9.9")
    entry = JobEntry(JobDescriptor("orders", 1, "/checkpoints/orders", "q-1"))
    registry = publisher.registry
    try:
        publisher.node_serving(settings.advertised)
        publisher.job_followed(entry)
        store = StoreDescriptor(1, "orders", 0, "stateStoreSave", "default", 2, SCHEMA, SCHEMA)
        entry.stores = {(0, "default"): StoreHandle.of(store)}
        for number in (3, 4, 5):
            entry.progress = JobProgress(newest=number, oldest=3)
            publisher.epoch_ingested(entry, epoch(number))
        entry.progress = JobProgress(newest=5, oldest=4)
        publisher.retention_moved(entry)
        assert registry.flush(timeout=10)

        assert registry.nodes()["node-a"]["address"] == "10.0.0.7:7070"
        assert registry.get_job("orders") == {
            "checkpoint": "/checkpoints/orders",
            "query_id": "q-1",
            "operators": [
                {
                    "id": 0,
                    "name": "stateStoreSave",
                    "stores": [{"name": "default", "partitions": 2, "layouts": [[0, 2]]}],
                }
            ],
        }
        assert registry.list_epochs("orders") == [4, 5]
        assert registry.get_epoch("orders", 5) == {
            "committed_at_ms": 1005,
            "watermark_ms": 0,
            "sources": [{"source": "source-0", "start": {"t": {"0": 5}}, "end": {"t": {"0": 6}}}],
            "query_id": "q-1",
        }
        replica = registry.replicas("orders")["node-a"]
        assert (replica["newest_epoch"], replica["oldest_epoch"]) == (5, 4)
    finally:
        publisher.close()
    assert eventually(lambda: zk_client.get_children("/epochstate/nodes") == [], 5)
