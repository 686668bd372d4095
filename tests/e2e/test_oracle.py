"""The read contract against Spark's own state reader, through the real daemon.

For every committed epoch and every key ever seen, the daemon's answer (found or
absent, value, partition) equals ``spark.read.format("statestore")`` at that batch,
on the default provider (HDFS-backed) and on RocksDB with state checkpoint format
version 2 (files named by unique ids), with and without changelog checkpointing.
So does every key's history, and the changes of every epoch (against Spark's
change feed too, with changelog checkpointing).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from epochstate.client import EpochNotReady, EpochStateClient, RoutedClient
from epochstate.client.values import to_row
from epochstate.v1 import epochstate_pb2 as pb
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.metrics import free_port
from tests.fixtures.oracle import StoreOracle, canon, plain, spark_state
from tests.fixtures.over_time import assert_changes_equal_change_feed, assert_history_and_changes_equal_oracle
from tests.fixtures.streams import CHANGELOG_CHECKPOINTING, FORMAT2_PROVIDERS, HDFS, FileStream, Provider


def windowed(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return (
        frame.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "k", "s")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.collect_list("v").alias("vs"))
    )


def windowed_rows(batch: int) -> list[dict[str, Any]]:
    # Event time advances 15 s per batch: old windows fall behind the watermark
    # and are evicted (removals), while keys repeat within a batch (updates).
    return [
        {
            "k": i % 3,
            "s": ["", "x", "ü€😀"][i % 3],
            "v": i * 1.25,
            "ts": f"2024-01-01T00:{(batch * 15 + i) // 60:02d}:{(batch * 15 + i) % 60:02d}Z",
        }
        for i in range(8)
    ]


def typed(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return frame.groupBy("d", "day", "flag", "at").agg(
        F.max("v").alias("top"),
        F.first(F.struct("k", "s")).alias("first"),
        F.map_from_arrays(F.array(F.max("s")), F.array(F.min("k"))).alias("m"),
        F.sum("dec").alias("dsum"),
    )


def typed_rows(batch: int) -> list[dict[str, Any]]:
    return [
        {
            "d": f"{(i % 4) - 1.5:.2f}",
            "day": f"2024-02-{1 + i % 2:02d}",
            "flag": i % 2 == 0,
            "at": f"2024-03-01T10:00:0{i % 3}Z" if i % 5 else None,
            "v": float(batch * 10 + i),
            "k": i,
            "s": f"s{batch}-{i}",
            "dec": f"{batch}.{i}5",
        }
        for i in range(7)
    ]


def dedup(frame: Any) -> Any:
    return frame.dropDuplicates(["s", "k", "day"])


def dedup_rows(batch: int) -> list[dict[str, Any]]:
    return [{"s": f"u{(batch + i) % 5}", "k": i % 3, "day": "2024-02-01"} for i in range(6)]


QUERIES: dict[str, tuple[str, Callable[[Any], Any], Callable[[int], list[dict[str, Any]]], str]] = {
    "windowed": ("k long, s string, v double, ts timestamp", windowed, windowed_rows, "update"),
    "typed": (
        "d decimal(10,2), day date, flag boolean, at timestamp, v double, k int, s string, dec decimal(30,5)",
        typed,
        typed_rows,
        "update",
    ),
    "dedup": ("s string, k int, day date", dedup, dedup_rows, "append"),
}


@pytest.mark.parametrize("provider", [HDFS, *FORMAT2_PROVIDERS], ids=str)
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_every_epoch_and_key_equals_spark_reader(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess], name: str, provider: Provider
) -> None:
    schema, build, rows, mode = QUERIES[name]
    session = spark if provider is HDFS else provider.session(spark)
    stream = FileStream(session, tmp_path / "in", tmp_path / "cp", build, schema, mode).start()
    # One run serves from two processes: every answer of each is checked against the main one's.
    processes = 2 if (name, provider) == ("dedup", HDFS) else 1
    metrics = {"EPOCHSTATE_METRICS_PORT": str(free_port())} if processes > 1 else {}
    daemon = daemon_factory({name: str(tmp_path / "cp")}, serve_processes=processes, env=metrics, wait=False)
    try:
        for batch in range(6):
            stream.feed(rows(batch))
    finally:
        stream.stop()
    committed = stream.committed()
    assert len(committed) >= 6
    if provider is not HDFS:
        assert list((tmp_path / "cp" / "state").glob("0/0/1_*.*")), "no state files with unique ids"
    daemon.wait_for_epoch(name, committed[-1])

    # Spark's reader finds format 2's files only with the format set in its session.
    expected = {e: spark_state(session, tmp_path / "cp", e) for e in committed}
    all_keys = {k: key for state in expected.values() for k, (key, _, _) in state.items()}
    removed_somewhere = any(set(all_keys) - set(state) for state in expected.values())
    assert removed_somewhere or name == "typed", "the workload should remove keys"

    with daemon.client() as client:
        for epoch in committed:
            lookups = client.multi_get(name, list(all_keys.values()), epoch=epoch)
            assert all(lk.epoch == epoch for lk in lookups)
            got = {
                canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition) for lk in lookups if lk.found
            }
            assert got == expected[epoch], f"epoch {epoch}"
            scanned = {canon(lk.key) for lk in client.scan(name, epoch=epoch, page_size=3)}
            assert scanned == set(expected[epoch]), f"scan at epoch {epoch}"
        assert_local_reads_equal(client, daemon, name, list(all_keys.values()), committed)
        if processes > 1:
            assert_serving_processes_equal(client, daemon, name, list(all_keys.values()), committed)
        oracle = StoreOracle(0, "default", "", "", expected)
        changes = assert_history_and_changes_equal_oracle(client, name, oracle)
    if provider.conf.get(CHANGELOG_CHECKPOINTING) == "true":
        assert_changes_equal_change_feed(session, tmp_path / "cp", oracle, changes)


def assert_same_answers(
    main: EpochStateClient, other: EpochStateClient, job: str, rows: list[pb.Row], committed: list[int]
) -> None:
    """Every key of every epoch, and every Scan page, read the same bytes from both."""
    for epoch in committed:
        request = pb.MultiGetRequest(
            store=pb.StoreRef(job=job), keys=rows, epoch=pb.EpochSelector(exact=epoch)
        )
        assert other.stub.MultiGet(request) == main.stub.MultiGet(request), f"epoch {epoch}"
        scan = pb.ScanRequest(store=pb.StoreRef(job=job), epoch=pb.EpochSelector(exact=epoch), limit=2)
        while True:
            page = main.stub.Scan(scan)
            assert other.stub.Scan(scan) == page, f"scan at epoch {epoch}"
            if not page.next_page_token:
                break
            scan.page_token = page.next_page_token


def serving_sockets(daemon: DaemonProcess) -> list[Path]:
    """The private sockets of the daemon's serving processes (beyond the main one)."""
    return sorted(p for p in (daemon.data_dir / "serving").glob("*.sock") if p.stem.isdigit())


