"""Power loss at random points of ingest: no answered epoch changes, and ZooKeeper
never announces an epoch the store lost.

A real Spark job commits epoch after epoch while the real daemon follows it with
ZooKeeper. Each round the daemon is killed at a random moment after a commit
(before, during or after that epoch's ingest), every write it had not synced is
lost (:mod:`tests.fixtures.powerloss`), and it starts again on what is left. After
each power loss the restored store must hold every epoch ZooKeeper lists; after
each restart every read answered before must answer the same or be retired; at
the end every retained epoch equals Spark's reader. The control: with
``sync_writes`` off, the same power loss takes back epochs ZooKeeper announced.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from epochstate.client import EpochRetired, EpochStateClient
from epochstate.core.zookeeper.layout import parse_epoch_name
from epochstate.daemon.store.versioned import VersionedStore
from tests.e2e.test_crash import totals
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_store
from tests.fixtures.powerloss import PowerLoss
from tests.fixtures.streams import FileStream

ROUNDS = 5 if os.environ.get("CI") == "true" else 8
JOB = "pl"
Answer = dict[str, tuple[Any, Any]]

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def rows(batch: int) -> list[dict[str, Any]]:
    return [
        {"user": (batch * 1500 + i) % 9000, "region": f"r{i % 5}", "amount": batch * 7 + i}
        for i in range(3000)
    ]


def announced(zk: KazooClient) -> list[int]:
    """The epochs ZooKeeper lists for the job (``<root>/jobs/<job>/epochs``)."""
    try:
        names = zk.get_children(f"/epochstate/jobs/{JOB}/epochs")
    except NoNodeError:
        return []
    return sorted(e for e in map(parse_epoch_name, names) if e is not None)


def stored(root: Path) -> tuple[int, int]:
    """(oldest, newest) epoch of the job in the store at ``root``; -1s when none."""
    store = VersionedStore(root)
    try:
        job = store.job(JOB)
        if job is None:
            return -1, -1
        progress = store.progress(job.job_id)
        return progress.oldest, progress.newest
    finally:
        store.close()


def scan(client: EpochStateClient, epoch: int) -> Answer:
    return {
        canon(lk.key): (plain(lk.key), plain(lk.value))
        for lk in client.scan(JOB, epoch=epoch, page_size=5000)
    }


def recheck(client: EpochStateClient, answers: dict[int, Answer]) -> tuple[int, int]:
    """Every epoch answered before reads the same or is retired: (same, retired)."""
    same = retired = 0
    for epoch, answer in answers.items():
        try:
            got = scan(client, epoch)
        except EpochRetired:
            retired += 1
            continue
        assert got == answer, f"epoch {epoch} changed after a power loss"
        same += 1
    return same, retired


def test_power_loss_at_random_points_of_ingest(
    spark: Any,
    tmp_path: Path,
    daemon_factory: Callable[..., DaemonProcess],
    zk_connect: str,
    zk_client: KazooClient,
) -> None:
    rng = random.Random(14)
    power = PowerLoss(tmp_path / "daemon" / "store", tmp_path / "durable")
    stream = FileStream(
        spark, tmp_path / "in", tmp_path / "cp", totals, "user long, region string, amount long", name=JOB
    ).start()
    answers: dict[int, Answer] = {}
    table = []
    same = retired = 0
    batch = 0
    try:
        power.baseline()
        daemon = daemon_factory(
            {JOB: str(tmp_path / "cp")},
            zookeeper=zk_connect,
            env=power.env(),
            extra_args=["--retention-epochs", "5"],
        )
        for round_ in range(ROUNDS):
            for _ in range(rng.randint(1, 2)):
                stream.feed(rows(batch))
                batch += 1
            delay = rng.uniform(0.0, 0.6)
            time.sleep(delay)
            daemon.kill()
            listed = announced(zk_client)
            power.lose_power()
            oldest, newest = stored(power.root)
            table.append((round_, f"{delay:.2f}", batch - 1, max(listed, default=-1), oldest, newest))
            assert max(listed, default=-1) <= newest, (
                f"round {round_}: ZooKeeper lists {listed}, the store {newest}"
            )
            power.baseline()
            daemon.start()
            with daemon.client(timeout=30) as client:
                s, r = recheck(client, answers)
                same, retired = same + s, retired + r
                latest = client.jobs()[0].latest_epoch
                for epoch in {latest, rng.randint(max(0, latest - 4), latest)} if latest >= 0 else ():
                    answers[epoch] = scan(client, epoch)
        committed = stream.committed()
        daemon.wait_for_epoch(JOB, committed[-1], timeout=120)
        retained = committed[-5:]
        oracle = spark_store(spark, tmp_path / "cp", retained)
        with daemon.client(timeout=60) as client:
            s, r = recheck(client, answers)
            same, retired = same + s, retired + r
            for epoch in retained:
                expected = {k: (key, value) for k, (key, value, _) in oracle.states[epoch].items()}
                assert scan(client, epoch) == expected, f"epoch {epoch} differs from Spark's reader"

        print("round  kill delay s  newest committed  newest in ZooKeeper  store after power loss")
        for r_, delay_, c, z, o, n in table:
            print(f"{r_:5d}  {delay_:>12}  {c:16d}  {z:19d}  {o}..{n}")
        print(
            f"{ROUNDS} power losses; answered reads read again: {same} same, {retired} retired, 0 changed; "
            f"epochs lost from ZooKeeper's list: 0"
        )

        # The control: without sync, ZooKeeper announces epochs a power loss takes back.
        daemon.stop()
        power.baseline()
        daemon.env["EPOCHSTATE_SYNC_WRITES"] = "false"
        daemon.start()
        for _ in range(2):
            stream.feed(rows(batch))
            batch += 1
        deadline = time.monotonic() + 60
        while max(announced(zk_client), default=-1) < batch - 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        daemon.kill()
        listed = announced(zk_client)
        power.lose_power()
        _, newest = stored(power.root)
        print(
            f"sync_writes off: ZooKeeper lists up to epoch {max(listed)}, the store after power loss {newest}"
        )
        assert max(listed) > newest
    finally:
        stream.stop()
