"""Routed reads over a group: real ZooKeeper, three real daemon processes, a real Spark checkpoint.

The job is split into two shards (its two Spark partitions), each followed by
two of the three daemons. A :class:`RoutedClient` that knows one daemon finds
the others through ``Locate`` and sends each key to a replica of its partition:

- every epoch and every key equals Spark's own state reader, through the routed
  client (Get, MultiGet across shards, Scan), and every replica of a key's shard
  answers a pinned read with the same bytes;
- kill -9 of a daemon while a reader loops over pinned reads: no wrong answer,
  and the longest time without an answer is printed (a generous bound is asserted);
- a daemon cut off from ZooKeeper (a TCP proxy between it and ZooKeeper that the
  test cuts) stops being routed to once its session expires.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from epochstate.client.routed import RoutedClient
from epochstate.client.values import to_row
from epochstate.core.partition_ranges import LAST_PARTITION
from epochstate.core.partitioner import partition_of
from epochstate.core.zookeeper.layout import Layout
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.devtools.stores.base import free_port
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from epochstate.v1 import epochstate_pb2 as pb
from tests.e2e.test_oracle import QUERIES
from tests.e2e.test_reads import SCHEMA, counts
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import StoreOracle, canon, plain, spark_state, spark_store
from tests.fixtures.streams import FileStream
from tests.fixtures.zookeeper import EXPIRING_SESSION_TIMEOUT, eventually, new_test_client
from tests.group.cut_proxy import CutProxy
from tests.group.netns import Netns

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

GROUP = "routes"
JOB = "orders"
LAYOUT = Layout()
WAIT = 120.0  # generous: a busy 2-core machine
EPOCHS = (0, 1, 2)
NODES = ("n1", "n2", "n3")
SESSION_TIMEOUT = 4.0  # seconds: the daemons that stay
KILLED = "n1"  # killed by test_kill_9_of_a_daemon_during_pinned_reads
SHUTDOWN_GRACE = 5.0  # the daemon's default
CUT_OFF = "n3"  # cut off from ZooKeeper by test_a_daemon_cut_off_from_zookeeper_is_no_longer_routed_to


def orders(batch: int) -> list[dict[str, Any]]:
    """Thirty orders over sixty users: keys in both partitions, some only in later epochs."""
    return [{"user": f"user-{(batch * 23 + i * 7) % 60}", "amount": batch * 100 + i} for i in range(30)]


@dataclass
class RoutedGroup:
    daemons: dict[str, DaemonProcess]
    zk: KazooClient
    checkpoint: Path
    oracle: StoreOracle
    metrics: dict[str, tuple[str, int]] = field(default_factory=dict)  # node -> metrics host, port

    def announced(self) -> set[str]:
        path = LAYOUT.replicas(JOB)
        return set(self.zk.get_children(path)) if self.zk.exists(path) else set()

    def client(self, *nodes: str, timeout: float = 30.0) -> RoutedClient:
        return RoutedClient([self.daemons[n].target for n in nodes], timeout=timeout)


@dataclass(frozen=True)
class Placement:
    """Where a daemon of the group runs: its ZooKeeper connect string, its listen address,
    the command it runs under (a network namespace), where it serves metrics."""

    zookeeper: str
    listen: str = "127.0.0.1:0"
    prefix: tuple[str, ...] = ()
    host: str = "127.0.0.1"


def _start_group(
    spark: Any,
    tmp_path: Path,
    zk: KazooClient,
    daemon_factory: Callable[..., DaemonProcess],
    placement: Callable[[str], Placement],
    expiring: str,
) -> RoutedGroup:
    """The group of :data:`NODES`; ``expiring`` (the node the test kills or cuts off) gets a
    short session, so that its znodes go soon."""
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp" / JOB, counts, SCHEMA, name=JOB)
    stream.start()
    try:
        for batch in EPOCHS:
            stream.feed(orders(batch))
    finally:
        stream.stop()
    oracle = spark_store(spark, stream.checkpoint, EPOCHS)
    assert oracle.partitions() == {0, 1}
    metrics = {node: (placement(node).host, free_port()) for node in NODES}
    daemons = {}
    for node in NODES:
        where = placement(node)
        daemons[node] = daemon_factory(
            {},
            name=node,
            zookeeper=where.zookeeper,
            listen=where.listen,
            prefix=list(where.prefix),
            extra_args=["--group", GROUP, "--node", node, "--poll-interval", "0.1"],
            env={
                "EPOCHSTATE_ZOOKEEPER_SESSION_TIMEOUT": str(
                    EXPIRING_SESSION_TIMEOUT if node == expiring else SESSION_TIMEOUT
                ),
                "EPOCHSTATE_METRICS_PORT": str(metrics[node][1]),
                "EPOCHSTATE_METRICS_ADDRESS": where.host,
                # Beyond loopback (a network namespace of the test's own), plaintext on purpose.
                "EPOCHSTATE_INSECURE": "true" if where.prefix else "false",
            },
        )
    members = LAYOUT.group_members(GROUP)
    assert eventually(lambda: zk.exists(members) is not None and len(zk.get_children(members)) == 3, WAIT)
    group = RoutedGroup(daemons, zk, stream.checkpoint, oracle, metrics)
    # Two shards (one per Spark partition), two replicas each: one daemon holds both.
    JobDefinitions(zk, LAYOUT, GROUP).add(JOB, str(stream.checkpoint), replicas=2, shards=2, partitions=2)
    assert eventually(lambda: group.announced() == set(NODES), WAIT)
    for daemon in daemons.values():
        daemon.wait_for_epoch(JOB, EPOCHS[-1], WAIT)
    return group


@pytest.fixture
def routed_group(
    spark: Any,
    tmp_path: Path,
    zk_connect: str,
    make_zk_client: Callable[..., KazooClient],
    daemon_factory: Callable[..., DaemonProcess],
) -> RoutedGroup:
    return _start_group(
        spark, tmp_path, make_zk_client(), daemon_factory, lambda _: Placement(zk_connect), KILLED
    )


def _expected(oracle: StoreOracle, epoch: int) -> dict[str, tuple[bool, Any]]:
    """Every key of every epoch: found and value at ``epoch``."""
    state = oracle.states[epoch]
    return {
        canon(k): (canon(k) in state, state[canon(k)][1] if canon(k) in state else None)
        for k in oracle.keys()  # noqa: SIM118 (a StoreOracle is no dict)
    }


def test_routed_reads_equal_spark_and_every_replica_of_a_shard(routed_group: RoutedGroup) -> None:
    group, oracle = routed_group, routed_group.oracle
    keys = oracle.keys()
    with group.client("n2") as client:
        location = client.locate(JOB)
        assert location.layouts == {(0, "default"): ((0, 2),)}
        assert [(s.first, s.last) for s in location.shards] == [(0, 0), (1, LAST_PARTITION)]
        for shard in location.shards:
            assert len(shard.replicas) == 2 and all(r.serving for r in shard.replicas), location
            assert all(r.newest_epoch == EPOCHS[-1] for r in shard.replicas)
        addresses = {r.node: r.address for s in location.shards for r in s.replicas}
        assert addresses == {n: group.daemons[n].target for n in NODES}

        # The client's partition of each key is the one Spark's state reader reports.
        schema = client.describe(JOB).store().key
        for key, _, partition in (v for state in oracle.states.values() for v in state.values()):
            assert partition_of([key["user"]], schema, 2) == partition
            assert client.route(JOB, key).covers(partition)

        for epoch in EPOCHS:
            expected = _expected(oracle, epoch)
            # Get, one key at a time.
            for key in keys:
                found = client.get(JOB, key, epoch=epoch)
                assert (found.epoch, found.found, plain(found.value)) == (epoch, *expected[canon(key)])
                if found.found:
                    assert found.partition == oracle.states[epoch][canon(key)][2]
            # MultiGet across both shards: merged in request order, one epoch.
            many = client.multi_get(JOB, list(reversed(keys)), epoch=epoch)
            assert [canon(r.key) for r in many] == [canon(k) for k in reversed(keys)]
            assert {r.epoch for r in many} == {epoch}
            assert {canon(r.key): (r.found, plain(r.value)) for r in many} == expected
            # Scan over both shards.
            scanned = {canon(r.key): plain(r.value) for r in client.scan(JOB, epoch=epoch, page_size=7)}
            assert scanned == {k: v for k, (present, v) in expected.items() if present}

        # latest resolves once per read and never goes backwards within the client.
        latest = client.multi_get(JOB, keys)
        assert {r.epoch for r in latest} == {EPOCHS[-1]}
        assert client.newest_seen(JOB) == EPOCHS[-1]
        assert client.pinned_epoch(JOB) == EPOCHS[-1]

    # Pinned reads: byte-identical from every replica of the key's shard.
    for epoch in EPOCHS:
        for key in keys:
            answers = {}
            holding = location.shard_of(partition_of([key["user"]], schema, 2))
            assert holding is not None
            for replica in holding.replicas:
                with group.daemons[replica.node].client() as direct:
                    request = pb.GetRequest(
                        store=pb.StoreRef(job=JOB),
                        key=to_row(key, schema),
                        epoch=pb.EpochSelector(exact=epoch),
                    )
                    response = direct.stub.Get(request, timeout=30)
                    answers[replica.node] = response.SerializeToString(deterministic=True)
            assert len(answers) == 2 and len(set(answers.values())) == 1, (key, epoch)

    # The CLI routes too, given several daemons.
    targets = ",".join(group.daemons[n].target for n in NODES)
    key = keys[0]
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "epochstate.cli",
            "get",
            JOB,
            json.dumps(key),
            "--epoch",
            "1",
            "--json",
            "--target",
            targets,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    line = json.loads(shown.stdout)
    assert (line["epoch"], line["found"]) == (1, _expected(oracle, 1)[canon(key)][0])


@dataclass
class ReaderLoop:
    """Pinned MultiGets of every key through one routed client, checked against Spark's reader."""

    client: RoutedClient
    oracle: StoreOracle
    answered: list[float] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        keys = self.oracle.keys()
        expected = {e: _expected(self.oracle, e) for e in EPOCHS}
        turn = 0
        while not self.stop.is_set():
            epoch = EPOCHS[turn % len(EPOCHS)]
            turn += 1
            try:
                many = self.client.multi_get(JOB, keys, epoch=epoch, timeout=30)
            except Exception as error:  # counted, and the loop goes on: the gap shows it
                self.failed.append(repr(error))
                continue
            got = {canon(r.key): (r.found, plain(r.value)) for r in many}
            if got != expected[epoch] or {r.epoch for r in many} != {epoch}:
                self.wrong.append(f"epoch {epoch}: {got}")
            self.answered.append(time.monotonic())

    def longest_gap(self, since: float) -> float:
        times = [since, *[t for t in self.answered if t >= since]]
        return max(b - a for a, b in itertools.pairwise(times)) if len(times) > 1 else float("inf")


