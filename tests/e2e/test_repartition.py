"""A checkpoint repartitioned offline (Spark 4.2+), both ways, served as Spark's reader reads it.

One workload per provider, shared by the module: a streaming aggregation runs
epochs 0-2 on 3 partitions and stops; Spark's checkpoint manager repartitions its
state to 5 partitions (epoch 3, the *repartition batch*: no input, the state in
the new layout); the query runs epochs 4-5 on 5 partitions and stops; the state is
repartitioned to 2 partitions (epoch 6) and the query runs epochs 7-8.

Two daemons read it: one that followed the job live from its first epoch (it meets
each repartition batch as the next epoch), and one started once it was done. At
every epoch each answers Get, MultiGet and Scan for every key as Spark's reader
does, partition included, and says how many partitions that epoch's state has.

What Spark does (4.3.0): the repartition batch's offset log entry carries the new
``spark.sql.shuffle.partitions`` and the same source offsets as the batch before;
every partition of the new layout gets a full snapshot of the new version; the
operator metadata (``state/<op>/_metadata/metadata``, and so Spark's
``state-metadata`` reader) keeps the first count. The HDFS-backed provider is
refused (``STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import EpochDamaged, EpochStateClient
from epochstate.client.routed import RoutedClient
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import StoreOracle, assert_store_equals_oracle, canon, plain, spark_store
from tests.fixtures.over_time import assert_history_and_changes_equal_oracle
from tests.fixtures.repartition import JOB, LAYOUT, REPARTITIONS, SCHEMA, Repartitioned, orders, totals
from tests.fixtures.streams import HDFS, FileStream, copy_checkpoint
from tests.fixtures.zookeeper import eventually

pytestmark = pytest.mark.spark


def test_spark_moved_keys_between_partitions_at_each_repartition_batch(repartitioned: Repartitioned) -> None:
    """The workload is what it claims: each epoch's keys sit in its layout's partitions,
    and both repartitions moved keys (a daemon reading the old layout would miss them)."""
    states = repartitioned.oracle.states
    for epoch, count in LAYOUT.items():
        assert states[epoch], f"epoch {epoch} has no state"
        assert {p for _, _, p in states[epoch].values()} <= set(range(count)), f"epoch {epoch}"
    for epoch in REPARTITIONS:
        before, after = states[epoch - 1], states[epoch]
        assert before.keys() == after.keys(), "a repartition batch reads no input"
        moved = [k for k in before if before[k][2] != after[k][2]]
        assert moved, f"no key moved at epoch {epoch}"
    assert max(p for _, _, p in states[5].values()) >= 3, "partitions 3-4 hold keys"


@pytest.mark.parametrize("which", ["live", "started_after"])
def test_every_epoch_equals_spark_reader_across_both_repartitions(
    repartitioned: Repartitioned, which: str
) -> None:
    daemon: DaemonProcess = getattr(repartitioned, which)
    oracle = repartitioned.oracle
    compared = 0
    with daemon.client() as client:
        assert_store_equals_oracle(client, JOB, oracle)  # MultiGet and paged Scan, every epoch
        for epoch, expected in sorted(oracle.states.items()):
            for key in oracle.keys():  # noqa: SIM118 (a StoreOracle is no dict)
                lookup = client.get(JOB, key, epoch=epoch)
                got = (plain(lookup.key), plain(lookup.value), lookup.partition) if lookup.found else None
                assert got == expected.get(canon(key)), f"Get {key} at epoch {epoch}"
                compared += 1
        assert not client.describe(JOB, refresh=True).problems
        # A key's history and each epoch's changes too: a repartition batch moves keys
        # (new versions, their values unchanged) and changes no value.
        oldest = client.describe(JOB).oldest_epoch
        assert_history_and_changes_equal_oracle(client, JOB, oracle, first=oldest)
    assert compared == len(LAYOUT) * len(oracle.keys())


@pytest.mark.parametrize("which", ["live", "started_after"])
def test_describe_and_locate_give_each_epochs_partition_count(
    repartitioned: Repartitioned, which: str
) -> None:
    daemon: DaemonProcess = getattr(repartitioned, which)
    with daemon.client() as client:
        store = client.describe(JOB, refresh=True).store()
        assert {e: store.at(e).num_partitions for e in LAYOUT} == LAYOUT
        assert store.num_partitions == LAYOUT[max(LAYOUT)]

    with RoutedClient([daemon.target]) as routed:
        location = routed.locate(JOB)
        assert location.layouts == {(0, "default"): ((0, 3), (3, 5), (6, 2))}
        assert {e: location.partitions_at(0, "default", e) for e in LAYOUT} == LAYOUT


def test_a_daemon_restarted_keeps_each_epochs_layout(repartitioned: Repartitioned) -> None:
    """The shapes are written with their epochs: a restart reads them back, it does not
    re-learn them from the checkpoint (whose operator metadata has the first count)."""
    daemon = repartitioned.live
    daemon.stop()
    daemon.start()
    with daemon.client() as client:
        store = client.describe(JOB, refresh=True).store()
        assert {e: store.at(e).num_partitions for e in LAYOUT} == LAYOUT
        _assert_epochs(client, repartitioned.oracle, [2, 3, 5, 6, 8])


def _assert_epochs(client: EpochStateClient, oracle: StoreOracle, epochs: list[int]) -> None:
    assert_store_equals_oracle(client, JOB, oracle, epochs)


def test_an_epoch_pinning_a_setting_this_daemon_does_not_know_is_refused_with_it(
    repartitioned: Repartitioned, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    """The rule for a shape the daemon does not understand: Spark pins every setting that
    decides how state is written in each epoch's offset log entry; an entry naming one the
    daemon does not know (here an invented one, as a release next year might add) is
    refused with it in the reason, and the epochs before are served as before."""
    checkpoint = copy_checkpoint(repartitioned.checkpoint, tmp_path / "cp")
    invented = "spark.sql.streaming.stateStore.rocksdb.rowLayout"
    for epoch in (7, 8):
        entry = checkpoint / "offsets" / str(epoch)
        version, meta, *rest = entry.read_text(encoding="utf-8").split("\n")
        fields = json.loads(meta)
        fields["conf"][invented] = "columnar"
        entry.write_text("\n".join([version, json.dumps(fields), *rest]), encoding="utf-8")
    daemon = daemon_factory({JOB: str(checkpoint)}, extra_args=["--retention-epochs", "100"])
    daemon.wait_for_epoch(JOB, 6)
    with daemon.client() as client:
        assert eventually(lambda: 7 in {p.epoch for p in client.describe(JOB, refresh=True).problems}, 60)
        (problem,) = [p for p in client.describe(JOB, refresh=True).problems if p.epoch == 7]
        assert f"{invented}=columnar" in problem.reason
        # Every epoch that pins it is refused with it, none is left waiting.
        assert eventually(
            lambda: {7, 8} <= {p.epoch for p in client.describe(JOB, refresh=True).problems}, 60
        )
        for epoch in (7, 8):
            with pytest.raises(EpochDamaged, match=invented):
                client.get(JOB, repartitioned.oracle.keys()[0], epoch=epoch)
        assert client.describe(JOB).latest_epoch == 6
        assert_store_equals_oracle(client, JOB, repartitioned.oracle, range(7))


def test_spark_refuses_to_repartition_hdfs_state_and_the_daemon_reads_only_committed_epochs(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    """The HDFS-backed provider cannot be repartitioned. Spark says so only after it wrote
    the repartition batch's offset log entry (with the new partition count), which it
    never commits: the query cannot restart until that entry is removed. The daemon
    reads committed epochs only, so it keeps serving every epoch as before."""
    session = HDFS.session(spark)
    session.conf.set("spark.sql.shuffle.partitions", "3")
    checkpoint = tmp_path / "cp"
    stream = FileStream(session, tmp_path / "in", checkpoint, totals, SCHEMA).start()
    try:
        for batch in range(2):
            stream.feed(orders(batch))
    finally:
        stream.stop()
    daemon = daemon_factory({JOB: str(checkpoint)})
    daemon.wait_for_epoch(JOB, 1)
    with pytest.raises(Exception, match="UNSUPPORTED_PROVIDER"):
        session._streamingCheckpointManager.repartition(str(checkpoint), 5)
    assert sorted(p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()) == ["0", "1", "2"]
    assert stream.committed() == [0, 1]
    oracle = spark_store(spark, checkpoint, [0, 1])
    with daemon.client() as client:
        assert_store_equals_oracle(client, JOB, oracle)
        described = client.describe(JOB, refresh=True)
        assert (described.latest_epoch, described.committed_epoch, described.problems) == (1, 1, ())
        assert {e: described.store().at(e).num_partitions for e in (0, 1)} == {0: 3, 1: 3}
