"""What every read says besides its keys: which epoch, which store, which query, how long.

One :class:`ReadOptions` holds it; every read of :class:`~epochstate.client.EpochStateClient`
and :class:`~epochstate.client.RoutedClient` takes one (``options=``), or the same fields
as keywords (:class:`ReadKeywords`), or both (the keywords override the object's fields):

    pinned = ReadOptions(epoch=42, operator_id=1)
    client.get("orders", "u1", options=pinned)
    client.get("orders", "u1", epoch=42, operator_id=1)   # the same read

The epoch is chosen by at most one of ``as_of_time``, ``aligned_with``, ``covers``,
``at_least`` and ``epoch``, in that order of precedence (see :meth:`ReadOptions.selector`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from epochstate.client.errors import InvalidArgument
from epochstate.v1 import epochstate_pb2 as pb

EpochArg = int | Literal["latest"] | None


@dataclass(frozen=True)
class AlignedWith:
    """ "The epoch aligned with ``epoch`` of job ``job``", through ``subject`` (a Kafka
    topic) or, when it is empty, the one subject the two jobs share."""

    job: str
    epoch: int
    subject: str = ""


Aligned = AlignedWith | tuple[str, int]


class ReadKeywords(TypedDict, total=False):
    """The fields of :class:`ReadOptions`, as keywords of a read."""

    epoch: EpochArg
    at_least: int | None
    wait: bool
    covers: Mapping[tuple[str, int], int] | None
    aligned_with: Aligned | None
    operator_id: int
    store: str
    query_id: str | None
    timeout: float | None
    as_of_time: int | None


@dataclass(frozen=True)
class ReadOptions:
    """How a read is pinned and where it reads.

    Attributes:
        epoch: an exact epoch, or ``"latest"`` (None means ``"latest"``).
        at_least: the newest epoch once the job has reached this one (waits for it).
        wait: with an exact epoch or ``"latest"``, wait for the epoch rather than
            fail while it is not queryable yet.
        covers: ``{(topic, partition): offset}``: the earliest epoch that has read
            that far in every partition named (waits for it).
        aligned_with: the epoch aligned with an epoch of another job
            (``(job, epoch)`` or :class:`AlignedWith`; docs/read-contract.md).
        operator_id, store: the state store read (Spark's operator id and store name).
        query_id: the job's incarnation (an earlier result's ``query_id``): a read of a
            checkpoint that holds another query now raises ``IncarnationChanged``
            rather than being answered by it.
        timeout: the call's deadline in seconds (None: the client's).
        as_of_time: a time in ms since the Unix epoch: the newest epoch committed at or
            before it (waits, like ``at_least``, until an epoch committed after it is
            queryable, so the answer never changes once given).
    """

    epoch: EpochArg = "latest"
    at_least: int | None = None
    wait: bool = False
    covers: Mapping[tuple[str, int], int] | None = None
    aligned_with: Aligned | None = None
    operator_id: int = 0
    store: str = "default"
    query_id: str | None = None
    timeout: float | None = None
    as_of_time: int | None = None

    @classmethod
    def of(cls, options: ReadOptions | None, keywords: ReadKeywords) -> ReadOptions:
        """``options`` (or the defaults) with ``keywords`` applied over it."""
        base = options if options is not None else _DEFAULT
        if not keywords:
            return base
        if options is not None:
            return dataclasses.replace(base, **keywords)
        # Most reads pass the same few keywords (epoch=, operator_id=...): the options they
        # make are remembered, since building a frozen dataclass costs more than a lookup.
        try:
            # The types too: True == 1 == 1.0, but epoch=True is refused and epoch=1 is not.
            key = (*keywords.items(), *map(type, keywords.values()))
            known = _MADE.get(key)
        except TypeError:  # a value that is not hashable (covers=): built every time
            return dataclasses.replace(base, **keywords)
        if known is None:
            known = dataclasses.replace(base, **keywords)
            if len(_MADE) >= _MADE_MOST:
                _MADE.clear()
            _MADE[key] = known
        return known

    @property
    def exact(self) -> int | None:
        """The epoch when the read names one exactly, else None."""
        chosen_otherwise = (
            self.aligned_with is not None or self.covers is not None or self.at_least is not None
        )
        if chosen_otherwise or isinstance(self.epoch, bool) or not isinstance(self.epoch, int):
            return None
        return self.epoch

    def selector(self) -> pb.EpochSelector:
        """The ``EpochSelector`` these options send."""
        return selector(
            self.epoch,
            at_least=self.at_least,
            wait=self.wait,
            covers=self.covers,
            aligned_with=self.aligned_with,
            as_of_time=self.as_of_time,
        )

    def get_request(self, job: str) -> pb.GetRequest:
        """A new ``GetRequest`` of ``job`` with ``store`` and ``epoch`` set as :meth:`store_ref`
        and :meth:`selector` make them, and no key yet.

        Copied from one these options made once for ``job`` (and keep): copying a message
        costs a fraction of making its parts anew, which a read of one key notices.

        Raises:
            InvalidArgument: an epoch that is neither an int nor "latest".
        """
        made: dict[str, pb.GetRequest] = self.__dict__.get("_gets", {})
        template = made.get(job)
        if template is None:
            template = pb.GetRequest(store=self.store_ref(job), epoch=self.selector())
            # Beside the fields (which stay as they are), replaced whole: a thread reading
            # the previous dict meanwhile only makes its own template again.
            self.__dict__["_gets"] = {**made, job: template}
        request = pb.GetRequest()
        request.CopyFrom(template)
        return request

    def store_ref(self, job: str, query_id: str | None = None) -> pb.StoreRef:
        """The ``StoreRef`` of the store read, pinned to ``query_id`` (default: these
        options' own)."""
        pinned = query_id if query_id is not None else self.query_id
        return pb.StoreRef(job=job, operator_id=self.operator_id, store=self.store, query_id=pinned or "")


_DEFAULT = ReadOptions()
# Options made from keywords alone, by their (name, value) pairs; emptied when full. A
# dict's get and set are each one step under the interpreter's lock, and a lost entry
# only costs making the options again.
_MADE: dict[tuple[Any, ...], ReadOptions] = {}
_MADE_MOST = 1024


def selector(
    epoch: EpochArg = "latest",
    *,
    at_least: int | None = None,
    wait: bool = False,
    covers: Mapping[tuple[str, int], int] | None = None,
    aligned_with: Aligned | None = None,
    as_of_time: int | None = None,
) -> pb.EpochSelector:
    """The EpochSelector for an ``epoch`` argument (int, "latest"), ``at_least``,
    ``covers`` ({(topic, partition): position}: the earliest epoch that has read that far),
    ``aligned_with`` (``(job, epoch)`` or :class:`AlignedWith`: the epoch aligned
    with that epoch of that job), or ``as_of_time`` (ms since the Unix epoch: the newest
    epoch committed at or before it); see docs/read-contract.md."""
    if as_of_time is not None:
        return pb.EpochSelector(as_of_time=as_of_time)
    if aligned_with is not None:
        if not isinstance(aligned_with, AlignedWith):
            aligned_with = AlignedWith(*aligned_with)
        return pb.EpochSelector(
            aligned_with=pb.AlignedWith(
                job=aligned_with.job, epoch=aligned_with.epoch, subject=aligned_with.subject
            )
        )
    if covers is not None:
        offsets = [pb.PartitionOffset(topic=t, partition=p, offset=o) for (t, p), o in covers.items()]
        return pb.EpochSelector(covers=pb.Position(offsets=offsets))
    if at_least is not None:
        return pb.EpochSelector(at_least=at_least)
    if epoch is None or epoch == "latest":
        return pb.EpochSelector(latest=True, wait=wait)
    if isinstance(epoch, int) and not isinstance(epoch, bool):
        return pb.EpochSelector(exact=epoch, wait=wait)
    raise InvalidArgument(f"epoch must be an int or 'latest', got {epoch!r}")
