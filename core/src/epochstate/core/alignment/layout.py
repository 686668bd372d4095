"""Where subjects live in ZooKeeper (docs/zookeeper.md).

::

    <root>/subjects/<topic>                        a subject: a Kafka topic with registered epochs
    <root>/subjects/<topic>/epochs/<k>             written once: subject epoch k's offset ranges
    <root>/subjects/<topic>/sources/<job>          a reading job: mode, its epochs -> subject epochs

Epoch names are zero-padded to 19 digits like the registry's job epochs, so
ZooKeeper's lexical order of children is numeric order. The paths are the
registry's own (:class:`epochstate.core.zookeeper.layout.Layout`), which the
daemon reads; this class adds the checks of the data source's options.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from epochstate.core.alignment.errors import InvalidOption, InvalidSubjectName
from epochstate.core.zookeeper.layout import DEFAULT_ROOT, EPOCH_DIGITS, MAX_EPOCH, Layout, parse_epoch_name

__all__ = ["DEFAULT_ROOT", "SubjectLayout", "check_topic", "epoch_name", "parse_epoch_name"]

# Kafka's own rule for topic names; every such name is also a valid znode name.
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_topic(topic: str) -> str:
    """``topic`` if it is a legal Kafka topic name, else InvalidSubjectName."""
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise InvalidSubjectName(f"not a Kafka topic name: {topic!r}")
    return topic


def check_job(job: str) -> str:
    """``job`` if it can be one znode name, else InvalidSubjectName."""
    if not isinstance(job, str) or not job or job in (".", "..") or "/" in job:
        raise InvalidSubjectName(f"job name must be a non-empty string without '/': {job!r}")
    if any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in job):
        raise InvalidSubjectName(f"job name must not contain control characters: {job!r}")
    return job


def epoch_name(epoch: int) -> str:
    """The znode name of subject epoch ``epoch``: ``0000000000000000042`` for 42."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
        raise InvalidSubjectName(f"a subject epoch is an integer in [0, {MAX_EPOCH}], not {epoch!r}")
    return f"{epoch:0{EPOCH_DIGITS}d}"


@dataclass(frozen=True)
class SubjectLayout:
    """The subject paths under one root (absolute, no trailing slash)."""

    root: str = DEFAULT_ROOT

    def __post_init__(self) -> None:
        root = self.root
        if not root.startswith("/") or (root != "/" and root.endswith("/")) or "//" in root:
            raise InvalidOption(f"zookeeperRoot must be an absolute path without trailing '/': {root!r}")

    @property
    def _paths(self) -> Layout:
        return Layout(self.root)

    @property
    def subjects(self) -> str:
        return self._paths.subjects

    def subject(self, topic: str) -> str:
        return self._paths.subject(check_topic(topic))

    def epochs(self, topic: str) -> str:
        return self._paths.subject_epochs(check_topic(topic))

    def epoch(self, topic: str, epoch: int) -> str:
        return f"{self.epochs(topic)}/{epoch_name(epoch)}"

    def sources(self, topic: str) -> str:
        return self._paths.subject_sources(check_topic(topic))

    def source(self, topic: str, job: str) -> str:
        return self._paths.subject_source(check_topic(topic), check_job(job))
