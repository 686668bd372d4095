"""Nothing wrong is served while the object store misbehaves.

A proxy between the daemon and the S3 server throttles, fails, delays, truncates,
drops and leaves unanswered (past the daemon's request timeout) a share of the
daemon's reads. The daemon follows the job through it; every epoch and key is then
compared with Spark's own reader. The only acceptable number of wrong answers is 0;
the test prints, per kind, the faults injected and how many of those requests the
daemon made again, with the daemon's retries (the figures in docs/guarantees.md).
With ``S3_FAULTS_CATCH_UP=1`` it also times two fresh daemons catching up on the
finished checkpoint, without and with faults: a figure, not a property, so the suite
does not pay for it.

A state file the store refuses for good is damage: its epochs become unavailable
with the reason, as for a damaged local file, and ingest skips past them to the
next snapshot, every other epoch served as Spark reads it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import EpochDamaged
from tests.e2e.test_oracle import QUERIES, windowed, windowed_rows
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.faulty_proxy import FAULTS, FaultyProxy
from tests.fixtures.metrics import free_port, sample_values
from tests.fixtures.oracle import State, canon, plain, spark_state
from tests.fixtures.s3 import CheckpointMirror, S3Server
from tests.fixtures.snapshots import feed_until_skippable, full_versions, one_partition
from tests.fixtures.streams import PROVIDERS, FileStream

# Short, so that the proxy's unanswered requests cost little; still far above what
# moto takes to answer on a loaded machine (a request past it is only retried).
REQUEST_TIMEOUT = 1.0
RATE = 0.25
# Ingest gives up a refused file's epoch after its third try: the tries need not be
# 2 s (the default) apart here, nothing repairs the file meanwhile.
FAST_RETRY = {"EPOCHSTATE_INGEST_RETRY_INTERVAL": "0.1"}


def _wrong_answers(daemon: DaemonProcess, job: str, expected: dict[int, State]) -> int:
    """Keys of every epoch whose answer differs from Spark's reader (missing, extra or other)."""
    all_keys = {k: key for state in expected.values() for k, (key, _, _) in state.items()}
    wrong = 0
    with daemon.client() as client:
        for epoch, state in expected.items():
            lookups = client.multi_get(job, list(all_keys.values()), epoch=epoch)
            got = {
                canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition) for lk in lookups if lk.found
            }
            wrong += sum(1 for k in set(got) | set(state) if got.get(k) != state.get(k))
    return wrong


def _catch_up_seconds(
    daemon_factory: Callable[..., DaemonProcess], name: str, uri: str, epoch: int, env: dict[str, str]
) -> float:
    """Seconds from a fresh daemon's start until it serves ``epoch`` (a figure, not asserted)."""
    started = time.monotonic()
    daemon_factory({"windowed": uri}, name=name, env=env).wait_for_epoch("windowed", epoch, timeout=120)
    return time.monotonic() - started


