"""The routed client: reads sent to the replicas that serve each key, with failover.

:class:`RoutedClient` asks any daemon it knows where a job is served (``Locate``),
computes each key's Spark partition as Spark does
(:mod:`epochstate.core.partitioner`) and sends the read to a serving replica of
that partition's shard. Guarantees (docs/read-contract.md#routed-reads):

- one read is answered at one epoch of one query: the first answer pins the
  epoch (and query) and every other replica the read needs is asked for exactly
  that epoch;
- ``latest`` never goes backwards within one client: the newest epoch answered
  for a job is remembered, and a later ``latest`` read asks for ``at_least`` it;
- a replica that is unreachable (UNAVAILABLE, or silent until its share of the
  deadline), or that no longer follows the job, is left for another replica,
  and the location is asked again, until the call's deadline.

Because every replica's answer for (job, store, key, epoch) is the same bytes,
failing over never changes an answer.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from epochstate.client.client import (
    CHANNEL_OPTIONS,
    EpochStateClient,
    Lookup,
    StoreSchema,
    _lookup,
    _lookups,
    _schemas_of,
)
from epochstate.client.errors import DeadlineExceeded, InvalidArgument, PartitionNotHeld, Unavailable
from epochstate.client.failover import first_answer
from epochstate.client.over_time import (
    EpochChanges,
    KeyHistory,
    KeyVersion,
    Schemas,
    changes_request,
    history_request,
    next_history_page,
    versions_of,
)
from epochstate.client.partitions import key_partition
from epochstate.client.read_options import ReadKeywords, ReadOptions
from epochstate.client.routed_changes import merged, shard_feed
from epochstate.client.routing import Location, Replica, Replicas, Shard
from epochstate.client.tls import TlsOptions
from epochstate.client.values import to_row
from epochstate.core.shuffle_keys import shuffle_fields
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from typing import Unpack

T = TypeVar("T")


class _Answer(Protocol):
    @property
    def epoch(self) -> int: ...


A = TypeVar("A", bound=_Answer)
# A location older than this is asked again at the next read.
LOCATE_EVERY = 30.0
_BASE_METHODS = ("ListJobs", "DescribeJob", "ListEpochs", "FollowJob", "ReportEpoch")


@dataclass(frozen=True)
class _Pin:
    """What one routed read is pinned to once its first answer came: epoch and query
    (and that answer, which says the shape its records are in)."""

    epoch: int
    query_id: str
    answer: pb.MultiGetResponse | None = None


class _Relaid(Exception):
    """A read's keys were routed by another partition layout than its epoch has."""

    def __init__(self, pin: _Pin) -> None:
        super().__init__(f"epoch {pin.epoch} has another partition layout")
        self.pin = pin


