"""``epochstate.v1.Routing``: which daemons serve a job, for clients that route reads.

Any daemon answers ``Locate`` from ZooKeeper, read at the time of the call (a
client caches the answer and asks again when a replica fails it): the job znode
gives the query and each store's numbers of Spark partitions (by epoch); the replica znodes
(``jobs/<job>/replicas/<node>``, written only once a replica caught up) say who
serves what; the node znodes give the live daemons' addresses; in a group, the
assignment gives each shard's partition range and replicas. A daemon without
ZooKeeper, or one asked about a job that it follows and that is not registered
(yet), answers about itself. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import grpc
from kazoo.client import KazooClient

from epochstate.core.zookeeper.errors import InvalidName, InvalidRecord, RegistryUnavailable
from epochstate.core.zookeeper.group_records import LAST_PARTITION, Assignment
from epochstate.core.zookeeper.layout import Layout, check_name
from epochstate.core.zookeeper.records import JsonObject
from epochstate.core.zookeeper.session import CONNECTION_ERRORS
from epochstate.daemon.group.assignments import read_assignment
from epochstate.daemon.registry.view import RegistryView
from epochstate.daemon.server.handlers import Guard, add_to_server
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.status import BadRequest, domain_errors, wait_budget
from epochstate.daemon.store.catalog import Catalog, JobEntry, JobNotFound
from epochstate.v1 import epochstate_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["Routing"]
SERVICE_NAME = SERVICE.full_name


def _int(record: Mapping[str, Any], name: str) -> int:
    value = record.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _stores(job: JsonObject) -> list[pb.LocatedStore]:
    """Each store of the job znode's operators, with its numbers of partitions."""
    stores = []
    for operator in job.get("operators") or ():
        for store in operator.get("stores") or ():
            stores.append(
                pb.LocatedStore(
                    operator_id=int(operator.get("id", 0)),
                    store=str(store.get("name", "default")),
                    num_partitions=int(store.get("partitions", 0)),
                    layouts=[
                        pb.PartitionLayout(first_epoch=int(first), num_partitions=int(count))
                        for first, count in store.get("layouts") or ()
                    ],
                )
            )
    return stores


