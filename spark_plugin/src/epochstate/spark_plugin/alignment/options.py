"""The options of the ``epochstate-kafka`` data source, checked when a query starts.

Spark hands options over case-insensitively (lower-cased); every option below may
be written in any case. Options starting with ``kafka.`` go to the Kafka client
unchanged (without the prefix), as with Spark's own Kafka connector.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from epochstate.core.alignment.layout import DEFAULT_ROOT, SubjectLayout, check_job, check_topic
from epochstate.core.alignment.records import MODES, Mode
from epochstate.spark_plugin.alignment.errors import InvalidOption

KAFKA_PREFIX = "kafka."
DEFAULT_MAPPING_RETENTION = 100
DEFAULT_SUBJECT_RETENTION = 100
End = Literal["earliest", "latest"]
ENDS: tuple[End, ...] = ("earliest", "latest")
StartingEpoch = End | int
# Partition -> offset, where -2 means the earliest and -1 the latest offset (Spark's convention).
EARLIEST, LATEST = -2, -1


@dataclass(frozen=True)
class KafkaOptions:
    """The topic and the librdkafka client settings (at least ``bootstrap.servers``)."""

    topic: str
    client: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaOptions:
        client = {
            key[len(KAFKA_PREFIX) :]: value for key, value in options.items() if key.startswith(KAFKA_PREFIX)
        }
        if "bootstrap" in options:
            client["bootstrap.servers"] = options["bootstrap"]
        if not client.get("bootstrap.servers"):
            raise InvalidOption("option 'bootstrap' (or 'kafka.bootstrap.servers') is required")
        return cls(check_topic(_required(options, "topic")), client)


@dataclass(frozen=True)
class RegistryOptions:
    """Where the subject registry is: ZooKeeper ``hosts[/chroot]`` and the root path, and
    ``auth_file``, the file with the ZooKeeper identity (``zookeeperAuthFile``; None:
    ``$EPOCHSTATE_ZOOKEEPER_AUTH_FILE`` on the driver, else no authentication).

    The file's path, not its content, travels with the options: the credentials
    are read where the session is opened (:mod:`.connections`).
    """

    zookeeper: str
    root: str = DEFAULT_ROOT
    auth_file: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> RegistryOptions:
        root = options.get("zookeeperroot", DEFAULT_ROOT)
        SubjectLayout(root)  # checks the root
        return cls(_required(options, "zookeeper"), root, options.get("zookeeperauthfile") or None)


@dataclass(frozen=True)
class SinkOptions:
    """``topic``, ``bootstrap``, ``zookeeper`` [, ``zookeeperRoot``, ``zookeeperAuthFile``, ``job``,
    ``idempotent``, ``subjectRetention``, ``shadow``].

    ``shadow`` (default false): the job is the new job of a hot-swap to come, so its
    sink registers nothing until a swap of the topic names it (``swapping``).

    ``job`` defaults to the query name. ``checkpointLocation`` is Spark's own and
    tells the commit the query id when no task did. ``subjectRetention`` is the
    number of newest subject epochs always kept (``alignment.retention``).
    """

    kafka: KafkaOptions
    registry: RegistryOptions
    job: str
    idempotent: bool = True
    checkpoint: str | None = None
    subject_retention: int = DEFAULT_SUBJECT_RETENTION
    shadow: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SinkOptions:
        options = _lowered(raw)
        job = options.get("job") or options.get("queryname")
        if not job:
            raise InvalidOption("option 'job' is required when the query has no name (queryName)")
        return cls(
            kafka=KafkaOptions.parse(options),
            registry=RegistryOptions.parse(options),
            job=check_job(job),
            idempotent=_boolean(options, "idempotent", True),
            checkpoint=options.get("checkpointlocation"),
            subject_retention=_at_least(options, "subjectretention", 2) or DEFAULT_SUBJECT_RETENTION,
            shadow=_boolean(options, "shadow", False),
        )


@dataclass(frozen=True)
class SourceOptions:
    """The source's options; see the package docstring for their meaning."""

    kafka: KafkaOptions
    mode: Mode
    registry: RegistryOptions | None
    job: str | None
    checkpoint: str | None
    starting_epoch: StartingEpoch = "earliest"
    starting_offsets: Mapping[int, int] | End = "earliest"
    max_offsets_per_trigger: int | None = None
    mapping_retention: int = DEFAULT_MAPPING_RETENTION
    read_timeout: float = 30.0

    @property
    def coordinated(self) -> bool:
        """Whether the source follows the coordinator's commands: it has zookeeper, job and checkpoint."""
        return self.registry is not None and self.job is not None and self.checkpoint is not None

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        options = _lowered(raw)
        kafka = KafkaOptions.parse(options)
        mode = options.get("mode", "aligned")
        if mode not in MODES:
            raise InvalidOption(f"option 'mode' must be one of {', '.join(MODES)}, not {mode!r}")
        job = check_job(options["job"]) if options.get("job") else None
        registry = RegistryOptions.parse(options) if options.get("zookeeper") else None
        checkpoint = options.get("checkpointlocation") or None
        max_offsets = _positive(options, "maxoffsetspertrigger")
        if mode == "aligned":
            for name, value in (("zookeeper", registry), ("job", job), (CHECKPOINT, checkpoint)):
                if value is None:
                    raise InvalidOption(f"aligned mode needs option {name!r}{_WHY.get(name, '')}")
        elif max_offsets is not None and checkpoint is None:
            raise InvalidOption(f"maxOffsetsPerTrigger needs option 'checkpointLocation'{_WHY[CHECKPOINT]}")
        return cls(
            kafka=kafka,
            mode=mode,
            registry=registry,
            job=job,
            checkpoint=checkpoint,
            starting_epoch=_starting_epoch(options.get("startingepoch", "earliest")),
            starting_offsets=_starting_offsets(options.get("startingoffsets", "earliest"), kafka.topic),
            max_offsets_per_trigger=max_offsets,
            mapping_retention=_positive(options, "mappingretention") or DEFAULT_MAPPING_RETENTION,
            read_timeout=float(_positive(options, "readtimeoutms") or 30_000) / 1000,
        )


