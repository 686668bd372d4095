"""Every group znode gets the client's ACL (core.zookeeper.client.new_client): none is open."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from epochstate.core.zookeeper.auth import ZooKeeperAuth
from epochstate.core.zookeeper.client import new_client
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.daemon.group.member import GroupMember
from tests.fixtures.zookeeper import eventually
from tests.group.conftest import GROUP, LAYOUT


def _tree(client: KazooClient, path: str) -> Iterator[str]:
    yield path
    for child in sorted(client.get_children(path)):
        yield from _tree(client, f"{path}/{child}")


def test_every_group_znode_has_the_identitys_acl_only(zk_connect: str) -> None:
    auth = ZooKeeperAuth("epochstate", secrets.token_hex(16))
    owner, stranger = new_client(zk_connect, auth=auth), new_client(zk_connect)
    owner.start(timeout=15)
    stranger.start(timeout=15)
    member = GroupMember(owner, LAYOUT, GROUP, "node-a", address="a:1", version="test", debounce=0.05)
    try:
        JobDefinitions(owner, LAYOUT, GROUP).add("orders", "file:///c")
        assert member.start(timeout=30)
        assert eventually(lambda: "orders" in member.assigned(), 30)
        paths = list(_tree(owner, LAYOUT.groups))
        relative = {
            path[len(LAYOUT.group(GROUP)) :] for path in paths if path.startswith(LAYOUT.group(GROUP))
        }
        assert {
            "",
            "/jobs",
            "/jobs/orders",
            "/members",
            "/members/node-a",
            "/election",
            "/assignment",
        } <= relative
        assert any(path.startswith("/election/") for path in relative)  # the leader's contender znode
        assert [path for path in paths if owner.get_acls(path)[0] != auth.acl()] == []
        for path in paths:
            with pytest.raises(NoAuthError):
                stranger.get(path)
            with pytest.raises(NoAuthError):
                stranger.set(path, b"{}")
    finally:
        member.stop(10)
        for client in (owner, stranger):
            client.stop()
            client.close()