class RoutedClient(EpochStateClient):
    """Reads routed over the daemons that serve each job. Thread-safe; close it (or use ``with``).

    ``targets`` are daemons to ask where jobs are served (any member of a group,
    or several standalone daemons); reads go to the replicas ``Locate`` names,
    over connections with the same ``tls`` options. Calls other than the reads
    (``jobs``, ``describe``, ``epochs``, ``watch``, ``alignment``, ...) go to the
    targets, the next one when a target is unreachable. ``connections``: per daemon,
    as for :class:`EpochStateClient`.
    """

    def __init__(
        self,
        targets: Sequence[str],
        *,
        timeout: float = 10.0,
        tls: TlsOptions | None = None,
        locate_every: float = LOCATE_EVERY,
        connections: int | None = None,
    ) -> None:
        targets = [t.strip() for t in targets if t.strip()]
        if not targets:
            raise InvalidArgument("a routed client needs at least one target")
        super().__init__(targets[0], timeout=timeout, tls=tls, connections=connections)
        self.targets = tuple(targets)
        self._replicas = Replicas(tls, CHANNEL_OPTIONS, connections)
        self._locate_every = locate_every
        # Each of these dicts is never changed once published: a change replaces it whole,
        # under the lock, so that the reads every routed call makes take no lock.
        self._lock = threading.Lock()
        self._locations: dict[str, Location] = {}
        self._newest: dict[str, tuple[str, int]] = {}  # job -> (query, newest epoch answered)
        self._held: dict[tuple[str, str], int] = {}  # (job, address) -> newest epoch it answered
        self._base_methods = {id(getattr(self._stub, name)): name for name in _BASE_METHODS}

    def __enter__(self) -> RoutedClient:
        return self

    def close(self) -> None:
        self._replicas.close()
        super().close()

    # -- where ------------------------------------------------------------------

    def locate(self, job: str, *, refresh: bool = False, timeout: float | None = None) -> Location:
        """Where ``job`` is served (cached for ``locate_every`` seconds unless ``refresh``)."""
        known = self._locations.get(job)
        if not refresh and known is not None and time.monotonic() - known.fetched_at < self._locate_every:
            return known

        def ask(address: str, seconds: float) -> Location:
            response = self._replicas.routing(address).Locate(pb.LocateRequest(job=job), timeout=seconds)
            return Location.of(response, address)

        location = self._failover(lambda _, __: self._contacts(job), ask, timeout, waits=False)
        with self._lock:
            self._locations = {**self._locations, job: location}
        return location

    def _location_for(self, job: str, round_: int, left: float) -> Location:
        """Where ``job`` is served, for round ``round_`` of a read with ``left`` seconds:
        asked afresh after the first round (within the read's own deadline); when that
        fails (the deadline is near, the daemons asked are down), the location known
        serves, so the read ends with its replicas' answers, not with Locate's error."""
        known = self._locations.get(job)
        if known is not None and left <= 0:
            return known
        try:
            return self.locate(job, refresh=round_ > 0, timeout=max(0.001, left))
        except (Unavailable, DeadlineExceeded):
            if known is None:
                raise
            return known

    def _contacts(self, job: str | None = None) -> list[str]:
        """Daemons to ask about anything: the targets, then the known replicas of ``job``;
        those that failed lately last."""
        addresses = list(self.targets)
        location = None if job is None else self._locations.get(job)
        if location is not None:
            addresses += [r.address for s in location.shards for r in s.replicas if r.address]
        unique = list(dict.fromkeys(addresses))
        return sorted(unique, key=self._replicas.suspect)

    # -- the failover loop --------------------------------------------------------

    def _failover(
        self,
        candidates: Callable[[int, float], list[str]],
        attempt: Callable[[str, float], T],
        timeout: float | None,
        *,
        waits: bool,
    ) -> T:
        seconds = self.timeout if timeout is None else timeout
        return first_answer(candidates, attempt, seconds, self._replicas, waits=waits)

    def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        """The calls that are not routed (ListJobs, DescribeJob, ...): any target answers."""
        name = self._base_methods.get(id(method))
        if name is None:  # AlignmentAdmin, JobsAdmin: on the first target's channel
            return super()._call(method, request, timeout)

        def ask(address: str, seconds: float) -> Any:
            return getattr(self._replicas.stub(address), name)(request, timeout=seconds)

        return self._failover(lambda _, __: self._contacts(), ask, timeout, waits=False)

    # -- routing one request -----------------------------------------------------------

    def _route(
        self,
        job: str,
        shard: int,
        chosen: pb.EpochSelector,
        send: Callable[[pb_grpc.EpochStateStub, float], A],
        timeout: float | None,
        *,
        waits: bool,
        located: Location | None = None,
    ) -> A:
        """``send`` to a serving replica of shard ``shard`` of ``job``: first those known to
        hold the epoch ``chosen`` asks for (by their replica znodes or their own answers).
        ``located``: the location the read was routed by, which the first round uses."""
        wanted = self._wanted(job, chosen)

        def candidates(round_: int, left: float) -> list[str]:
            location = located if round_ == 0 and located else self._location_for(job, round_, left)
            shards = location.shards
            replicas = shards[shard].replicas if shard < len(shards) else ()
            return [r.address for r in self._replicas.order(replicas, wanted)]

        def attempt(address: str, seconds: float) -> A:
            answer = send(self._replicas.stub(address), seconds)
            if answer.epoch > self._held.get((job, address), -1):
                with self._lock:
                    known = self._held.get((job, address), -1)
                    self._held = {**self._held, (job, address): max(known, answer.epoch)}
            return answer

        return self._failover(candidates, attempt, timeout, waits=waits)

    def route(
        self, job: str, key: Any, *, operator_id: int = 0, store: str = "default", epoch: int | None = None
    ) -> Shard:
        """The shard (its partitions and replicas) that reads of ``key`` at ``epoch`` (None:
        the newest) are sent to."""
        schema = self._store(job, operator_id, store).at(epoch)
        location = self.locate(job)
        index = self._shard_index(location, operator_id, store, to_row(key, schema.key), schema, epoch)
        return location.shards[index]

    def _shard_index(
        self,
        location: Location,
        operator_id: int,
        store: str,
        key: pb.Row,
        schema: StoreSchema,
        epoch: int | None,
    ) -> int:
        """The shard of ``key`` read at ``epoch`` (None: the newest): its partition is
        the one of that epoch's layout (an offline repartition moves keys)."""
        if location.single:
            return 0
        partitions = location.partitions_at(operator_id, store, epoch) or schema.num_partitions
        # An operator the rule does not know: the whole key (a daemon refuses a key of a
        # partition it does not hold, so a wrong guess fails the read, never answers it).
        fields = shuffle_fields(schema.operator_name, schema.store, schema.kind, len(schema.key.fields))
        try:
            partition = key_partition(key, schema.key, partitions, fields)
        except ValueError as error:
            raise InvalidArgument(f"key does not match the key schema: {error}") from None
        for index, shard in enumerate(location.shards):
            if shard.covers(partition):
                return index
        raise Unavailable(f"no shard of job {location.job!r} holds partition {partition}")

    # -- monotonic reads ----------------------------------------------------------------

    def _monotonic(self, job: str, request: pb.EpochSelector) -> tuple[pb.EpochSelector, bool]:
        """``latest`` as ``at_least`` the newest epoch this client was answered for ``job``;
        True when it was so rewritten (the read then does not wait on a replica behind it,
        it moves on to another)."""
        if request.WhichOneof("kind") != "latest":
            return request, False
        seen = self._newest.get(job)
        location = self._locations.get(job)
        if seen is None or (location is not None and location.query_id and location.query_id != seen[0]):
            return request, False
        return pb.EpochSelector(at_least=seen[1]), True

    def _saw(self, job: str, query_id: str, epoch: int) -> None:
        if self._newest.get(job) == (query_id, epoch):  # most reads: nothing new
            return
        with self._lock:
            seen = self._newest.get(job)
            if seen is None or seen[0] != query_id or epoch > seen[1]:  # another query: its own epochs
                self._newest = {**self._newest, job: (query_id, epoch)}

    def newest_seen(self, job: str) -> int | None:
        """The newest epoch of ``job`` this client was answered with (None: none yet)."""
        seen = self._newest.get(job)
        return None if seen is None else seen[1]

    def _wanted(self, job: str, request: pb.EpochSelector) -> Callable[[Replica], bool]:
        kind = request.WhichOneof("kind")
        held = self._held

        def newest(replica: Replica) -> int:
            return max(replica.newest_epoch, held.get((job, replica.address), -1))

        if kind == "exact":
            return lambda r: r.oldest_epoch <= request.exact <= newest(r)
        if kind == "at_least":
            return lambda r: newest(r) >= request.at_least
        return lambda r: True

    @staticmethod
    def _waits(request: pb.EpochSelector) -> bool:
        return request.wait or request.WhichOneof("kind") in (
            "at_least",
            "covers",
            "aligned_with",
            "as_of_time",
        )

    # -- reads -------------------------------------------------------------------------

    def get(
        self, job: str, key: Any, *, options: ReadOptions | None = None, **read: Unpack[ReadKeywords]
    ) -> Lookup:
        """:meth:`EpochStateClient.get`, sent to a replica of the key's partition."""
        o = ReadOptions.of(options, read)
        location = self.locate(job)
        routed_at = o.exact
        if not location.single or (routed_at is not None and routed_at > location.newest_epoch):
            return self.multi_get(job, [key], options=o)[0]
        # One shard holds every partition: whatever epoch answers, the key was routed right,
        # so the read is one Get to one of its replicas (the common case, kept lean).
        schema = self._store(job, o.operator_id, o.store, o.query_id)
        requested, derived = self._monotonic(job, o.selector())
        # ``latest`` made ``at_least`` (derived) sends its own selector.
        request = pb.GetRequest(store=o.store_ref(job), epoch=requested) if derived else o.get_request(job)
        to_row(key, schema.at(routed_at).key, into=request.key)
        try:
            response = self._route(
                job,
                0,
                requested,
                functools.partial(_get, request),
                o.timeout,
                waits=self._waits(requested) and not derived,
                located=location,
            )
        except PartitionNotHeld:
            if routed_at is not None:
                raise
            return self.multi_get(job, [key], options=o)[0]  # the shards moved: routed afresh
        self._saw(job, response.query_id, response.epoch)
        at = self._answered(job, o.operator_id, o.store, schema, response.query_id, response).at(
            response.epoch
        )
        return _lookup(response.epoch, response.record, at, response.query_id)

    def multi_get(
        self,
        job: str,
        keys: Sequence[Any],
        *,
        options: ReadOptions | None = None,
        **read: Unpack[ReadKeywords],
    ) -> list[Lookup]:
        """:meth:`EpochStateClient.multi_get`, split by the replicas of the keys' partitions;
        results in request order, all of one epoch (the first answer's).

        Keys are routed by the partition layout of the epoch read. Before the epoch is
        known (``latest``, ``at_least``, ...) that is the newest layout located; when
        the epoch answered turns out to have another layout (the job was repartitioned
        in between), the read is made again, pinned to that epoch and routed by its
        layout. A replica refuses a key of a partition it does not hold, so a key routed
        by the wrong layout is never answered "absent".
        """
        o = ReadOptions.of(options, read)
        deadline = time.monotonic() + (self.timeout if o.timeout is None else o.timeout)
        schema = self._store(job, o.operator_id, o.store, o.query_id)
        requested, derived = self._monotonic(job, o.selector())
        routed_at = o.exact
        while True:
            location = self.locate(job)
            if routed_at is not None and routed_at > location.newest_epoch:
                location = self.locate(job, refresh=True)  # its layouts may not reach the epoch
            try:
                pin, answers = self._multi_get_routed(
                    job, keys, schema, location, routed_at, requested, derived, o, deadline
                )
            except (_Relaid, PartitionNotHeld) as error:
                if routed_at is not None and not isinstance(error, _Relaid):
                    raise
                # Routed by another layout than the epoch read has: read that epoch again.
                if isinstance(error, _Relaid):
                    pinned = error.pin
                else:
                    left = max(0.001, deadline - time.monotonic())
                    pinned = self._pin_epoch(job, requested, derived, o, left)
                requested, derived, routed_at = (
                    pb.EpochSelector(exact=pinned.epoch, wait=True),
                    False,
                    pinned.epoch,
                )
                o = dataclasses.replace(o, query_id=o.query_id or pinned.query_id)
                continue
            break
        self._saw(job, pin.query_id, pin.epoch)
        at = self._answered(job, o.operator_id, o.store, schema, pin.query_id, pin.answer).at(pin.epoch)
        found: list[Lookup | None] = [None] * len(keys)
        for indexes, response in answers:
            for index, lookup in zip(
                indexes, _lookups(response, at, (pin.epoch, pin.query_id, "")), strict=True
            ):
                found[index] = lookup
        return [lookup for lookup in found if lookup is not None]

    def _pin_epoch(
        self,
        job: str,
        requested: pb.EpochSelector,
        derived: bool,
        o: ReadOptions,
        timeout: float | None,
    ) -> _Pin:
        """The epoch (and query) any serving replica answers ``requested`` with, reading no key."""
        request = pb.MultiGetRequest(store=o.store_ref(job, ""), epoch=requested)
        response = self._route(
            job,
            0,
            requested,
            functools.partial(_multi_get, request),
            timeout,
            waits=self._waits(requested) and not derived,
        )
        return _Pin(response.epoch, response.query_id)

    def _multi_get_routed(
        self,
        job: str,
        keys: Sequence[Any],
        schema: StoreSchema,
        location: Location,
        routed_at: int | None,
        requested: pb.EpochSelector,
        derived: bool,
        o: ReadOptions,
        deadline: float,
    ) -> tuple[_Pin, list[tuple[list[int], pb.MultiGetResponse]]]:
        """One try of :meth:`multi_get`: keys grouped by their shard at ``routed_at`` (None:
        the newest layout located), each group sent to a replica of its shard; the answer
        of each group, with the positions of its keys among ``keys``.

        Raises:
            _Relaid: the first answer's epoch has another partition layout than the keys
                were grouped by.
        """
        key_schema = schema.at(routed_at)
        used = location.partitions_at(o.operator_id, o.store, routed_at)
        rows = [to_row(k, key_schema.key) for k in keys]
        groups: dict[int, list[int]] = {}
        for index, row in enumerate(rows):
            shard_index = self._shard_index(location, o.operator_id, o.store, row, key_schema, routed_at)
            groups.setdefault(shard_index, []).append(index)
        if not groups:
            groups[0] = []
        pin: _Pin | None = None
        answers: list[tuple[list[int], pb.MultiGetResponse]] = []
        for shard, indexes in sorted(groups.items()):
            ref = o.store_ref(job, o.query_id or (pin.query_id if pin else ""))
            chosen = requested if pin is None else pb.EpochSelector(exact=pin.epoch, wait=True)
            request = pb.MultiGetRequest(store=ref, keys=[rows[i] for i in indexes], epoch=chosen)
            left = max(0.001, deadline - time.monotonic())
            response = self._route(
                job,
                shard,
                chosen,
                functools.partial(_multi_get, request),
                left,
                waits=self._waits(chosen) and not (derived and pin is None),
                located=location,
            )
            if pin is None:
                pin = _Pin(response.epoch, response.query_id, response)
                relaid = not location.single and routed_at is None
                if relaid and self._partitions_at(job, location, pin.epoch, o.operator_id, o.store) != used:
                    raise _Relaid(pin)
            elif (response.epoch, response.query_id) != (pin.epoch, pin.query_id):
                raise Unavailable(f"replicas answered epoch {response.epoch}, not the pinned {pin.epoch}")
            if len(response.records) != len(indexes):
                raise ValueError(f"{len(indexes)} keys asked for, {len(response.records)} records answered")
            answers.append((indexes, response))
        assert pin is not None
        return pin, answers

    def _partitions_at(
        self, job: str, location: Location, epoch: int, operator_id: int, store: str
    ) -> int | None:
        """The store's partition count at ``epoch``, from ``location`` or, when the epoch is
        newer than it knows, from a fresh one."""
        if epoch > location.newest_epoch:
            location = self.locate(job, refresh=True)
        return location.partitions_at(operator_id, store, epoch)

    def pinned_epoch(
        self, job: str, *, options: ReadOptions | None = None, **read: Unpack[ReadKeywords]
    ) -> int:
        """:meth:`EpochStateClient.pinned_epoch`, answered by any serving replica (never older
        than an epoch this client was answered with, for ``latest``)."""
        o = ReadOptions.of(options, read)
        requested, derived = self._monotonic(job, o.selector())
        pin = self._pin_epoch(job, requested, derived, o, o.timeout)
        self._saw(job, pin.query_id, pin.epoch)
        return pin.epoch

    def scan(
        self,
        job: str,
        *,
        prefix: Any = (),
        page_size: int = 1000,
        limit: int | None = None,
        options: ReadOptions | None = None,
        **read: Unpack[ReadKeywords],
    ) -> Iterator[Lookup]:
        """:meth:`EpochStateClient.scan` over every shard, each page from any of its replicas.

        The first page pins the epoch and query; every later page (its token carries
        both) and every other shard reads exactly them. Keys come in key order
        within a shard, shard by shard; a shard's records outside its partitions
        (a replica that holds more than its shard) are left out.
        """
        o = ReadOptions.of(options, read)
        schema = self._store(job, o.operator_id, o.store, o.query_id)
        location = self.locate(job)
        requested, derived = self._monotonic(job, o.selector())
        prefix_row = to_row(prefix, schema.at(o.exact).key, partial=True)
        pin: _Pin | None = None
        returned = 0
        for index, shard in enumerate(location.shards):
            chosen = requested if pin is None else pb.EpochSelector(exact=pin.epoch, wait=True)
            ref = o.store_ref(job, o.query_id or (pin.query_id if pin else ""))
            request = pb.ScanRequest(store=ref, epoch=chosen, prefix=prefix_row, limit=page_size)
            waits = self._waits(chosen) and not (derived and pin is None)
            while True:
                response = self._route(
                    job, index, chosen, functools.partial(_scan, request), o.timeout, waits=waits
                )
                if pin is None:
                    pin = _Pin(response.epoch, response.query_id)
                    self._saw(job, pin.query_id, pin.epoch)
                    self._check_covered(job, location, pin.epoch, o.operator_id, o.store)
                elif (response.epoch, response.query_id) != (pin.epoch, pin.query_id):
                    raise Unavailable(f"replicas answered epoch {response.epoch}, not the pinned {pin.epoch}")
                answered = self._answered(job, o.operator_id, o.store, schema, pin.query_id, response)
                at = answered.at(pin.epoch)
                for record in response.records:
                    if location.single or shard.covers(record.partition):
                        yield _lookup(pin.epoch, record, at, pin.query_id)
                        returned += 1
                        if limit is not None and returned >= limit:
                            return
                if not response.next_page_token:
                    break
                # The token carries the epoch and query: any replica of the shard reads the next page.
                request.page_token = response.next_page_token
                chosen = pb.EpochSelector(exact=pin.epoch)

    # -- over time ---------------------------------------------------------------------

    def history(
        self,
        job: str,
        key: Any,
        *,
        from_epoch: int = 0,
        to_epoch: int | None = None,
        wait: bool = False,
        operator_id: int = 0,
        store: str = "default",
        query_id: str | None = None,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> KeyHistory:
        """:meth:`EpochStateClient.history`, from a replica of the key's partition (routed
        by the layout of ``to_epoch``, or the newest); every page is pinned to the
        ``to_epoch`` the first resolved, so failing over between pages changes nothing.
        Without ``to_epoch`` the range ends at the newest epoch, never older than one this
        client was answered with for the job (as ``latest`` reads)."""
        schema = self._store(job, operator_id, store, query_id)
        location = self.locate(job)
        at = schema.at(to_epoch)
        row = to_row(key, at.key)
        shard = self._shard_index(location, operator_id, store, row, at, to_epoch)
        request = history_request(
            job,
            row,
            from_epoch=from_epoch,
            to_epoch=to_epoch,
            wait=wait,
            operator_id=operator_id,
            store=store,
            query_id=query_id,
            page_size=page_size,
        )
        # Unpinned, the range ends at least at the newest epoch seen (``_monotonic``).
        newest, derived = self._monotonic(job, pb.EpochSelector(latest=True))
        versions: list[KeyVersion] = []
        while True:
            chosen, send = newest, functools.partial(_history, request)
            if request.HasField("to_epoch"):
                chosen = pb.EpochSelector(exact=request.to_epoch, wait=wait)
            elif derived:
                send = functools.partial(_history_at_least, request, newest.at_least)
            answer = self._route(
                job, shard, chosen, send, timeout, waits=wait and request.HasField("to_epoch")
            )
            response = answer.response
            self._saw(job, response.query_id, response.to_epoch)
            schema = self._answered(job, operator_id, store, schema, response.query_id)
            versions += versions_of(response, _schemas_of(schema))
            if not next_history_page(request, response):
                break
        return KeyHistory(job, from_epoch, response.to_epoch, response.query_id, tuple(versions))

    def changes(
        self,
        job: str,
        *,
        from_epoch: int,
        to_epoch: int | None = None,
        follow: bool = False,
        operator_id: int = 0,
        store: str = "default",
        query_id: str | None = None,
        page_size: int = 1000,
        timeout: float | None = None,
        shard: int | None = None,
    ) -> Generator[EpochChanges, None, None]:
        """:meth:`EpochStateClient.changes` of every shard merged into whole epochs of the
        job (each epoch's changes shard by shard, in key order within a shard), or with
        ``shard`` (an index into ``locate(job).shards``) the feed of that shard alone. A
        shard's feed moves to another replica when its replica becomes unreachable,
        resuming at the next whole epoch. Without ``to_epoch`` or ``follow`` the range
        ends at the newest epoch a replica serves when the call starts (the same for
        every shard)."""
        schema = self._store(job, operator_id, store, query_id)
        if to_epoch is None and not follow:
            to_epoch = self.pinned_epoch(job, operator_id=operator_id, store=store, timeout=timeout)
        request = changes_request(
            job,
            from_epoch=from_epoch,
            to_epoch=to_epoch,
            follow=follow,
            operator_id=operator_id,
            store=store,
            query_id=query_id,
            page_size=page_size,
        )

        def schemas(message: pb.ChangesResponse) -> Schemas:
            nonlocal schema
            schema = self._answered(job, operator_id, store, schema, message.query_id, message)
            return _schemas_of(schema)

        location = self.locate(job)
        shards = range(len(location.shards)) if shard is None else [shard]
        if shard is not None and not 0 <= shard < len(location.shards):
            raise InvalidArgument(f"job {job!r} has {len(location.shards)} shards, not a shard {shard}")
        feeds = [
            shard_feed(lambda: self.locate(job), index, request, self._replicas, schemas, timeout)
            for index in shards
        ]
        yield from merged(feeds, job)

    def _check_covered(self, job: str, location: Location, epoch: int, operator_id: int, store: str) -> None:
        """A scan lists the keys of every partition of ``epoch`` or fails: never a silently
        shorter answer when a repartition made more partitions than the shards cover.

        Raises:
            Unavailable: partitions of the epoch's layout that no shard holds.
        """
        if location.single:
            return
        count = self._partitions_at(job, location, epoch, operator_id, store)
        if count is None:
            return
        missing = [p for p in range(count) if location.shard_of(p) is None]
        if missing:
            raise Unavailable(
                f"job {job!r}: partitions {missing[0]}-{missing[-1]} of the {count} of epoch {epoch} "
                f"are held by no shard yet (the group re-plans its shards after a repartition)"
            )


@dataclass(frozen=True)
class _HistoryAnswer:
    """A History response as :meth:`RoutedClient._route` takes answers: by the epoch it read."""

    epoch: int
    response: pb.HistoryResponse


def _history(request: pb.HistoryRequest, stub: pb_grpc.EpochStateStub, seconds: float) -> _HistoryAnswer:
    response: pb.HistoryResponse = stub.History(request, timeout=seconds)
    return _HistoryAnswer(response.to_epoch, response)


def _history_at_least(
    request: pb.HistoryRequest, epoch: int, stub: pb_grpc.EpochStateStub, seconds: float
) -> _HistoryAnswer:
    """History up to the newest epoch a replica serves, provided that is at least ``epoch``;
    from a replica behind it, up to ``epoch`` once it has it (it waits for it, within
    ``seconds``, then fails EPOCH_WAIT_TIMED_OUT: the read moves on to another replica)."""
    ends = time.monotonic() + seconds
    answer = _history(request, stub, seconds)
    if answer.epoch >= epoch:
        return answer
    pinned = pb.HistoryRequest()
    pinned.CopyFrom(request)
    pinned.to_epoch, pinned.wait = epoch, True
    return _history(pinned, stub, max(0.001, ends - time.monotonic()))


def _scan(request: pb.ScanRequest, stub: pb_grpc.EpochStateStub, seconds: float) -> pb.ScanResponse:
    return stub.Scan(request, timeout=seconds)


def _multi_get(
    request: pb.MultiGetRequest, stub: pb_grpc.EpochStateStub, seconds: float
) -> pb.MultiGetResponse:
    return stub.MultiGet(request, timeout=seconds)


def _get(request: pb.GetRequest, stub: pb_grpc.EpochStateStub, seconds: float) -> pb.GetResponse:
    return stub.Get(request, timeout=seconds)


def routed(
    targets: str | Sequence[str], *, timeout: float = 10.0, tls: TlsOptions | None = None
) -> RoutedClient:
    """A :class:`RoutedClient` of ``targets`` (a sequence, or a comma-separated string)."""
    if isinstance(targets, str):
        targets = targets.split(",")
    return RoutedClient(targets, timeout=timeout, tls=tls)