CHECKPOINT = "checkpointLocation"
_WHY = {
    CHECKPOINT: (
        ", the same path as the query's checkpointLocation: PySpark 4.0 does not tell a "
        "Python stream reader where a batch starts, so the source reads it from the query's offsets log"
    ),
    "job": ", the name under which the source records its epochs in ZooKeeper",
}


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in options.items()}


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name.lower())
    if not value:
        raise InvalidOption(f"option {name!r} is required")
    return value


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise InvalidOption(f"option {name!r} must be true or false, not {value!r}")
    return value == "true"


def _positive(options: Mapping[str, str], name: str) -> int | None:
    return _at_least(options, name, 1)


def _at_least(options: Mapping[str, str], name: str, least: int) -> int | None:
    if name not in options:
        return None
    try:
        value = int(options[name])
    except ValueError:
        raise InvalidOption(f"option {name!r} must be an integer, not {options[name]!r}") from None
    if value < least:
        raise InvalidOption(f"option {name!r} must be at least {least}, not {value}")
    return value


def _starting_epoch(value: str) -> StartingEpoch:
    if value in ENDS:
        return value
    try:
        epoch = int(value)
    except ValueError:
        epoch = -1
    if epoch < 0:
        raise InvalidOption(f"option 'startingEpoch' must be earliest, latest or an epoch >= 0: {value!r}")
    return epoch


def _starting_offsets(value: str, topic: str) -> Mapping[int, int] | End:
    if value in ENDS:
        return value
    try:
        parsed = json.loads(value)
        offsets = {int(p): int(o) for p, o in parsed[topic].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise InvalidOption(
            f"option 'startingOffsets' must be earliest, latest or JSON like "
            f'{{"{topic}": {{"0": 42, "1": -2}}}} (-2 earliest, -1 latest), not {value!r}'
        ) from None
    if any(p < 0 or o < EARLIEST for p, o in offsets.items()):
        raise InvalidOption(f"option 'startingOffsets' has a partition < 0 or an offset < -2: {value!r}")
    return offsets
