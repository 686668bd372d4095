"""The ingest loop's announcements, written to the registry (an ``EpochPublisher``).

Never blocks ingest: the registry is created with ``wait_timeout=0``, so every
call only records what must be in ZooKeeper and returns; the registry's sync
thread writes it as soon as ZooKeeper is reachable. Registry errors are logged,
not raised, so that ingest goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from epochstate.core import jsontext
from epochstate.core.zookeeper.auth import load_auth
from epochstate.core.zookeeper.client import new_client
from epochstate.core.zookeeper.errors import RegistryError
from epochstate.core.zookeeper.records import JsonObject
from epochstate.daemon.config import DaemonSettings
from epochstate.daemon.registry.registry import Registry
from epochstate.daemon.store.catalog import JobEntry
from epochstate.daemon.store.descriptors import EpochRecord

log = logging.getLogger(__name__)

CLOSE_FLUSH_SECONDS = 2.0


class RegistryPublisher:
    """Announces followed jobs, ingested epochs and retention of this node."""

    def __init__(self, registry: Registry, version: str) -> None:
        self.registry = registry
        self.version = version
        self._jobs: dict[str, tuple[str, str, list[JsonObject]]] = {}

    @classmethod
    def connect(cls, settings: DaemonSettings, version: str) -> RegistryPublisher:
        """Connect in the background (ZooKeeper may be down), authenticated if configured.

        Raises:
            RegistryError: no connect string; AuthConfigError: an unusable credentials file.
        """
        if not settings.zookeeper:
            raise RegistryError("no ZooKeeper connect string configured")
        auth = load_auth(settings.zookeeper_auth_file)
        if auth is None:
            log.warning("ZooKeeper without authentication: the znodes this daemon creates are open to anyone")
        client = new_client(settings.zookeeper, auth=auth, session_timeout=settings.zookeeper_session_timeout)
        client.start_async()
        registry = Registry(client, settings.zookeeper_root, settings.node, wait_timeout=0.0)
        return cls(registry, version)

    def node_serving(self, address: str) -> None:
        """Announce this node once it serves at ``address`` (the bound port, not 0)."""
        try:
            self.registry.register_node(address, self.version)
        except RegistryError as error:
            log.error("node is not registered: %s", error)

    def job_followed(self, entry: JobEntry) -> None:
        """Register the job (a new query of it replaces the old one's epochs in ZooKeeper)
        and, for a node restarted with epochs of it, the epochs it holds."""
        self._register_job(entry)
        progress = entry.progress
        if progress.empty:
            return
        try:
            self.registry.publish_replica(entry.descriptor.name, progress.newest, progress.oldest)
        except RegistryError as error:
            log.error("the epochs of job %r held here are not registered: %s", entry.descriptor.name, error)

    def epoch_ingested(self, entry: JobEntry, record: EpochRecord) -> None:
        # The operators are known only once the first epoch has been read.
        self._register_job(entry)
        job = entry.descriptor.name
        try:
            self.registry.publish_epoch(
                job, record.epoch, epoch_record(record), entry.progress.newest, entry.progress.oldest
            )
        except RegistryError as error:
            log.error("epoch %d of job %r is not registered: %s", record.epoch, job, error)

    def retention_moved(self, entry: JobEntry) -> None:
        job = entry.descriptor.name
        try:
            self.registry.publish_retention(job, max(entry.progress.oldest, 0))
        except RegistryError as error:
            log.error("retention of job %r is not registered: %s", job, error)

    def hold(self, job: str) -> None:
        """Group mode: do not announce this node's replica of ``job`` until :meth:`release`."""
        self.registry.hold_replica(job)

    def release(self, job: str) -> None:
        """Group mode: announce this node's replica of ``job`` (it caught up)."""
        try:
            self.registry.release_replica(job)
        except RegistryError as error:
            log.error("the replica of job %r is not announced: %s", job, error)

    def job_dropped(self, job: str) -> None:
        """This node no longer follows ``job``: withdraw its replica znode."""
        self._jobs.pop(job, None)
        try:
            self.registry.forget_job(job)
        except RegistryError as error:
            log.error("the replica of job %r is not withdrawn: %s", job, error)

    def close(self) -> None:
        """Leave ZooKeeper, after flushing for up to CLOSE_FLUSH_SECONDS."""
        self.registry.close(timeout=CLOSE_FLUSH_SECONDS)

    def _register_job(self, entry: JobEntry) -> None:
        descriptor = entry.descriptor
        job = (descriptor.checkpoint, descriptor.query_id, operators(entry))
        if self._jobs.get(descriptor.name) == job:
            return
        try:
            self.registry.register_job(descriptor.name, *job)
        except RegistryError as error:
            log.error("job %r is not registered: %s", descriptor.name, error)
            return
        self._jobs[descriptor.name] = job


def operators(entry: JobEntry) -> list[JsonObject]:
    """The job's stateful operators with their stores, as the job znode lists them."""
    by_id: dict[int, JsonObject] = {}
    for (operator_id, store_name), handle in sorted(entry.stores.items()):
        name = entry.operator_names.get(operator_id, handle.descriptor.operator_name)
        operator = by_id.setdefault(operator_id, {"id": operator_id, "name": name, "stores": []})
        operator["stores"].append(
            {
                "name": store_name,
                "partitions": handle.latest.num_partitions,
                "layouts": [list(layout) for layout in handle.layouts()],
            }
        )
    return list(by_id.values())


def epoch_record(record: EpochRecord) -> JsonObject:
    """The epoch znode's content. Only facts every node reads from the same checkpoint
    go in (not this node's ingest time): epoch znodes are write-once and shared."""
    return {
        "committed_at_ms": record.committed_at_ms,
        "watermark_ms": record.watermark_ms,
        "sources": [
            {
                "source": source.source,
                "start": _offsets(source.start_offset_json),
                "end": _offsets(source.end_offset_json),
            }
            for source in record.sources
        ],
    }


def _offsets(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return jsontext.loads(text)
    except ValueError:
        return text
