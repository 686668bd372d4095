"""Assign-only consumers kept between reads, so that reading a range does not connect anew each time.

Spark reuses its Python workers (``spark.python.worker.reuse``, on by default), so
the consumers a worker keeps serve the reads of its next tasks: no new client,
connection or metadata request per range and batch.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from confluent_kafka import Consumer, KafkaException

from epochstate.spark_plugin.kafka.config import Setting

# Idle consumers kept per client config; a worker reads one range at a time.
IDLE_PER_CONFIG = 2


class ConsumerPool:
    """Idle consumers by client config; safe to share between threads.

    A leased consumer is used by one reader at a time. It goes back to the pool
    only when the reader finished cleanly, unassigned (so that it fetches nothing
    while idle); a reader that failed or stopped half-way closes it, since what
    it still has queued is unknown. Reassigning a consumer drops the records it
    fetched for its previous assignment (pinned by tests/kafka/test_conformance.py).
    """

    def __init__(self, idle_per_config: int = IDLE_PER_CONFIG) -> None:
        self._idle: dict[tuple[tuple[str, str], ...], list[Consumer]] = {}
        self._limit = idle_per_config
        self._lock = threading.Lock()
        self.created = 0

    @contextmanager
    def lease(self, settings: Mapping[str, Setting]) -> Iterator[Consumer]:
        """A consumer with ``settings`` and no assignment, for the duration of the block."""
        key = tuple(sorted((name, str(value)) for name, value in settings.items()))
        with self._lock:
            idle = self._idle.get(key)
            consumer = idle.pop() if idle else None
            if consumer is None:
                self.created += 1
        if consumer is None:
            consumer = Consumer(dict(settings))
        finished = False
        try:
            yield consumer
            finished = True
        finally:
            if not (finished and self._give_back(key, consumer)):
                consumer.close()

    def _give_back(self, key: tuple[tuple[str, str], ...], consumer: Consumer) -> bool:
        try:
            consumer.unassign()
        except (KafkaException, RuntimeError):  # the consumer is unusable; the caller closes it
            return False
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) >= self._limit:
                return False
            idle.append(consumer)
            return True

    def close(self) -> None:
        """Close every idle consumer (tests; a worker otherwise keeps them until it exits)."""
        with self._lock:
            idle = [consumer for consumers in self._idle.values() for consumer in consumers]
            self._idle.clear()
        for consumer in idle:
            consumer.close()


# This process's pool, shared by every reader in it.
CONSUMERS = ConsumerPool()
