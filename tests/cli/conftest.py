"""A real daemon following a real Spark query, for the CLI to read from."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream

SCHEMA = "customer_region_identifier string, customer_account_identifier string, amount long"
# Longer than a default 80-column console: what a truncating table would cut.
KEY_SCHEMA = "struct<customer_region_identifier:string,customer_account_identifier:string>"
ACCOUNTS = 4


def spending(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return frame.groupBy("customer_region_identifier", "customer_account_identifier").agg(
        F.count("*").alias("orders"), F.sum("amount").alias("total_amount_spent_by_customer")
    )


def purchases(batch: int) -> list[dict[str, Any]]:
    return [
        {
            "customer_region_identifier": "eu-west",
            "customer_account_identifier": f"account-{(batch + i) % ACCOUNTS}",
            "amount": batch * 10 + i,
        }
        for i in range(3)
    ]


@dataclass
class Served:
    """The query, the daemon that follows it as job ``spend``, and its epochs so far."""

    stream: FileStream
    daemon: DaemonProcess

    def newest(self) -> int:
        return self.stream.committed()[-1]

    def feed(self) -> int:
        self.stream.feed(purchases(len(self.stream.committed())))
        newest = self.newest()
        self.daemon.wait_for_epoch("spend", newest)
        return newest


@pytest.fixture(scope="package")
def served(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("cli")  # one query and daemon for all of tests/cli
    stream = FileStream(spark, root / "in", root / "cp", spending, SCHEMA, name="spend").start()
    daemon = DaemonProcess(root / "daemon", {"spend": str(root / "cp")}).start()
    served = Served(stream, daemon)
    try:
        for _ in range(3):
            served.feed()
        yield served
    finally:
        stream.stop()
        daemon.stop()
