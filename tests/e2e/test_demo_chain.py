"""``epochstate demo-chain`` runs end to end: every batch of job 2 agrees with job 1's aligned state,
and the jobs stop without aborting a batch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.test_demo import assert_ends_cleanly, run_demo


@pytest.mark.timeout(600)
def test_demo_chain_runs_and_aligned_lookups_explain_every_batch(tmp_path: Path) -> None:
    result = run_demo(tmp_path, "demo-chain", "--duration", "3")
    output = result.stdout
    summary = re.search(
        r"(\d+) batches of job 2 \((\d+) pull-request updates\) checked .*: (\d+) mismatch", output
    )
    assert summary is not None, output[-3000:]
    batches, updates, mismatches = map(int, summary.groups())
    assert batches >= 1 and updates >= 1 and mismatches == 0
    assert output.count("= pinned lookup ✓") == updates
    assert "✗" not in output
    assert_ends_cleanly(result, {"spark.log", "daemon.log", "zookeeper.log", "kafka-broker.log", "demo.log"})
