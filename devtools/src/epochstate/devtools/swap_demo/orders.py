"""The swap demo's input: orders written to Kafka, one subject epoch of ``orders`` per flush.

The producer is its own aligned writer (no Spark job in front of the swap):
every ``flush_seconds`` it writes a few orders to partition 0, waits until the
broker has them, and registers their offsets as the next subject epoch, as the
aligned sink's commit does. Both versions of the counting job read this
subject aligned, so their batches are its epochs, one to one. It counts what
it wrote per user: the demo's counter check compares with it.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from epochstate.core.alignment.ranges import OffsetRange
from epochstate.core.alignment.records import SubjectEpoch
from epochstate.core.alignment.subjects import SubjectRegistry, wall_clock_ms

ORDERS = "orders"
WRITER = "order-producer"
USERS = ("alice", "bob", "carol", "dave", "erin")
ORDER_SCHEMA = "user string, amount long"


def order(number: int) -> dict[str, object]:
    """Order ``number``: users in an uneven rotation, amounts cycling through 1..97."""
    return {"user": USERS[(number * number + number // 3) % len(USERS)], "amount": 1 + number % 97}


class OrderProducer(threading.Thread):
    """Writes ``per_epoch`` orders every ``flush_seconds`` and registers each flush as an epoch of ``orders``.

    ``pace`` (if given) holds epoch ``k`` back until ``pace(k)`` is true: the demo
    keeps the producer a few epochs ahead of the jobs, whose aligned sources
    read one epoch per batch and would otherwise fall further behind with
    every epoch. ``committed_ms`` maps each registered epoch to its registration time (wall
    clock, ms): when the epoch became available to the jobs.
    """

    def __init__(
        self,
        bootstrap: str,
        subjects: SubjectRegistry,
        per_epoch: int = 6,
        flush_seconds: float = 0.5,
        pace: Callable[[int], bool] = lambda _: True,
    ) -> None:
        super().__init__(name="order-producer", daemon=True)
        from confluent_kafka import Producer

        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 0,
                # The broker stops before this process ends: not worth a line on stderr.
                "log.connection.close": False,
                "logger": logging.getLogger("epochstate.demo.kafka"),
            }
        )
        self._subjects = subjects
        self._per_epoch = per_epoch
        self._flush_seconds = flush_seconds
        self._pace = pace
        self._stopped = threading.Event()
        self.written: Counter[str] = Counter()
        self.committed_ms: dict[int, int] = {}
        self.failure: str | None = None

    @property
    def epochs(self) -> int:
        return len(self.committed_ms)

    def run(self) -> None:
        try:
            self._produce()
        except Exception as error:  # the demo reports it and stops
            self.failure = f"the order producer failed: {error}"

    def _produce(self) -> None:
        number = 0
        while not self._stopped.wait(self._flush_seconds):
            epoch = len(self.committed_ms)
            if not self._pace(epoch):
                continue
            offsets: list[int] = []
            orders = [order(n) for n in range(number, number + self._per_epoch)]
            for row in orders:
                self._producer.produce(
                    ORDERS,
                    json.dumps(row).encode(),
                    key=str(row["user"]).encode(),
                    partition=0,
                    on_delivery=functools.partial(_delivered, offsets),
                )
            if self._producer.flush(30) or len(offsets) != len(orders):
                raise RuntimeError(f"the broker did not take epoch {epoch}'s orders")
            start, end = min(offsets), max(offsets) + 1
            self._subjects.register_epoch(
                SubjectEpoch(
                    ORDERS, epoch, (OffsetRange(ORDERS, 0, start, end),), WRITER, None, wall_clock_ms()
                )
            )
            self.committed_ms[epoch] = wall_clock_ms()
            self.written.update(str(row["user"]) for row in orders)
            number += len(orders)

    def stop(self) -> None:
        """Stop after the epoch being written; returns once it is registered."""
        self._stopped.set()
        self.join()


def _delivered(offsets: list[int], error: Any, message: Any) -> None:
    if error is None:
        offsets.append(int(message.offset()))