def test_kill_9_of_a_daemon_during_pinned_reads(routed_group: RoutedGroup) -> None:
    group = routed_group
    with group.client(*NODES) as client:
        loop = ReaderLoop(client, group.oracle)
        reader = threading.Thread(target=loop.run, name="reader")
        reader.start()
        try:
            assert eventually(lambda: len(loop.answered) >= 20, WAIT)
            victim = KILLED
            killed_at = time.monotonic()
            group.daemons[victim].kill()
            # Its znodes go when its session expires; the leader moves its replicas; reads go on.
            assert eventually(lambda: victim not in group.announced(), WAIT)
            assert eventually(lambda: len([t for t in loop.answered if t > time.monotonic() - 1]) > 0, WAIT)
            settled = time.monotonic()
            assert eventually(lambda: len([t for t in loop.answered if t > settled]) >= 20, WAIT)
        finally:
            loop.stop.set()
            reader.join(60)
        gap = loop.longest_gap(killed_at)
        after = len([t for t in loop.answered if t > killed_at])
        print(
            f"\nkill -9: {len(loop.answered)} pinned MultiGets ({after} after the kill), "
            f"{len(loop.wrong)} wrong, {len(loop.failed)} failed; longest gap after the kill {gap:.3f} s"
        )
        assert loop.wrong == []
        assert loop.failed == []
        assert gap < 30.0


