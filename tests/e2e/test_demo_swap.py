"""``epochstate demo-swap`` runs end to end: the swap completes, the downstream job counts every
order exactly once across it, v2's shadow state agreed with v1's, and the jobs stop cleanly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.test_demo import assert_ends_cleanly, run_demo


@pytest.mark.timeout(600)
def test_demo_swap_hands_the_subject_over_exactly_once(tmp_path: Path) -> None:
    result = run_demo(tmp_path, "demo-swap", "--epochs-after", "1", "--trigger", "0.5")
    output = result.stdout
    counted = re.search(
        r"counter check: (\d+) orders in, (\d+) counted downstream: (\d+) lost, (\d+) doubled", output
    )
    assert counted is not None, output[-3000:]
    written, seen, lost, doubled = map(int, counted.groups())
    assert written > 0 and seen == written and (lost, doubled) == (0, 0)
    swap = re.search(r"swap epoch: input epoch (\d+) of 'orders' is v1's last", output)
    assert swap is not None and int(swap.group(1)) >= 3
    assert re.search(r"lookup before the swap: order-counts at input epoch \d+ <- counts-v1 batch", output)
    assert re.search(
        r"lookup after  the swap: order-counts at input epoch \d+ <- counts-v2 batch .*amount", output
    )
    assert "0 difference(s)" in output and "unbroken" in output
    assert "✗" not in output
    assert_ends_cleanly(result, {"spark.log", "daemon.log", "zookeeper.log", "kafka-broker.log", "demo.log"})
