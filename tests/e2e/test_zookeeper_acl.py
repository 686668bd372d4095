"""ZooKeeper ACLs, with every component authenticated and an attacker that is not.

Job ``orders`` (a stateful aggregation) writes a subject through the aligned sink;
the daemon follows ``orders``; job ``enrich`` reads the subject aligned; the CLI's
coordinator sends ``enrich`` an Abort; the daemon answers an aligned read. All of
them authenticate with one digest identity read from a file (options
``zookeeperAuthFile``, ``--zookeeper-auth-file`` and ``EPOCHSTATE_ZOOKEEPER_AUTH_FILE``).
A group member (the group engine, its own session) defines a job and assigns it.
Then, on every znode they created, a client without credentials and one with a
wrong password try to create a child, set, delete, read and list: ZooKeeper
refuses every attempt. Real Spark, ZooKeeper, the tansu broker and the daemon.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError, NotEmptyError

from epochstate.client import AlignedWith
from epochstate.core.zookeeper.auth import AUTH_FILE_VARIABLE, ZooKeeperAuth, load_auth
from epochstate.core.zookeeper.client import new_client
from epochstate.core.zookeeper.layout import Layout
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.daemon.group.member import GroupMember
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from epochstate.spark_plugin.alignment import register
from epochstate.spark_plugin.alignment.connections import close_shared_clients
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.kafka import KafkaBroker
from tests.fixtures.zookeeper import eventually, new_admin_client

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

FORMAT = "epochstate-kafka"
MARKER = "ZKSECRET5b1e"
BATCHES = [[("alice", 10), ("bob", 5)], [("alice", 7), ("carol", 1)], [("dave", 3)]]
ROOT = "/epochstate"
WORKER_TIMEOUT = "Python worker failed to connect back"
# Every kind of znode the components create, as a pattern over the path under the root.
KINDS = {
    "root": r"",
    "nodes": r"/nodes",
    "node": r"/nodes/[^/]+",
    "jobs": r"/jobs",
    "job": r"/jobs/[^/]+",
    "job epochs": r"/jobs/[^/]+/epochs",
    "job epoch": r"/jobs/[^/]+/epochs/\d{19}",
    "replicas": r"/jobs/[^/]+/replicas",
    "replica": r"/jobs/[^/]+/replicas/[^/]+",
    "subjects": r"/subjects",
    "subject": r"/subjects/[^/]+",
    "subject epochs": r"/subjects/[^/]+/epochs",
    "subject epoch": r"/subjects/[^/]+/epochs/\d{19}",
    "sources": r"/subjects/[^/]+/sources",
    "source (mapping, command)": r"/subjects/[^/]+/sources/[^/]+",
    "groups": r"/groups",
    "group": r"/groups/[^/]+",
    "group jobs": r"/groups/[^/]+/jobs",
    "group job (definition)": r"/groups/[^/]+/jobs/[^/]+",
    "group members": r"/groups/[^/]+/members",
    "group member": r"/groups/[^/]+/members/[^/]+",
    "group election": r"/groups/[^/]+/election",
    "group election contender": r"/groups/[^/]+/election/[^/]+",
    "group assignment": r"/groups/[^/]+/assignment",
}


@dataclass
class Secured:
    """The scenario's ZooKeeper (chrooted), its identity, and what the components printed."""

    connect: str
    topic: str
    auth: ZooKeeperAuth
    auth_file: Path
    daemon_log: Path
    texts: list[str] = field(default_factory=list)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "epochstate.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def secured(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    kafka_broker: KafkaBroker,
    zookeeper_server: EmbeddedZooKeeper,
) -> Iterator[Secured]:
    """``orders`` -> subject -> ``enrich``, the daemon following ``orders``, all authenticated."""
    from pyspark.sql import functions as F

    register(spark)
    directory = tmp_path_factory.mktemp("zookeeper-acl")
    auth_file = directory / "zookeeper-digest"
    auth_file.write_text(f"epochstate:{MARKER}{secrets.token_hex(16)}\n")
    auth = load_auth(auth_file)
    assert auth is not None
    chroot = f"/tests-{uuid.uuid4().hex}"
    admin = new_admin_client(zookeeper_server.connect_string)  # the chroot stays open: the operator's
    admin.ensure_path(chroot)
    connect = f"{zookeeper_server.connect_string}{chroot}"
    topic = kafka_broker.create_topic(f"acl-{uuid.uuid4().hex[:8]}", partitions=2)
    inputs = directory / "in"
    inputs.mkdir()
    counts = (
        spark.readStream.format("json")
        .schema("user string, amount long")
        .option("maxFilesPerTrigger", 1)
        .load(str(inputs))
        .groupBy("user")
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("total"))
    )
    orders = (
        counts.selectExpr("user AS key", "to_json(struct(user, orders, total)) AS value")
        .writeStream.format(FORMAT)
        .outputMode("complete")
        .trigger(processingTime="100 milliseconds")
        .queryName("orders")
        .option("topic", topic)
        .option("bootstrap", kafka_broker.bootstrap)
        .option("zookeeper", connect)
        .option("zookeeperAuthFile", str(auth_file))
        .option("checkpointLocation", str(directory / "orders"))
        .start()
    )
    read: dict[int, int] = {}
    member: GroupMember | None = None
    group_client: KazooClient | None = None

    def start_enrich() -> Any:
        return (
            spark.readStream.format(FORMAT)
            .option("topic", topic)
            .option("bootstrap", kafka_broker.bootstrap)
            .option("zookeeper", connect)
            .option("zookeeperAuthFile", str(auth_file))
            .option("job", "enrich")
            .option("checkpointLocation", str(directory / "enrich"))
            .load()
            .writeStream.foreachBatch(lambda frame, batch: read.__setitem__(batch, frame.count()))
            .option("checkpointLocation", str(directory / "enrich"))
            .start()
        )

    enrich = start_enrich()
    daemon = DaemonProcess(
        directory / "daemon",
        {"orders": str(directory / "orders")},
        zookeeper=connect,
        extra_args=["--log-level", "DEBUG"],
        env={AUTH_FILE_VARIABLE: str(auth_file), "EPOCHSTATE_NODE": "acl-node"},
    ).start()
    scenario = Secured(connect, topic, auth, auth_file, daemon.log_path)
    try:
        for batch, rows in enumerate(BATCHES):
            text = "".join(json.dumps({"user": u, "amount": a}) + "\n" for u, a in rows)
            (inputs / f".part-{batch}.tmp").write_text(text)
            (inputs / f".part-{batch}.tmp").rename(inputs / f"part-{batch}.json")
            orders.processAllAvailable()

        def enrich_read_all() -> bool:
            nonlocal enrich
            failure = enrich.exception()
            if failure is not None and WORKER_TIMEOUT in str(failure):
                enrich = start_enrich()  # Spark gives a new Python worker 10 s: short on a busy machine
                return False
            assert failure is None, failure
            return len(read) >= len(BATCHES)

        assert eventually(enrich_read_all, timeout=180), read
        daemon.wait_for_epoch("orders", len(BATCHES) - 1, timeout=120)
        # The coordinator, straight on ZooKeeper, as the CLI runs it.
        at_zookeeper = ["-z", connect, "--zookeeper-auth-file", str(auth_file), "--json"]
        aborted = _cli("align", "abort", topic, "enrich", "--wait", "120", *at_zookeeper)
        scenario.texts.append(aborted.stdout + aborted.stderr)
        assert aborted.returncode == 0, aborted.stderr
        assert json.loads(aborted.stdout)["state"] == "unaligned"
        # The daemon reads the subject with its identity: the status, and an aligned read.
        status = _cli("align", "status", topic, "--target", daemon.target, "--json")
        scenario.texts.append(status.stdout + status.stderr)
        assert status.returncode == 0, status.stderr
        assert [row["job"] for row in json.loads(status.stdout)] == ["enrich"]
        owner = new_client(connect, auth=auth)
        owner.start(timeout=15)
        source = json.loads(owner.get(f"{ROOT}/subjects/{topic}/sources/enrich")[0])
        owner.stop()
        owner.close()
        batch, subject_epoch = max((int(b), k) for b, k in source["mapping"].items())
        with daemon.client() as client:
            aligned = AlignedWith("enrich", batch, topic)
            assert client.get("orders", ["alice"], aligned_with=aligned, wait=True).epoch == subject_epoch
        # A group: a job definition, a member, its election contender, the leader's assignment.
        group_client = new_client(connect, auth=auth)
        group_client.start(timeout=15)
        JobDefinitions(group_client, Layout(ROOT), "acl").add("orders", str(directory / "orders"))
        member = GroupMember(group_client, Layout(ROOT), "acl", "acl-node", address="local", version="test")
        assert member.start(timeout=60)
        assert eventually(lambda: "orders" in member.assigned(), timeout=60)
        yield scenario
    finally:
        if member is not None:
            member.stop(10)
        if group_client is not None:
            group_client.stop()
            group_client.close()
        enrich.stop()
        orders.stop()
        daemon.stop()
        close_shared_clients()
        with suppress(NoNodeError):
            admin.delete(chroot, recursive=True)
        admin.stop()
        admin.close()