def test_throttling_errors_slowness_truncation_resets_and_timeouts_serve_nothing_wrong(
    spark: Any, s3_server: S3Server, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    schema, build, rows, mode = QUERIES["windowed"]
    session = PROVIDERS[1].session(spark)  # RocksDB with changelogs: changelogs, zips and table files
    local = tmp_path / "cp"
    local.mkdir()
    mirror = CheckpointMirror(s3_server, local, s3_server.new_bucket(), "cp").start()
    proxy = FaultyProxy(s3_server.endpoint, rate=RATE, slow_seconds=0.6).start()
    metrics_port = free_port()
    timeout = {"EPOCHSTATE_S3_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT)}
    env = {**s3_server.env, **timeout, "AWS_ENDPOINT_URL": proxy.endpoint}
    stream = FileStream(session, tmp_path / "in", local, build, schema, mode).start()
    daemon = daemon_factory(
        {"windowed": mirror.uri}, env={**env, "EPOCHSTATE_METRICS_PORT": str(metrics_port)}
    )
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
        wrong = _wrong_answers(daemon, "windowed", expected)
        outcomes = sample_values(metrics_port, "epochstate_storage_outcomes_total", "outcome")
        counts = dict(proxy.counts)  # before the daemon stops: an abandoned request is a timeout
    finally:
        proxy.stop()

    print(f"\n{'fault':10} {'injected':>8} {'asked again':>11}")
    for fault in FAULTS:
        print(f"{fault:10} {counts.get(fault, 0):8} {counts.get(f'{fault}_repeated', 0):11}")
    print(
        f"requests {counts['requests']}; "
        f"timeouts abandoned by the daemon {counts.get('timeout_abandoned', 0)}; "
        f"daemon retries {outcomes.get('retries', 0):.0f}, failed {outcomes.get('failed', 0):.0f}; "
        f"wrong answers {wrong}"
    )
    if os.environ.get("S3_FAULTS_CATCH_UP") == "1":
        # The same finished checkpoint caught up from scratch, without and with faults.
        clean = _catch_up_seconds(
            daemon_factory, "clean", mirror.uri, committed[-1], {**s3_server.env, **timeout}
        )
        again = FaultyProxy(s3_server.endpoint, rate=RATE, slow_seconds=0.6).start()
        try:
            faulty = _catch_up_seconds(
                daemon_factory,
                "faulty",
                mirror.uri,
                committed[-1],
                {**env, "AWS_ENDPOINT_URL": again.endpoint},
            )
        finally:
            again.stop()
        print(
            f"catch-up of {len(committed)} epochs from scratch: {clean:.1f} s without "
            f"faults, {faulty:.1f} s with ({sum(again.counts[f] for f in FAULTS)} faults)"
        )
    assert wrong == 0
    assert all(counts.get(f, 0) > 0 for f in FAULTS), counts
    # Every kind of fault that fails a request was followed by the same request again
    # (a slow answer is only late), and the daemon, not the proxy, ended the
    # unanswered ones: its request timeout works.
    assert all(counts.get(f"{f}_repeated", 0) > 0 for f in FAULTS if f != "slow"), counts
    assert counts.get("timeout_abandoned", 0) > 0, counts
    assert outcomes.get("retries", 0) > 0


def test_a_state_file_refused_for_good_makes_its_epochs_unavailable_and_later_ones_serve(
    spark: Any, s3_server: S3Server, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    local = tmp_path / "cp"
    schema = "k long, s string, v double, ts timestamp"
    stream = FileStream(one_partition(spark), tmp_path / "in", local, windowed, schema, "update").start()
    try:
        refused_version = feed_until_skippable(stream, windowed_rows)
    finally:
        stream.stop()
    assert refused_version is not None, "Spark wrote no snapshots to skip ahead to"
    committed = stream.committed()
    resume = min(v for v in full_versions(local, 1) if v > refused_version) - 1
    gap = list(range(refused_version - 1, resume))  # version v is written by epoch v - 1
    expected = {e: spark_state(spark, local, e) for e in committed if e not in gap}

    bucket = s3_server.new_bucket()
    mirror = CheckpointMirror(s3_server, local, bucket, "cp")
    mirror.sync()
    proxy = FaultyProxy(s3_server.endpoint, rate=0.0).start()
    proxy.refuse(bucket, f"cp/state/0/0/{refused_version}.delta")
    try:
        env = {**s3_server.env, **FAST_RETRY, "AWS_ENDPOINT_URL": proxy.endpoint}
        daemon = daemon_factory({"refused": mirror.uri}, env=env)
        daemon.wait_for_epoch("refused", committed[-1], timeout=60)
        with daemon.client() as client:
            problems = {p.epoch: p.reason for p in client.describe("refused", refresh=True).problems}
            assert sorted(problems) == gap
            assert f"{refused_version}.delta" in problems[gap[0]]
            assert "PermissionDenied" in problems[gap[0]], problems[gap[0]]
            key = next(key for state in expected.values() for key, _, _ in state.values())
            for epoch in gap:
                with pytest.raises(EpochDamaged, match=f"{refused_version}.delta"):
                    client.get("refused", key, epoch=epoch)
        assert _wrong_answers(daemon, "refused", expected) == 0
    finally:
        proxy.stop()
    assert proxy.counts["refuse"] > 0
