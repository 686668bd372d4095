"""The daemon's view of the subjects and the aligned-epoch resolution, against a real ZooKeeper.

Records are written in the shared format (``subject_records``), as the aligned
Kafka sink and source write them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from epochstate.core.zookeeper.subject_records import SubjectEpochRecord, SubjectSourceRecord
from epochstate.daemon.registry import Layout, RegistryUnavailable
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.aligned import SubjectAlignment
from epochstate.daemon.server.epochs import EpochRetired, EpochWaitTimedOut, NoSuchEpoch
from epochstate.daemon.store.catalog import JobEntry
from epochstate.daemon.store.descriptors import JobDescriptor
from epochstate.devtools.zookeeper import EmbeddedZooKeeper, four_letter_word
from epochstate.v1 import epochstate_pb2 as pb
from tests.fixtures.zookeeper import eventually, new_test_client

LAYOUT = Layout()


def job(name: str, query_id: str = "") -> JobEntry:
    return JobEntry(JobDescriptor(name, 1, f"/checkpoints/{name}", query_id or f"q-{name}"))


def write_epochs(client: KazooClient, topic: str, epochs: range, writer: str, query_id: str) -> None:
    for k in epochs:
        record = SubjectEpochRecord({0: (k, k + 1)}, writer, query_id, 1)
        client.create(LAYOUT.subject_epoch(topic, k), record.encode(), makepath=True)


def write_source(
    client: KazooClient, topic: str, reader: str, mapping: dict[int, int], mode: str = "aligned"
) -> None:
    path = LAYOUT.subject_source(topic, reader)
    data = SubjectSourceRecord(mode, mapping, 1).encode()  # type: ignore[arg-type]
    if client.exists(path):
        client.set(path, data)
    else:
        client.create(path, data, makepath=True)


@pytest.fixture
def alignment(zk_client: KazooClient) -> Iterator[SubjectAlignment]:
    view = SubjectView(zk_client)
    yield SubjectAlignment(view)
    view.close()


def aligned(other: str, epoch: int, subject: str = "") -> pb.AlignedWith:
    return pb.AlignedWith(job=other, epoch=epoch, subject=subject)


def test_writer_readers_and_a_reader_of_the_writer_line_up(
    zk_client: KazooClient, alignment: SubjectAlignment
) -> None:
    write_epochs(zk_client, "t", range(4), "orders", "q-orders")
    write_source(zk_client, "t", "enrich", {10: 0, 11: 1, 12: 2, 13: 3})  # started at its batch 10
    write_source(zk_client, "t", "audit", {0: 2, 1: 3})  # started at subject epoch 2
    orders, enrich, audit = job("orders"), job("enrich"), job("audit")

    assert alignment.epoch_of(orders, aligned("enrich", 12), 1.0) == 2  # the epoch that wrote what 12 reads
    assert alignment.epoch_of(enrich, aligned("orders", 3), 1.0) == 13
    assert alignment.epoch_of(audit, aligned("enrich", 13), 1.0) == 1  # both read subject epoch 3
    assert alignment.epoch_of(orders, aligned("orders", 7), 1.0) == 7
    with pytest.raises(EpochRetired):
        alignment.epoch_of(audit, aligned("enrich", 10), 1.0)  # audit never read subject epoch 0
    with pytest.raises(NoSuchEpoch, match="share no subject"):
        alignment.epoch_of(job("orders", "another-query"), aligned("enrich", 12), 1.0)


def test_a_waiting_resolution_wakes_when_the_mapping_is_recorded(
    zk_client: KazooClient, alignment: SubjectAlignment
) -> None:
    write_epochs(zk_client, "t", range(2), "orders", "q-orders")
    write_source(zk_client, "t", "enrich", {0: 0})
    orders = job("orders")
    with pytest.raises(EpochWaitTimedOut, match="did not read its epoch 1"):
        alignment.epoch_of(orders, aligned("enrich", 1), 0.3)

    recorded_at: list[float] = []

    def record() -> None:
        recorded_at.append(time.monotonic())
        write_source(zk_client, "t", "enrich", {0: 0, 1: 1})

    timer = threading.Timer(0.3, record)
    timer.start()
    assert alignment.epoch_of(orders, aligned("enrich", 1), 10.0) == 1
    timer.join()
    woke_after = time.monotonic() - recorded_at[0]
    print(f"resolved {woke_after * 1000:.0f} ms after the mapping was recorded")
    assert woke_after < 2.0

    write_source(zk_client, "t", "enrich", {0: 0, 1: 1}, mode="unaligned")
    with pytest.raises(NoSuchEpoch, match="unaligned"):
        alignment.epoch_of(orders, aligned("enrich", 2), 10.0)


def test_closing_the_view_wakes_waiting_resolutions(zk_client: KazooClient) -> None:
    write_epochs(zk_client, "t", range(1), "orders", "q-orders")
    write_source(zk_client, "t", "enrich", {0: 0})
    view = SubjectView(zk_client)
    errors: list[BaseException] = []

    def resolve() -> None:
        try:
            SubjectAlignment(view).epoch_of(job("orders"), aligned("enrich", 5), None)
        except BaseException as error:
            errors.append(error)

    waiter = threading.Thread(target=resolve)
    waiter.start()
    time.sleep(0.2)
    view.close()
    waiter.join(5)
    assert not waiter.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], RegistryUnavailable)


def _watches(server: EmbeddedZooKeeper) -> int:
    """The server's count of watches set (``mntr``'s ``zk_watch_count``)."""
    for line in four_letter_word(server.port, "mntr", timeout=10).splitlines():
        name, _, value = line.partition("\t")
        if name == "zk_watch_count":
            return int(value)
    raise AssertionError("mntr reports no zk_watch_count")


def test_names_callers_make_up_cost_no_watch_and_the_cache_is_bounded(
    private_zookeeper_server: EmbeddedZooKeeper,
) -> None:
    client = new_test_client(private_zookeeper_server.connect_string)
    client.start(timeout=30)
    view = SubjectView(client, max_cached=16)
    try:
        write_epochs(client, "t", range(4), "orders", "q-orders")
        readers = [f"reader{i}" for i in range(40)]
        for name in readers:
            write_source(client, "t", name, {0: 0, 1: 1, 2: 2, 3: 3})
        alignment = SubjectAlignment(view)
        assert alignment.epoch_of(job("orders"), aligned("reader0", 2), 5.0) == 2
        settled = _watches(private_zookeeper_server)
        for i in range(300):
            with pytest.raises(NoSuchEpoch, match="share no subject"):
                alignment.epoch_of(job(f"ghost{i}"), aligned("reader0", 1), 5.0)
        assert _watches(private_zookeeper_server) == settled  # made-up jobs: no watch at all
        assert view.cached <= 16

        # More real sources than the cache holds: the least recently used are evicted and
        # read again when needed; the watches stay within the znodes that exist.
        for name in readers:
            assert alignment.epoch_of(job(name), aligned("orders", 3), 5.0) == 3
            assert view.cached <= 16
        assert _watches(private_zookeeper_server) <= 2 + 1 + len(readers) + 1
        # A watched source that changes still wakes and is read afresh.
        write_source(client, "t", "reader39", {0: 0, 1: 1, 2: 2, 3: 3, 4: 3})
        assert eventually(lambda: alignment.epoch_of(job("orders"), aligned("reader39", 4), 5.0) == 3, 10)
    finally:
        view.close()
        client.stop()
        client.close()


def test_a_resolution_sees_every_change_acknowledged_before_it(
    make_zk_client: Callable[..., KazooClient],
) -> None:
    """Read-your-writes across sessions: the writer is another client, as Spark's driver is for the daemon.

    ZooKeeper tells the view's session about a change in a watch event that kazoo
    hands to its event thread; a resolution served from the cache before that
    thread ran would answer as if the change had not been made.
    """
    writer, reader = make_zk_client(), make_zk_client()
    write_epochs(writer, "t", range(1), "orders", "q-orders")
    write_source(writer, "t", "enrich", {0: 0})
    view = SubjectView(reader)
    alignment, orders = SubjectAlignment(view), job("orders")

    def outcome() -> str:
        try:
            return str(alignment.epoch_of(orders, aligned("enrich", 0), 0.0))
        except NoSuchEpoch as error:
            return "share subjects" if "share subjects" in str(error) else str(error)

    stale = []
    try:
        for round_ in range(150):
            if (found := outcome()) != "0":  # every node now cached, with a watch
                stale.append((round_, "before", found))
            # A second subject both jobs touch makes the unnamed selector ambiguous ...
            write_source(writer, "side", "orders", {}, mode="unaligned")
            write_source(writer, "side", "enrich", {0: 0})
            if (found := outcome()) != "share subjects":
                stale.append((round_, "added", found))
            # ... and deleting it resolves it again.
            writer.delete(LAYOUT.subject("side"), recursive=True)
    finally:
        view.close()
    assert stale == [], f"{len(stale)} of 300 resolutions missed a change already made: {stale[:5]}"
