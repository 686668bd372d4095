"""Every Spark release users run: its checkpoints read right, its driver's listener
and (from 4.0) the aligned Kafka source and sink working.

Per release (``releases.UNDER_TEST``: 3.5, 4.0, 4.1, 4.2; the pin, 4.3, is the main
suite's), the fixed workload runs once in that release's own PySpark (``runner``):
aggregation, dropDuplicates, stream-stream join and transformWithStateInPandas
where the release has it, on the HDFS-backed provider
and on RocksDB with and without changelog checkpointing, and in checkpoint format
2 where the release has it; the listener reports every commit to a daemon; the
aligned chain runs where the release has Python data sources. The daemon of this
clone then reads the checkpoints and every store x epoch x key is compared with
that release's own state reader (the pin's where the release's cannot read).
Checkpoints of 3.5 and 4.0 are then continued by the pin (``continuation``) and
every epoch, before and after the upgrade, compared with the pin's reader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.core.alignment.records import SubjectEpoch
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.spark_plugin.kafka.reader import read_range
from tests.compat.compare import Tally, check_store
from tests.compat.continuation import Continuations
from tests.compat.releases import UNDER_TEST, SparkRelease
from tests.compat.runner import ReleaseRun, ReleaseRunner, Say
from tests.compat.workload.queries import BATCHES, CONTINUED_BATCHES
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.kafka import KafkaBroker
from tests.fixtures.zookeeper import new_test_client

pytestmark = [pytest.mark.compat, pytest.mark.timeout(1800)]

WITH_DATA_SOURCES = [r for r in UNDER_TEST if r.features.python_data_source]


def run_of(releases: ReleaseRunner, release: SparkRelease) -> ReleaseRun:
    run = releases.get(release)
    run.require()
    return run


@pytest.mark.parametrize("release", UNDER_TEST, ids=str)
def test_the_release_has_what_the_matrix_says(releases: ReleaseRunner, release: SparkRelease) -> None:
    run = run_of(releases, release)
    assert run.result["pyspark"] == release.pyspark
    assert run.result["features"] == asdict(release.features)


@pytest.mark.parametrize("release", UNDER_TEST, ids=str)
def test_every_store_epoch_and_key_equals_spark_reader(
    releases: ReleaseRunner,
    release: SparkRelease,
    daemon_factory: Callable[..., DaemonProcess],
    say: Say,
) -> None:
    run = run_of(releases, release)
    assert not run.unreadable, f"no Spark reader could read: {run.unreadable}"
    daemon = daemon_factory({name: job["checkpoint"] for name, job in run.jobs.items()})
    tally = Tally()
    with daemon.client() as client:
        for name, job in run.jobs.items():
            assert job["committed"] == list(range(BATCHES)), name
            daemon.wait_for_epoch(name, job["committed"][-1], timeout=120)
            described = client.describe(name, refresh=True)
            assert not described.problems, (name, described.problems)
            dumps = [d for d in run.stores if d.job == name]
            served = {(s.operator_id, s.store) for s in described.stores}
            assert served == {(d.operator_id, d.store) for d in dumps}, name
            for dump in dumps:
                check_store(client, dump, tally)
    readers: dict[str, int] = {}
    for dump in run.stores:
        readers[dump.reader] = readers.get(dump.reader, 0) + 1
    say(
        f"{release}: {len(run.jobs)} checkpoints, {tally.stores} stores, "
        f"{tally.lookups} key x epoch lookups, {tally.scans} scans, {len(tally.mismatches)} mismatches; "
        f"stores read by pyspark {readers}"
    )
    assert tally.lookups > 0
    assert not tally.mismatches, tally.report()


def _own_reader_errors(run: ReleaseRun) -> dict[str, str | None]:
    return {f"{d.job} {d.store}": d.own_error for d in run.stores if d.own_error}


@pytest.mark.parametrize("release", UNDER_TEST, ids=str)
def test_the_release_reader_reads_what_the_matrix_says(
    releases: ReleaseRunner, release: SparkRelease
) -> None:
    """The stores the pin's reader had to read instead: all of them where the release
    has no reader; else those of format 2 where its reader cannot read format 2."""
    run = run_of(releases, release)
    by_pin = {(d.job, d.store) for d in run.stores if d.own_error}
    if not release.features.state_reader:
        assert by_pin == {(d.job, d.store) for d in run.stores}
    elif release.features.checkpoint_format_v2 and not release.reader_reads_format_v2:
        assert by_pin == {(d.job, d.store) for d in run.stores if run.jobs[d.job]["format_v2"]}, (
            _own_reader_errors(run)
        )
        assert by_pin, "format 2 checkpoints were written"
    else:
        assert not by_pin, _own_reader_errors(run)


@pytest.mark.parametrize("release", UNDER_TEST, ids=str)
def test_the_listener_reports_every_commit(releases: ReleaseRunner, release: SparkRelease) -> None:
    """The daemon knew no job and looks at checkpoints once a minute: it followed
    every job, ingested its newest epoch and registered its epochs in ZooKeeper from
    the reports of the listener in this release's driver alone."""
    run = run_of(releases, release)
    listener = run.result["listener"]
    commits = sum(len(job["committed"]) for job in run.jobs.values())
    assert listener["dropped"] == 0
    assert listener["sent"] >= commits
    committed = {name: job["committed"] for name, job in run.jobs.items()}
    assert run.followed == {name: epochs[-1] for name, epochs in committed.items()}
    assert run.registered == committed