def _tree(client: KazooClient, path: str) -> Iterator[str]:
    yield path
    for child in sorted(client.get_children(path)):
        yield from _tree(client, f"{path}/{child}")


def _kind(path: str) -> str:
    relative = path[len(ROOT) :]
    return next(kind for kind, pattern in KINDS.items() if re.fullmatch(pattern, relative))


def _attempts(client: KazooClient, path: str) -> dict[str, Callable[[], Any]]:
    return {
        "create": lambda: client.create(f"{path}/forged", b"{}"),
        "set": lambda: client.set(path, b'{"forged":true}'),
        "delete": lambda: client.delete(path),
        "get": lambda: client.get(path),
        "children": lambda: client.get_children(path),
    }


@pytest.fixture
def started(secured: Secured) -> Iterator[Callable[[ZooKeeperAuth | None], KazooClient]]:
    clients: list[KazooClient] = []

    def start(auth: ZooKeeperAuth | None) -> KazooClient:
        client = new_client(secured.connect, auth=auth)
        client.start(timeout=15)
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.stop()
        client.close()


def test_every_znode_refuses_clients_without_the_identity(
    secured: Secured, started: Callable[[ZooKeeperAuth | None], KazooClient]
) -> None:
    owner = started(secured.auth)
    paths = list(_tree(owner, ROOT))
    kinds = {_kind(path) for path in paths}
    assert kinds == set(KINDS), f"kinds not created: {set(KINDS) - kinds}"
    # Each znode carries the identity's ACL and nothing else: no world rights at all.
    expected = secured.auth.acl()
    assert [p for p in paths if owner.get_acls(p)[0] != expected] == []
    for path in paths:  # the owner reads everything
        owner.get(path)

    wrong = ZooKeeperAuth(secured.auth.user, "not-the-password")
    for name, attacker in (("no credentials", started(None)), ("wrong password", started(wrong))):
        succeeded, refusals = [], 0
        for path in paths:
            for attempt, call in _attempts(attacker, path).items():
                try:
                    call()
                except NoAuthError:
                    refusals += 1
                except NotEmptyError:
                    # Deleting the root is its parent's ACL's business (the operator's
                    # chroot or "/"); the root is never empty, so it stays.
                    assert (path, attempt) == (ROOT, "delete")
                else:
                    succeeded.append(f"{attempt} {path}")
        print(
            f"{name}: {len(paths)} znodes, {len(kinds)} kinds, {refusals} refused, {len(succeeded)} succeeded"
        )
        assert succeeded == []
        assert refusals == len(paths) * 5 - 1
    # The data is as the components wrote it.
    assert not owner.exists(f"{ROOT}/nodes/forged")
    assert b"forged" not in owner.get(next(p for p in paths if _kind(p) == "subject epoch"))[0]


