"""Registry tests run against a real ZooKeeper (tests.fixtures.zookeeper)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.daemon.registry import Registry

OPERATORS = [{"id": 0, "stores": ["default"], "partitions": 2}]


@pytest.fixture
def make_registry(
    make_zk_client: Callable[..., KazooClient],
) -> Iterator[Callable[..., Registry]]:
    """Registries on this test's chroot, each with its own client; closed afterwards."""
    registries: list[Registry] = []

    def make(node: str = "node-a", client: KazooClient | None = None, **kwargs: Any) -> Registry:
        registry = Registry(client or make_zk_client(), node=node, **kwargs)
        registries.append(registry)
        return registry

    yield make
    for registry in registries:
        registry.close(timeout=0)