def _read_epoch(broker: KafkaBroker, epoch: SubjectEpoch) -> list[list[Any]]:
    return sorted(
        [record.value.decode(), r.partition, record.offset, epoch.epoch]
        for r in epoch.ranges
        for record in read_range(broker.config(), r, timeout=10)
        if record.value is not None
    )


@pytest.mark.parametrize("release", WITH_DATA_SOURCES, ids=str)
def test_a_chained_pair_aligns(
    releases: ReleaseRunner, release: SparkRelease, kafka_broker: KafkaBroker
) -> None:
    """Upstream batch n is subject epoch n with exactly its rows (from two write tasks,
    an empty batch included); downstream batch n reads exactly subject epoch n, once,
    and records the mapping."""
    run = run_of(releases, release)
    chain = run.result["chain"]
    assert "error" not in chain, chain["error"]
    client: KazooClient = new_test_client(run.zookeeper)
    client.start(timeout=15)
    try:
        registry = SubjectRegistry(client)
        topic = chain["topic"]
        fed = chain["fed"]
        assert registry.epochs(topic) == list(range(len(fed)))
        epochs = {k: registry.get_epoch(topic, k) for k in range(len(fed))}
        source = registry.get_source(topic, "downstream")
    finally:
        client.stop()
        client.close()
    assert source is not None and source.mode == "aligned"
    assert dict(source.mapping) == {b: b for b in range(len(fed))}
    assert sorted(chain["runs"]) == [str(b) for b in range(len(fed))]
    for k, epoch in epochs.items():
        assert epoch is not None
        assert {r.partition for r in epoch.ranges} <= {0, 1}
        expected = _read_epoch(kafka_broker, epoch)
        assert [row[0] for row in expected] == sorted(fed[k]), k
        assert chain["runs"][str(k)] == [expected], f"batch {k} ran once and read exactly epoch {k}"


CONTINUED = [r for r in UNDER_TEST if r.series in ("3.5", "4.0")]


@pytest.mark.parametrize("release", CONTINUED, ids=str)
def test_a_checkpoint_continued_by_the_pin_equals_its_reader_at_every_epoch(
    continuations: Continuations,
    release: SparkRelease,
    daemon_factory: Callable[..., DaemonProcess],
    say: Say,
) -> None:
    """The user upgrades to the pin and restarts the same queries on the same
    checkpoints (see ``continuation``): a daemon that followed them across the
    upgrade and one started afterwards serve every epoch, the old release's and the
    pin's, as the pin's reader reads it."""
    continued = continuations.get(release)
    assert not continued.unreadable, f"the pin's reader could not read: {continued.unreadable}"
    late = daemon_factory({name: job["checkpoint"] for name, job in continued.jobs.items()}, name="late")
    for daemon, who in ((continued.live, "followed across the upgrade"), (late, "started afterwards")):
        tally = Tally()
        with daemon.client() as client:
            for name, job in continued.jobs.items():
                assert job["committed"] == list(range(BATCHES + CONTINUED_BATCHES)), name
                daemon.wait_for_epoch(name, job["committed"][-1], timeout=120)
                described = client.describe(name, refresh=True)
                assert not described.problems, (who, name, described.problems)
                dumps = [d for d in continued.stores if d.job == name]
                assert {(s.operator_id, s.store) for s in described.stores} == {
                    (d.operator_id, d.store) for d in dumps
                }, (who, name)
                for dump in dumps:
                    check_store(client, dump, tally)
        say(
            f"{release} continued by the pin, daemon {who}: {len(continued.jobs)} checkpoints, "
            f"{tally.stores} stores, {tally.lookups} key x epoch lookups, {len(tally.mismatches)} mismatches"
        )
        assert tally.lookups > 0
        assert not tally.mismatches, f"{who}:\n{tally.report()}"
