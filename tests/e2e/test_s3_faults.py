"""Nothing wrong is served while the object store misbehaves.

A proxy between the daemon and the S3 server throttles, fails, delays, truncates
and drops a share of the daemon's reads. The daemon follows the job through it;
every epoch and key is then compared with Spark's own reader. The only acceptable
number of wrong answers is 0; the test reports how many faults were injected and
how many requests the daemon retried.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.test_oracle import QUERIES
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.faulty_proxy import FAULTS, FaultyProxy
from tests.fixtures.metrics import free_port, sample_values
from tests.fixtures.oracle import canon, plain, spark_state
from tests.fixtures.s3 import CheckpointMirror, S3Server
from tests.fixtures.streams import PROVIDERS, FileStream


def test_throttling_errors_slowness_truncation_and_resets_serve_nothing_wrong(
    spark: Any, s3_server: S3Server, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    schema, build, rows, mode = QUERIES["windowed"]
    session = PROVIDERS[1].session(spark)  # RocksDB with changelogs: changelogs, zips and table files
    local = tmp_path / "cp"
    local.mkdir()
    mirror = CheckpointMirror(s3_server, local, s3_server.new_bucket(), "cp").start()
    proxy = FaultyProxy(s3_server.endpoint, rate=0.25, slow_seconds=0.6).start()
    metrics_port = free_port()
    env = {**s3_server.env, "AWS_ENDPOINT_URL": proxy.endpoint, "EPOCHSTATE_METRICS_PORT": str(metrics_port)}
    stream = FileStream(session, tmp_path / "in", local, build, schema, mode).start()
    daemon = daemon_factory({"windowed": mirror.uri}, env=env)
    try:
        try:
            for batch in range(6):
                stream.feed(rows(batch))
        finally:
            stream.stop()
            mirror.stop()
        committed = stream.committed()
        daemon.wait_for_epoch("windowed", committed[-1], timeout=120)

        expected = {e: spark_state(session, local, e) for e in committed}
        all_keys = {k: key for state in expected.values() for k, (key, _, _) in state.items()}
        wrong = 0
        with daemon.client() as client:
            for epoch in committed:
                lookups = client.multi_get("windowed", list(all_keys.values()), epoch=epoch)
                got = {
                    canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition)
                    for lk in lookups
                    if lk.found
                }
                keys = set(got) | set(expected[epoch])
                wrong += sum(1 for k in keys if got.get(k) != expected[epoch].get(k))
        outcomes = sample_values(metrics_port, "epochstate_storage_outcomes_total", "outcome")
        retries = outcomes.get("retries", 0.0)
    finally:
        proxy.stop()
    injected = sum(proxy.counts[f] for f in FAULTS)
    print(f"\nfaults injected {dict(proxy.counts)}; daemon retries {retries:.0f}; wrong answers {wrong}")
    assert wrong == 0
    assert injected >= 10, proxy.counts
    assert all(proxy.counts[f] > 0 for f in FAULTS), proxy.counts
    assert retries > 0