@pytest.fixture
def cut_group(
    spark: Any,
    tmp_path: Path,
    zookeeper_server: EmbeddedZooKeeper,
    zk_chroot: str,
    zk_connect: str,
    make_zk_client: Callable[..., KazooClient],
    daemon_factory: Callable[..., DaemonProcess],
) -> Iterator[tuple[RoutedGroup, Callable[[], None]]]:
    proxy = CutProxy("127.0.0.1", zookeeper_server.port)
    proxied = Placement(f"127.0.0.1:{proxy.port}{zk_chroot}")
    try:
        placement = lambda node: proxied if node == CUT_OFF else Placement(zk_connect)  # noqa: E731
        yield _start_group(spark, tmp_path, make_zk_client(), daemon_factory, placement, CUT_OFF), proxy.cut
    finally:
        proxy.close()


@pytest.fixture
def partitioned_group(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> Iterator[tuple[RoutedGroup, Callable[[], None]]]:
    """n3 runs in a network namespace of its own and reaches ZooKeeper over a veth pair
    that the test takes down: a real network partition, not a closed connection."""
    space = Netns.create()
    zookeeper = EmbeddedZooKeeper(tmp_path / "zookeeper", host=space.zookeeper_host)
    zk: KazooClient | None = None
    group: RoutedGroup | None = None
    try:
        zookeeper.start()
        zk = new_test_client(zookeeper.connect_string)
        zk.start(timeout=15)
        inside = Placement(
            zookeeper.connect_string, f"{space.grpc_inside}:0", tuple(space.prefix), space.grpc_inside
        )
        placement = lambda node: inside if node == CUT_OFF else Placement(zookeeper.connect_string)  # noqa: E731
        group = _start_group(spark, tmp_path, zk, daemon_factory, placement, CUT_OFF)
        yield group, space.cut_zookeeper
    finally:
        daemons = list(group.daemons.values()) if group is not None else []
        for daemon in daemons:
            daemon.terminate()  # before their ZooKeeper and their network go, all at once
        for daemon in daemons:
            daemon.stop()
        if zk is not None:
            zk.stop()
            zk.close()
        zookeeper.stop()
        space.delete()


def _reads_served(group: RoutedGroup, node: str) -> float:
    host, port = group.metrics[node]
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "epochstate_requests_total" and sample.labels.get("method") == "MultiGet"
    )


