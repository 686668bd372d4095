"""The ZooKeeper identity (core.zookeeper.auth), and securing a tree made without one.

Against a real ZooKeeper: the daemon's registry and the subject registry build a
tree without credentials (as before authentication existed); an attacker forges
a subject epoch; ``epochstate secure-zookeeper`` gives every znode the identity's
ACL; afterwards the attacker is refused everywhere and the components with the
identity go on, their new znodes secured too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from epochstate.core.alignment.ranges import OffsetRange
from epochstate.core.alignment.records import SubjectEpoch
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.zookeeper.auth import AUTH_FILE_VARIABLE, ZooKeeperAuth, load_auth
from epochstate.core.zookeeper.client import new_client
from epochstate.core.zookeeper.errors import AccessDenied, AuthConfigError
from epochstate.daemon.registry import Registry

ROOT = "/epochstate"


def test_the_identity_comes_from_a_file_named_by_the_option_or_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "digest"
    secret.write_text("epochstate:s3cr3t-value\n")
    auth = load_auth(secret, environ={})
    assert auth == ZooKeeperAuth("epochstate", "s3cr3t-value")
    assert "s3cr3t" not in repr(auth)
    assert auth.auth_data == [("digest", "epochstate:s3cr3t-value")]
    assert load_auth(None, environ={AUTH_FILE_VARIABLE: str(secret)}) == auth
    assert load_auth(None, environ={}) is None
    assert load_auth(None, environ={AUTH_FILE_VARIABLE: ""}) is None
    (acl,) = auth.acl()
    assert acl.id.scheme == "digest" and acl.id.id == auth.digest_id and acl.perms == 31

    for content in ("no-colon-s3cr3t", "user:s3cr3t\nsecond:line", ":s3cr3t", "user:", "us er:s3cr3t"):
        secret.write_text(content)
        with pytest.raises(AuthConfigError) as refused:
            load_auth(secret, environ={})
        assert str(secret) in str(refused.value) and "s3cr3t" not in str(refused.value)
    with pytest.raises(AuthConfigError, match="cannot read"):
        load_auth(tmp_path / "missing", environ={})


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "epochstate.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, AUTH_FILE_VARIABLE: ""},
    )


@pytest.fixture
def clients(zk_connect: str) -> Iterator[Callable[[ZooKeeperAuth | None], KazooClient]]:
    started: list[KazooClient] = []

    def start(auth: ZooKeeperAuth | None) -> KazooClient:
        client = new_client(zk_connect, auth=auth)
        client.start(timeout=15)
        started.append(client)
        return client

    yield start
    for client in started:
        client.stop()
        client.close()


def _epoch(k: int) -> SubjectEpoch:
    return SubjectEpoch("t", k, (OffsetRange("t", 0, k * 10, k * 10 + 10),), "upstream", "q", 1)


def _record(epoch: int) -> dict[str, Any]:
    return {"committed_at_ms": epoch, "watermark_ms": 0, "sources": []}


def _tree(client: KazooClient, path: str) -> list[str]:
    return [path] + [
        p for child in sorted(client.get_children(path)) for p in _tree(client, f"{path}/{child}")
    ]


def _attempts(client: KazooClient, path: str) -> list[Callable[[], Any]]:
    return [
        lambda: client.create(f"{path}/forged"),
        lambda: client.set(path, b"{}"),
        lambda: client.delete(path, recursive=False),
        lambda: client.get(path),
    ]


def _forgeries(client: KazooClient, paths: list[str]) -> int:
    """How many of create (child), set, delete and get on ``paths`` ZooKeeper let through."""
    succeeded = 0
    for path in paths:
        for call in _attempts(client, path):
            try:
                call()
                succeeded += 1
            except KazooException:  # NoAuth, or NotEmpty for a delete: refused either way
                pass
    return succeeded


def test_secure_zookeeper_secures_an_open_tree(
    zk_connect: str, tmp_path: Path, clients: Callable[[ZooKeeperAuth | None], KazooClient]
) -> None:
    secret = tmp_path / "digest"
    secret.write_text("epochstate:a-long-random-password\n")
    auth = load_auth(secret, environ={})
    assert auth is not None

    # Before authentication: the components write an open tree; anyone may forge.
    open_client = clients(None)
    registry = Registry(open_client, node="node-a")
    try:
        assert registry.register_node("127.0.0.1:1", "1")
        assert registry.register_job("orders", "/cp", "q", [])
        assert registry.publish_epoch("orders", 0, _record(0), newest_epoch=0, oldest_epoch=0)
        subjects = SubjectRegistry(open_client)
        assert subjects.register_epoch(_epoch(0))
        subjects.register_source("t", "downstream", "aligned")
        attacker = clients(None)
        # A forged child, a forged record, a read; the delete fails only for the new child.
        assert _forgeries(attacker, [f"{ROOT}/subjects/t/epochs/0000000000000000000"]) == 3

        at = ["-z", zk_connect, "--zookeeper-auth-file", str(secret), "--json"]
        dry = _cli("secure-zookeeper", *at, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)
        assert planned["changed"] == planned["znodes"] > 10
        done = _cli("secure-zookeeper", *at)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {**planned, "dry_run": False}
        again = _cli("secure-zookeeper", *at)
        assert json.loads(again.stdout)["changed"] == 0

        # The components with the identity go on; their new znodes get the ACL too.
        owner = clients(auth)
        secured_registry = Registry(owner, node="node-b")
        assert secured_registry.register_job("orders", "/cp", "q", [])
        assert secured_registry.publish_epoch("orders", 1, _record(1), newest_epoch=1, oldest_epoch=0)
        secured_subjects = SubjectRegistry(owner)
        assert secured_subjects.register_epoch(_epoch(1))
        secured_subjects.record_mapping("t", "downstream", "aligned", [(0, 0), (1, 1)], keep=10)
        paths = _tree(owner, ROOT)
        assert f"{ROOT}/jobs/orders/replicas/node-b" in paths
        assert all(owner.get_acls(path)[0] == auth.acl() for path in paths)

        # ... and a client without it is refused everywhere (the root only by being non-empty).
        forged = _forgeries(attacker, paths)
        print(
            f"after secure-zookeeper: {len(paths)} znodes, {forged} of {len(paths) * 4} forgeries succeeded"
        )
        assert forged == 0
        with pytest.raises(AccessDenied, match="ACL does not grant it"):
            subjects.register_epoch(_epoch(2))
        registry.close(timeout=0)
        denied = _cli("secure-zookeeper", "-z", zk_connect)
        assert denied.returncode == 2 and "needs credentials" in denied.stderr
    finally:
        registry.close(timeout=0)