class RoutingService:
    """The rpcs of ``Routing``: ``client`` is the daemon's ZooKeeper session (None: it has none).

    ``address`` gives the daemon's advertised address once it serves; ``node`` is
    its node name, ``group`` its group (None: none).
    """

    def __init__(
        self,
        client: KazooClient | None,
        root: str,
        catalog: Catalog,
        *,
        node: str,
        group: str | None,
        address: Callable[[], str],
        timeout: float = 5.0,
    ) -> None:
        self._client = client
        self._root = root
        self._layout = Layout(root)
        self._catalog = catalog
        self._node = node
        self._group = group
        self._address = address
        self._timeout = timeout

    @domain_errors
    def Locate(self, request: pb.LocateRequest, context: grpc.ServicerContext) -> pb.LocateResponse:
        try:
            job = check_name("job", request.job)
        except InvalidName as error:
            raise BadRequest(f"not a job name: {error}") from None
        if self._client is None:
            return self._itself(self._catalog.get(job))
        budget = wait_budget(context)
        timeout = self._timeout if budget is None else max(0.001, min(self._timeout, budget))
        view = RegistryView(self._client, self._root, timeout=timeout)
        try:
            return self._registered(view, job)
        except CONNECTION_ERRORS as error:
            raise RegistryUnavailable(f"ZooKeeper did not answer: {error!r}") from error

    def _registered(self, view: RegistryView, job: str) -> pb.LocateResponse:
        # The catalog first: a job this daemon follows because its group assigned it is
        # then in the assignment read next (one session never reads an older state than
        # it saw), so a group job is never answered as if this daemon alone served it.
        entry = self._followed(job)
        record = view.get_job(job)
        assignment = self._assignment(view.client)
        assigned = None if assignment is None else assignment.jobs.get(job)
        if record is None and assigned is None:
            if entry is None:
                if view.alias(job) is not None:
                    # Each epoch of an alias is answered by one of its jobs, each with shards
                    # and replicas of its own: no one location routes its reads.
                    raise BadRequest(
                        f"{job!r} is an alias, which Locate does not resolve: read it through a "
                        "daemon that follows its jobs (EpochStateClient), or route reads of its jobs",
                        metadata={"alias": job},
                    )
                raise JobNotFound(f"no daemon registered job {job!r}", metadata={"job": job})
            return self._itself(entry)
        # A group job none of whose replicas registered it yet: its shards, nobody serving.
        record = record or {}
        response = pb.LocateResponse(
            job=job,
            query_id=str(record.get("query_id", "")),
            stores=_stores(record),
            node=self._node,
            group=self._group or "",
        )
        replicas = view.replicas(job)
        nodes = view.nodes()
        if assigned is None:  # followed outside a group: each replica holds every partition
            shards: Iterable[tuple[int, int, Iterable[str]]] = [(0, LAST_PARTITION, sorted(replicas))]
        else:
            shards = [(s.first, s.last, s.replicas) for s in assigned.shards]
        for first, last, members in shards:
            shard = pb.LocatedShard(first_partition=first, last_partition=last)
            for member in members:
                shard.replicas.append(self._replica(member, replicas.get(member), nodes.get(member)))
            response.shards.append(shard)
        return response

    def _assignment(self, client: KazooClient) -> Assignment | None:
        if self._group is None:
            return None
        try:
            return read_assignment(client, self._layout, self._group, self._timeout)[0]
        except InvalidRecord:
            return None  # the leader rewrites it; meanwhile route by the replica znodes

    @staticmethod
    def _replica(node: str, replica: JsonObject | None, live: JsonObject | None) -> pb.LocatedReplica:
        address = "" if live is None else str(live.get("address", ""))
        located = pb.LocatedReplica(
            node=node,
            address=address,
            announced=replica is not None,
            serving=replica is not None and bool(address),
            newest_epoch=-1,
            oldest_epoch=-1,
        )
        if replica is not None:
            located.newest_epoch = _int(replica, "newest_epoch")
            located.oldest_epoch = _int(replica, "oldest_epoch")
            located.query_id = str(replica.get("query_id", ""))
        return located

    def _followed(self, job: str) -> JobEntry | None:
        try:
            return self._catalog.get(job)
        except JobNotFound:
            return None

    def _itself(self, entry: JobEntry) -> pb.LocateResponse:
        """The answer of a daemon that knows only itself: it serves the partitions it holds
        (every one, unless a group gave it only some shards of the job)."""
        d, progress = entry.descriptor, entry.progress
        stores = [
            pb.LocatedStore(
                operator_id=op,
                store=name,
                num_partitions=handle.latest.num_partitions,
                layouts=[
                    pb.PartitionLayout(first_epoch=first, num_partitions=count)
                    for first, count in handle.layouts()
                ],
            )
            for (op, name), handle in sorted(entry.stores.items())
        ]
        serving = progress.newest >= 0
        replica = pb.LocatedReplica(
            node=self._node,
            address=self._address(),
            announced=serving,
            serving=serving,
            newest_epoch=progress.newest,
            oldest_epoch=progress.oldest,
            query_id=d.query_id,
        )
        held = ((0, LAST_PARTITION),) if d.partitions is None else d.partitions.ranges
        shards = [
            pb.LocatedShard(first_partition=first, last_partition=last, replicas=[replica])
            for first, last in held
        ]
        return pb.LocateResponse(
            job=d.name,
            query_id=d.query_id,
            stores=stores,
            shards=shards,
            node=self._node,
            group=self._group or "",
        )


def add_routing(
    server: grpc.Server, service: RoutingService, metrics: DaemonMetrics, guard: Guard | None = None
) -> str:
    """Serve ``Routing`` on ``server``, each call checked by ``guard``; its full name."""
    if guard is None:
        add_to_server(service, server, metrics, SERVICE)
    else:
        add_to_server(service, server, metrics, SERVICE, guard)
    return SERVICE_NAME