@pytest.mark.parametrize("cut", ["proxy", "netns"])
def test_a_daemon_cut_off_from_zookeeper_is_no_longer_routed_to(
    cut: str, request: pytest.FixtureRequest
) -> None:
    """``proxy``: a TCP proxy between n3 and ZooKeeper closes its connections and refuses new
    ones; ``netns``: n3's network namespace loses its link to ZooKeeper (packets dropped)."""
    group, cut_off = request.getfixturevalue("cut_group" if cut == "proxy" else "partitioned_group")
    keys = group.oracle.keys()
    expected = _expected(group.oracle, 1)
    with group.client("n1") as client:
        assert "n3" in {r.node for s in client.locate(JOB).shards for r in s.replicas if r.serving}
        # The partitions n3 holds (it ingests only its shards'): a key of one of them.
        held = [s for s in client.locate(JOB).shards if "n3" in {r.node for r in s.replicas}]
        mine = next(k for k, _, p in group.oracle.states[1].values() if any(s.covers(p) for s in held))

        cut_off()  # n3 keeps serving gRPC, but its session expires and its znodes go
        cut_at = time.monotonic()
        assert eventually(
            lambda: (
                "n3"
                not in {
                    r.node for s in client.locate(JOB, refresh=True).shards for r in s.replicas if r.serving
                }
            ),
            WAIT,
        )
        print(f"\nZooKeeper cut ({cut}): n3 no longer routed to after {time.monotonic() - cut_at:.1f} s")
        assert eventually(lambda: "n3" not in group.announced(), WAIT)
        before = _reads_served(group, "n3")
        for _ in range(40):
            many = client.multi_get(JOB, keys, epoch=1)
            assert {canon(r.key): (r.found, plain(r.value)) for r in many} == expected
        assert _reads_served(group, "n3") == before  # not one read reached n3
        # n3 still answers when asked directly (for a key of its partitions): only routing left it.
        with group.daemons["n3"].client() as direct:
            assert plain(direct.get(JOB, mine, epoch=1).value) == expected[canon(mine)][1]
    # Cut off, n3 has nothing to leave: it stops without waiting out its shutdown grace (5 s)
    # for threads that wait on ZooKeeper.
    stopping = time.monotonic()
    assert group.daemons["n3"].stop() == 0
    assert time.monotonic() - stopping < SHUTDOWN_GRACE, group.daemons["n3"].log_tail()


