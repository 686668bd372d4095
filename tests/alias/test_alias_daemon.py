"""The daemon process resolves aliases from its ZooKeeper: the runtime wires them into the reads."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from epochstate.client import AmbiguousName, InvalidArgument, JobNotFound, RoutedClient
from epochstate.core.alias import errors
from epochstate.core.alias.records import AliasRecord
from epochstate.core.alias.registry import AliasRegistry
from epochstate.core.zookeeper.layout import Layout
from tests.fixtures.daemon import DaemonProcess


def test_a_daemon_names_the_job_answering_an_alias_that_it_does_not_follow(
    daemon_factory: Callable[..., DaemonProcess], zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    registry = AliasRegistry(zk_client)
    registry.define(AliasRecord("orders", "counts-v1", "counts", "orders-in"))
    (tmp_path / "cp").mkdir()  # a query that has committed nothing yet
    (tmp_path / "cp" / "metadata").write_text('{"id":"5f2c8a1e-0000-4000-8000-000000000001"}\n')
    daemon = daemon_factory({"own": str(tmp_path / "cp")}, zookeeper=zk_connect)
    with daemon.client() as client:
        with pytest.raises(JobNotFound, match=r"alias 'orders' is answered .* by job 'counts-v1'"):
            client.describe("orders")
        with pytest.raises(JobNotFound, match="unknown job 'nobody'"):
            client.get("nobody", ["a"])
    # Locate does not resolve aliases: the routed client says so, rather than "no such job".
    with RoutedClient([daemon.target]) as routed:
        with pytest.raises(
            InvalidArgument, match="'orders' is an alias, which Locate does not resolve"
        ) as refused:
            routed.locate("orders")
        assert (refused.value.reason, refused.value.metadata) == ("BAD_REQUEST", {"alias": "orders"})
        with pytest.raises(InvalidArgument, match="is an alias"):
            routed.get("orders", ["a"])
        with pytest.raises(JobNotFound):
            routed.locate("nobody")
    with daemon.client() as client:
        # A followed job's name that is an alias too is refused once the alias appears.
        client.describe("own")
        # ``alias set`` refuses a registered job's name; an alias written before the job
        # was registered (or by hand) is refused at read time.
        with pytest.raises(errors.AmbiguousName):
            registry.define(AliasRecord("own", "counts-v1", "counts", "orders-in"))
        record = AliasRecord("own", "counts-v1", "counts", "orders-in")
        zk_client.create(Layout().alias("own"), record.encode(), makepath=True)
        # A read of a job checks the alias names the daemon's watch keeps, without a round
        # trip to ZooKeeper: it sees the new alias once the watch event has arrived.
        deadline = time.monotonic() + 10
        with pytest.raises(AmbiguousName):
            while time.monotonic() < deadline:
                client.describe("own", refresh=True)
