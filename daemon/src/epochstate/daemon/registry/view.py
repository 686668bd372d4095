"""Reading the registry: nodes, jobs, epochs and replicas, as they are in ZooKeeper."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from epochstate.core.zookeeper.errors import RegistryUnavailable
from epochstate.core.zookeeper.layout import DEFAULT_ROOT, Layout, parse_epoch_name
from epochstate.core.zookeeper.records import JsonObject, decode
from epochstate.core.zookeeper.session import CONNECTION_ERRORS, wait
from epochstate.daemon.registry.incarnation import query_of

log = logging.getLogger(__name__)


class RegistryView:
    """Read-only access to the registry under ``root``.

    Every call reads ZooKeeper (no cache) and returns within about ``timeout``
    seconds. Missing paths read as empty (an unknown job has no epochs).

    Raises (every method):
        RegistryUnavailable: not connected, or ZooKeeper did not answer in time.
        InvalidName: a job name or epoch that cannot be in the layout.
    """

    def __init__(self, client: KazooClient, root: str = DEFAULT_ROOT, *, timeout: float = 5.0):
        self.client = client
        self.layout = Layout(root)
        self.timeout = timeout

    def nodes(self) -> dict[str, JsonObject]:
        """Live daemons: node name -> {address, version, started_at_ms}."""
        return self._records_under(self.layout.nodes)

    def jobs(self) -> list[str]:
        """Registered job names, sorted."""
        return sorted(self._children(self.layout.jobs))

    def get_job(self, job: str) -> JsonObject | None:
        """{checkpoint, query_id, operators} of ``job`` (and ``retired_query_ids``, the
        queries its recreated checkpoint held before), or None if not registered."""
        return self._record(self.layout.job(job))

    def alias(self, name: str) -> JsonObject | None:
        """The record of alias ``name`` (a logical job name), or None if there is none."""
        return self._record(self.layout.alias(name))

    def list_epochs(self, job: str) -> list[int]:
        """The registered (committed, not yet retired) epochs of ``job``, ascending."""
        names = self._children(self.layout.epochs(job))
        return sorted(epoch for name in names if (epoch := parse_epoch_name(name)) is not None)

    def get_epoch(self, job: str, epoch: int, query_id: str | None = None) -> JsonObject | None:
        """The record of one epoch (with the ``query_id`` of the query it belongs to), or
        None if it is not registered; with ``query_id``, None unless it is that query's.

        Epoch numbers restart at 0 when a job's checkpoint is recreated: a reader that
        combines an epoch record with other state of the job (its job znode, its
        replicas, a daemon's answers) passes the query id that state is of.
        """
        record = self._record(self.layout.epoch(job, epoch))
        if record is not None and query_id is not None and query_of(record) != query_id:
            return None
        return record

    def replicas(self, job: str, query_id: str | None = None) -> dict[str, JsonObject]:
        """Live nodes holding ``job``: node -> {newest_epoch, oldest_epoch, updated_at_ms,
        query_id}; with ``query_id``, only the nodes holding that query of it."""
        found = self._records_under(self.layout.replicas(job))
        if query_id is None:
            return found
        return {node: record for node, record in found.items() if query_of(record) == query_id}

    def _children(self, path: str) -> list[str]:
        with self._reading():
            try:
                children: list[str] = wait(self.client.get_children_async(path), self.timeout)
            except NoNodeError:
                return []
        return children

    def _record(self, path: str) -> JsonObject | None:
        with self._reading():
            try:
                data, _ = wait(self.client.get_async(path), self.timeout)
            except NoNodeError:
                return None
        return _decoded(path, data)

    def _records_under(self, path: str) -> dict[str, JsonObject]:
        names = self._children(path)
        # Ask for all children at once; each answer is awaited in turn.
        requests = [(name, self.client.get_async(f"{path}/{name}")) for name in names]
        records: dict[str, JsonObject] = {}
        with self._reading():
            for name, request in requests:
                try:
                    data, _ = wait(request, self.timeout)
                except NoNodeError:
                    continue  # went away between listing and reading
                record = _decoded(f"{path}/{name}", data)
                if record is not None:
                    records[name] = record
        return records

    @contextmanager
    def _reading(self) -> Iterator[None]:
        if not self.client.connected:
            raise RegistryUnavailable("not connected to ZooKeeper")
        try:
            yield
        except CONNECTION_ERRORS as error:
            raise RegistryUnavailable(f"ZooKeeper did not answer: {error!r}") from error


def _decoded(path: str, data: Any) -> JsonObject | None:
    record = decode(data)
    if record is None:
        log.warning("ignoring znode %s: its data is not a JSON object", path)
    return record