@pytest.mark.parametrize("name", ["typed", "windowed"])
def test_oracle_through_the_routed_client(
    spark: Any,
    tmp_path: Path,
    zk_connect: str,
    make_zk_client: Callable[..., KazooClient],
    daemon_factory: Callable[..., DaemonProcess],
    name: str,
) -> None:
    """Every epoch and every key equals Spark's reader through the routed client, for keys of
    every type the oracle queries use (decimal, date, boolean, nullable timestamp; a window
    struct, long and unicode string), each routed to the shard of the partition it falls in."""
    schema_ddl, build, rows, mode = QUERIES[name]
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", build, schema_ddl, mode, name=name).start()
    try:
        for batch in range(5):
            stream.feed(rows(batch))
    finally:
        stream.stop()
    committed = stream.committed()
    nodes = ("n1", "n2")
    daemons = {
        node: daemon_factory(
            {},
            name=node,
            zookeeper=zk_connect,
            extra_args=["--group", GROUP, "--node", node, "--poll-interval", "0.1"],
        )
        for node in nodes
    }
    zk = make_zk_client()
    members = LAYOUT.group_members(GROUP)
    assert eventually(lambda: zk.exists(members) is not None and len(zk.get_children(members)) == 2, WAIT)
    # One replica per shard: each daemon is the only one routed to for its partition.
    JobDefinitions(zk, LAYOUT, GROUP).add(name, str(stream.checkpoint), shards=2, partitions=2)
    replicas = LAYOUT.replicas(name)
    assert eventually(lambda: zk.exists(replicas) is not None and len(zk.get_children(replicas)) == 2, WAIT)
    for daemon in daemons.values():
        daemon.wait_for_epoch(name, committed[-1], WAIT)

    expected = {e: spark_state(spark, stream.checkpoint, e) for e in committed}
    all_keys = {k: key for state in expected.values() for k, (key, _, _) in state.items()}
    with RoutedClient([daemons["n1"].target], timeout=30) as client:
        location = client.locate(name)
        assert [(s.first, s.last, len(s.replicas)) for s in location.shards] == [
            (0, 0, 1),
            (1, LAST_PARTITION, 1),
        ]
        routed_to = {canon(key): client.route(name, key) for key in all_keys.values()}
        for epoch in committed:
            for k, (_, _, partition) in expected[epoch].items():
                assert routed_to[k].covers(partition), (k, partition)
            lookups = client.multi_get(name, list(all_keys.values()), epoch=epoch)
            assert all(lk.epoch == epoch for lk in lookups)
            got = {
                canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition) for lk in lookups if lk.found
            }
            assert got == expected[epoch], f"epoch {epoch}"
            scanned = {canon(lk.key) for lk in client.scan(name, epoch=epoch, page_size=3)}
            assert scanned == set(expected[epoch]), f"scan at epoch {epoch}"
