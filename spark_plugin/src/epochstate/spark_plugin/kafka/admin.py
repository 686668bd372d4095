"""Topic administration for the aligned sink and source: create, describe, watermarks."""

from __future__ import annotations

import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # type: ignore[attr-defined]

from epochstate.spark_plugin.kafka.config import ClientConfig, consumer_settings, merged
from epochstate.spark_plugin.kafka.errors import BrokerTimeout, TopicExists, from_client_error
from epochstate.spark_plugin.kafka.polling import fetched_high_watermarks

# confluent-kafka re-exports NewTopic and OffsetSpec implicitly and leaves these unannotated.
_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]

# The high watermark is taken from Fetch responses, never from ListOffsets(latest):
# some Kafka-protocol brokers (tansu 0.6) answer ListOffsets with the base offset of
# the last batch + 1, below the true end. Uncommitted isolation makes the end of
# partition event report the high watermark rather than the last stable offset.
_WATERMARK_SETTINGS: ClientConfig = {
    "enable.partition.eof": True,
    "enable.auto.commit": False,
    "isolation.level": "read_uncommitted",
    "auto.offset.reset": "latest",
    # At the end a broker holds a Fetch up to this long before answering "nothing new".
    "fetch.wait.max.ms": 10,
}


class TopicAdmin:
    """Topic-level operations on one Kafka cluster.

    ``config`` is a confluent-kafka (librdkafka) client config, at least
    ``bootstrap.servers``. Every call waits at most ``timeout`` seconds and raises
    :class:`BrokerTimeout` after that; a topic that does not exist raises
    :class:`TopicNotFound` (topics are never created as a side effect).
    """

    def __init__(self, config: ClientConfig, *, timeout: float = 10.0) -> None:
        self._config = dict(config)
        self._timeout = timeout
        self._admin = AdminClient(merged(config, {}))

    def create_topic(
        self,
        topic: str,
        partitions: int,
        *,
        replication_factor: int = 1,
        topic_config: dict[str, str] | None = None,
        exist_ok: bool = False,
    ) -> None:
        """Create ``topic`` with ``partitions`` partitions.

        Raises :class:`TopicExists` if it exists, unless ``exist_ok`` (then its
        partition count is not checked).
        """
        if partitions < 1:
            raise ValueError(f"a topic needs at least one partition, not {partitions}")
        new = NewTopic(topic, partitions, replication_factor, config=dict(topic_config or {}))
        futures = self._admin.create_topics(
            [new], operation_timeout=self._timeout, request_timeout=self._timeout
        )
        try:
            self._result(futures[topic], f"create topic {topic!r}")
        except TopicExists:
            if not exist_ok:
                raise

    def partitions_of(self, topic: str) -> list[int]:
        """The partition ids of ``topic``, ascending."""
        futures = self._admin.describe_topics(TopicCollection([topic]), request_timeout=self._timeout)
        description = self._result(futures[topic], f"describe topic {topic!r}")
        return sorted(partition.id for partition in description.partitions)

    def earliest_offsets(self, topic: str) -> dict[int, int]:
        """Partition -> log start offset: the first offset still stored."""
        return self._list_offsets(topic, self.partitions_of(topic), _EARLIEST)

    def high_watermarks(self, topic: str) -> dict[int, int]:
        """Partition -> high watermark: one past the last offset acknowledged to producers.

        Read from Fetch responses (see the module comment), so it is exact even where
        ListOffsets lags; right after a producer's flush it equals that producer's
        last offset + 1 when no one else writes.
        """
        partitions = self.partitions_of(topic)
        # A lower bound of the end everywhere (exact on Apache Kafka): the Fetch
        # that starts there reads at most the partition's last batch.
        starts = self._list_offsets(topic, partitions, _LATEST)
        consumer = Consumer(consumer_settings(self._config, _WATERMARK_SETTINGS))
        try:
            return fetched_high_watermarks(consumer, topic, starts, time.monotonic() + self._timeout)
        finally:
            consumer.close()

    def _list_offsets(self, topic: str, partitions: list[int], spec: OffsetSpec) -> dict[int, int]:
        requests = {TopicPartition(topic, p): spec for p in partitions}
        futures = self._admin.list_offsets(requests, request_timeout=self._timeout)
        return {
            tp.partition: self._result(future, f"list offsets of {topic!r}").offset
            for tp, future in futures.items()
        }

    def _result(self, future: Future[Any], what: str) -> Any:
        try:
            return future.result(timeout=self._timeout)
        except FutureTimeout:
            raise BrokerTimeout(f"{what}: no answer within {self._timeout} s") from None
        except KafkaException as error:
            raise from_client_error(error.args[0], what) from None