def serving_pids(daemon: DaemonProcess) -> set[int]:
    assert daemon.process is not None
    tasks = Path(f"/proc/{daemon.process.pid}/task")  # each thread lists the children it started
    return {int(c) for task in tasks.iterdir() for c in (task / "children").read_text().split()}


def assert_serving_processes_equal(
    client: EpochStateClient, daemon: DaemonProcess, job: str, keys: list[Any], committed: list[int]
) -> None:
    """Each serving process answers every key of every epoch with the main process's bytes;
    one killed (-9) is started again, and calls to the port meanwhile are all answered."""
    schema = client.describe(job).store()
    rows = [to_row(key, schema.key) for key in keys]
    (private,) = serving_sockets(daemon)
    with EpochStateClient(daemon.unix_target) as main, EpochStateClient(f"unix://{private}") as other:
        assert_same_answers(main, other, job, rows, committed)
        assert_one_client_spreads(daemon, main, job, rows, committed)
        assert_routed_client_spreads(daemon, client, job, keys, committed)
    (killed,) = serving_pids(daemon)
    answers: list[int] = []
    failures: list[Exception] = []
    stop = threading.Event()

    def read_on() -> None:
        while not stop.is_set():
            try:
                with EpochStateClient(daemon.target, timeout=30) as caller:  # a new connection each time
                    answers.append(caller.get(job, keys[0], epoch=committed[-1]).epoch)
            except Exception as error:
                failures.append(error)

    reader = threading.Thread(target=read_on)
    reader.start()
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not (serving_pids(daemon) - {killed}) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    reader.join()
    assert not failures
    assert answers and set(answers) == {committed[-1]}
    (restarted,) = serving_pids(daemon)
    assert restarted != killed
    with (
        EpochStateClient(daemon.unix_target) as main,
        EpochStateClient(f"unix://{private}", timeout=30) as other,
    ):
        other.jobs()  # retried until the restarted process serves
        assert_same_answers(main, other, job, rows, committed)