def test_credentials_never_show(secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    # kazoo logs each request it sends at DEBUG, the authentication packet included.
    with caplog.at_level(1, logger="kazoo"):
        client = new_client(secured.connect, auth=secured.auth)
        client.start(timeout=15)
        client.get_children(ROOT)
        client.stop()
        client.close()
    logged = caplog.text
    assert "Auth(<hidden>)" in logged, logged[-2000:]
    failed = _cli("align", "status", "nope", "-z", secured.connect, "--zookeeper-auth-file", "/no/such/file")
    assert failed.returncode == 2 and "/no/such/file" in failed.stderr
    daemon_log = secured.daemon_log.read_text(errors="replace")
    everything = "\n".join([*secured.texts, daemon_log, logged, repr(secured.auth), failed.stderr])
    assert "DEBUG epochstate" in everything  # the daemon's log at DEBUG is in
    assert secured.auth.password not in everything
    assert MARKER not in everything


def test_a_component_without_the_identity_is_refused_clearly(secured: Secured) -> None:
    environment = {AUTH_FILE_VARIABLE: ""}
    refused = _cli("align", "status", secured.topic, "-z", secured.connect, env=environment)
    assert refused.returncode == 1
    assert "ACL does not grant it" in refused.stderr and "zookeeper-auth-file" in refused.stderr
    # secure-zookeeper on a tree secured by another identity names the znode it stopped at.
    other = secured.auth_file.with_name("other-identity")
    other.write_text(f"intruder:{secrets.token_hex(8)}")
    taken = _cli("secure-zookeeper", "-z", secured.connect, "--zookeeper-auth-file", str(other))
    assert taken.returncode == 1 and f"{ROOT}: ZooKeeper refused this identity" in taken.stderr
