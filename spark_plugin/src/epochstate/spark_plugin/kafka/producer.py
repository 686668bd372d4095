"""The partition writer: the aligned sink's way to write rows and learn their exact offsets."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import confluent_kafka
from confluent_kafka import Producer

from epochstate.core.alignment.ranges import OffsetRange
from epochstate.spark_plugin.kafka.config import ClientConfig, Setting, merged
from epochstate.spark_plugin.kafka.errors import DeliveryFailed, InterleavedWrite

Headers = Sequence[tuple[str, bytes | None]]

# Idempotence keeps the order of the rows and writes each row once, even when a
# batch is retried, so the acknowledged offsets of one writer are contiguous.
IDEMPOTENT: ClientConfig = {"enable.idempotence": True, "acks": "all"}
# Without it (brokers lacking InitProducerId), one request in flight keeps the
# order; a retried batch may still be written twice, which finish() detects.
NOT_IDEMPOTENT: ClientConfig = {
    "enable.idempotence": False,
    "acks": "all",
    "max.in.flight.requests.per.connection": 1,
}


# Producers whose every row was acknowledged, by their configuration, for the next writer
# of this process: a new idempotent producer's first acknowledgement waits for its
# producer id, which librdkafka asks for on a 500 ms timer, so each task of a batch
# paid half a second. A writer takes one for itself alone and gives it back only after a
# clean finish; any failure closes it (purged rows leave gaps in its sequence numbers).
_idle: dict[str, list[Producer]] = {}
_idle_lock = threading.Lock()


def _take_producer(config: dict[str, Setting]) -> tuple[str, Producer]:
    key = repr(sorted(config.items()))
    with _idle_lock:
        waiting = _idle.get(key)
        if waiting:
            return key, waiting.pop()
    return key, Producer(config)


def close_idle_producers() -> None:
    """Close the producers kept for later writers (tests; a worker otherwise keeps them until it exits)."""
    with _idle_lock:
        producers = [p for waiting in _idle.values() for p in waiting]
        _idle.clear()
    for producer in producers:
        producer.close()


class PartitionWriter:
    """Writes rows to one partition of a topic and reports the offsets they got.

    Guarantee: :meth:`finish` returns ``[first, last + 1)`` only when the broker
    acknowledged every row written (``acks=all``) and the acknowledged offsets are
    exactly ``first..last`` with no gap, so that no record in the range belongs to
    another producer and none is a duplicate. Otherwise it raises
    :class:`DeliveryFailed` (or its subclass :class:`InterleavedWrite`), and the rows
    must be treated as never written: they stay in the log, outside any range.

    Not thread-safe; one writer per task. Use as a context manager so that rows
    still queued are dropped when the task fails. An idempotent writer's first
    acknowledgement waits for its producer id, which librdkafka asks for on a
    timer after the first connection; so a writer that finished cleanly leaves its
    producer to the process's next writer with the same configuration.
    """

    def __init__(
        self,
        producer_config: ClientConfig,
        topic: str,
        partition: int,
        *,
        idempotent: bool = True,
        timeout: float = 30.0,
    ) -> None:
        if partition < 0:
            raise ValueError(f"partition must be >= 0, not {partition}")
        self.topic = topic
        self.partition = partition
        self._timeout = timeout
        self._key, self._producer = _take_producer(
            merged(producer_config, IDEMPOTENT if idempotent else NOT_IDEMPOTENT)
        )
        self._written = 0
        self._acknowledged = 0
        self._first: int | None = None
        self._last: int | None = None
        self._in_order = True
        self._failure: str | None = None
        self._finished = False

    def write(
        self,
        key: bytes | None,
        value: bytes | None,
        *,
        headers: Headers | None = None,
        timestamp: int | None = None,
    ) -> None:
        """Queue one row; ``timestamp`` in ms since the epoch (default: now).

        Blocks while the producer's queue is full, raising :class:`DeliveryFailed`
        if it stays full for the timeout; other delivery errors surface in
        :meth:`finish`.
        """
        if self._finished:
            raise RuntimeError("the writer is finished")
        row_headers: list[tuple[str, str | bytes | None]] | None = list(headers) if headers else None
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    value=value,
                    key=key,
                    partition=self.partition,
                    on_delivery=self._on_delivery,
                    timestamp=timestamp or 0,
                    headers=row_headers,
                )
                break
            except BufferError:
                if time.monotonic() > deadline:
                    raise DeliveryFailed(f"{self._where()}: queue full for {self._timeout} s") from None
                self._producer.poll(0.1)  # serves delivery reports, which frees queue space
            except confluent_kafka.KafkaException as error:
                raise DeliveryFailed(f"{self._where()}: {error.args[0].str()}") from None
        self._written += 1
        self._producer.poll(0)

    def finish(self) -> OffsetRange | None:
        """Wait for every row's acknowledgement; the range they occupy, None if no rows.

        Raises :class:`DeliveryFailed` when a row was not acknowledged within the
        timeout or was refused, :class:`InterleavedWrite` when the offsets are not
        exactly this writer's own.
        """
        if self._finished:
            raise RuntimeError("the writer is finished")
        self._finished = True
        try:
            unacknowledged = self._producer.flush(self._timeout)
            failure, acknowledged = self._failure, self._acknowledged
        except BaseException:
            self._close()
            raise
        if failure is None and not unacknowledged and acknowledged == self._written:
            with _idle_lock:
                _idle.setdefault(self._key, []).append(self._producer)
        else:
            self._close()
        if failure is not None:
            raise DeliveryFailed(f"{self._where()}: {failure}")
        if unacknowledged or acknowledged != self._written:
            raise DeliveryFailed(
                f"{self._where()}: {self._written - acknowledged} of {self._written} rows "
                f"not acknowledged within {self._timeout} s"
            )
        if self._first is None or self._last is None:
            return None
        written = OffsetRange(self.topic, self.partition, self._first, self._last + 1)
        if not self._in_order or written.size != self._written:
            raise InterleavedWrite(
                f"{self._where()}: {self._written} rows were given offsets spanning {written}"
            )
        return written

    def abort(self) -> None:
        """Drop the rows not yet sent and close; rows already sent stay outside any range."""
        if not self._finished:
            self._finished = True
            self._close()

    def __enter__(self) -> PartitionWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.abort()

    def _on_delivery(self, error: confluent_kafka.KafkaError | None, message: Any) -> None:
        if error is not None:
            self._failure = self._failure or f"{error.name()}: {error.str()}"
            return
        offset, partition = message.offset(), message.partition()
        if partition != self.partition or offset is None:
            self._failure = self._failure or f"acknowledged in partition {partition} at offset {offset}"
            return
        self._acknowledged += 1
        if self._last is not None and offset <= self._last:
            self._in_order = False
        self._first = offset if self._first is None else min(self._first, offset)
        self._last = offset if self._last is None else max(self._last, offset)

    def _close(self) -> None:
        # close() would wait for queued rows; nothing queued is wanted any more.
        self._producer.purge()
        self._producer.poll(0)
        self._producer.close()

    def _where(self) -> str:
        return f"writing to {self.topic}[{self.partition}]"