def gets_by_process(daemon: DaemonProcess) -> dict[str, float]:
    """The Gets each process of ``daemon`` answered, by process ("0": the main one), from
    its metrics endpoint."""
    port = int(daemon.env["EPOCHSTATE_METRICS_PORT"])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.labels.get("process", "0"): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in ("epochstate_requests_total", "epochstate_serving_requests_total")
        and sample.labels.get("method") == "Get"
        and sample.labels.get("code") == "OK"
    }


def assert_one_client_spreads(
    daemon: DaemonProcess, main: EpochStateClient, job: str, rows: list[pb.Row], committed: list[int]
) -> None:
    """One client's Gets land on both processes (its connections take turns), and answer
    what the main process answers alone."""
    before = gets_by_process(daemon)
    connections = 12  # all on one process: odds of 1 in 2048
    with EpochStateClient(daemon.target, connections=connections) as spread:
        for epoch in committed:
            for row in rows:
                request = pb.GetRequest(
                    store=pb.StoreRef(job=job), key=row, epoch=pb.EpochSelector(exact=epoch)
                )
                assert spread.stub.Get(request) == main.stub.Get(request), f"epoch {epoch}"
    after = gets_by_process(daemon)
    main_gets = len(committed) * len(rows)  # the main client's, over the Unix socket
    spread_gets = {p: after.get(p, 0) - before.get(p, 0) for p in ("0", "1")}
    spread_gets["0"] -= main_gets
    assert sum(spread_gets.values()) == main_gets
    assert all(n > 0 for n in spread_gets.values()), spread_gets


def assert_routed_client_spreads(
    daemon: DaemonProcess, client: EpochStateClient, job: str, keys: list[Any], committed: list[int]
) -> None:
    """A routed client's Gets land on both processes of the replica it routes to, as a direct
    client's do, and answer what the direct client answers."""
    epoch = committed[-1]
    expected = [client.get(job, key, epoch=epoch) for key in keys]
    before = gets_by_process(daemon)
    calls = 0
    with RoutedClient([daemon.target], connections=12) as routed:
        while calls < 48:  # past the calls the first connection takes alone
            assert [routed.get(job, key, epoch=epoch) for key in keys] == expected
            calls += len(keys)
    after = gets_by_process(daemon)
    routed_gets = {p: after.get(p, 0) - before.get(p, 0) for p in ("0", "1")}
    assert sum(routed_gets.values()) == calls
    assert all(n > 0 for n in routed_gets.values()), routed_gets


def assert_local_reads_equal(
    client: EpochStateClient, daemon: DaemonProcess, job: str, keys: list[Any], committed: list[int]
) -> None:
    """In-process reads of the daemon's store (``local://``) answer every key of every
    epoch with the daemon's bytes (MultiGet and every Scan page), and refuse what it refuses."""
    schema = client.describe(job).store()
    rows = [to_row(key, schema.key) for key in keys]
    with EpochStateClient(f"local://{daemon.data_dir}") as local:
        for epoch in committed:
            request = pb.MultiGetRequest(
                store=pb.StoreRef(job=job), keys=rows, epoch=pb.EpochSelector(exact=epoch)
            )
            assert local.stub.MultiGet(request) == client.stub.MultiGet(request), f"epoch {epoch}"
            scan = pb.ScanRequest(store=pb.StoreRef(job=job), epoch=pb.EpochSelector(exact=epoch), limit=2)
            while True:
                page = client.stub.Scan(scan)
                assert local.stub.Scan(scan) == page, f"scan at epoch {epoch}"
                if not page.next_page_token:
                    break
                scan.page_token = page.next_page_token
        assert local.multi_get(job, keys, epoch=committed[-1]) == client.multi_get(
            job, keys, epoch=committed[-1]
        )
        with pytest.raises(EpochNotReady) as remote:
            client.get(job, keys[0], epoch=committed[-1] + 5)
        with pytest.raises(EpochNotReady) as here:
            local.get(job, keys[0], epoch=committed[-1] + 5)
        assert (here.value.code, here.value.reason) == (remote.value.code, remote.value.reason)
        assert str(here.value) == str(remote.value)  # the same explanation (ingest's notes)
