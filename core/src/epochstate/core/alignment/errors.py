"""Errors of the subject registry and the alignment coordinator (daemon, CLI and plugin)."""

from __future__ import annotations

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError


class AlignmentError(EpochStateError):
    """Root of the errors of alignment control and of the aligned source and sink."""


class InvalidOption(AlignmentError):
    """An option of the ``epochstate-kafka`` data source is missing or malformed."""

    reason = reasons.BAD_REQUEST


class InvalidSubjectName(InvalidOption):
    pass


class EpochWrittenByAnotherQuery(AlignmentError):
    """The subject epoch a batch would register was written by another query.

    Subject epochs are the writing query's batch ids, so one subject takes the
    epochs of one upstream query. A new query (a fresh checkpoint) must write to
    a topic of its own.
    """


class RegistryUnavailable(AlignmentError):
    """ZooKeeper could not be reached in time; the call may be repeated."""

    reason = reasons.REGISTRY_UNAVAILABLE


class CorruptSubjectRecord(AlignmentError):
    """A znode of the subject registry does not hold the record its path promises."""

    reason = reasons.CORRUPT_REGISTRY_RECORD


class SourceNotFound(AlignmentError):
    """The subject has no source of that job (it never ran with options zookeeper and job)."""

    reason = reasons.SOURCE_NOT_FOUND


class SubjectNotFound(AlignmentError):
    """No epoch or source of the subject was ever registered."""

    reason = reasons.SUBJECT_NOT_FOUND


class InvalidTransition(AlignmentError):
    """The command does not apply to the source's state (Align before Ready, or at a passed epoch)."""

    reason = reasons.COMMAND_REFUSED


class NotAnswered(AlignmentError):
    """The source did not answer the command in time (the query may be stopped or busy)."""

    reason = reasons.COMMAND_NOT_ANSWERED
