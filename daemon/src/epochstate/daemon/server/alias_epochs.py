"""Which job and epoch answer an alias's epoch, as the selectors name it (see ``aliases``).

Each call looks once at what the daemon knows now (the catalog's progress, the
subject view's mappings and output epochs) and answers a target, or None and
what it waits for; :class:`~epochstate.daemon.server.aliases.Aliases` waits.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochstate.core.alias.chain import AliasChain, Segment
from epochstate.core.zookeeper.subject_records import SubjectSourceRecord
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.aligned import Role
from epochstate.daemon.server.epochs import BadSelector, NoSuchEpoch
from epochstate.daemon.store.catalog import Catalog, JobNotFound
from epochstate.v1 import epochstate_pb2 as pb


@dataclass(frozen=True)
class AliasTarget:
    """Alias ``alias``'s epoch ``epoch`` is job ``job``'s epoch ``job_epoch``."""

    alias: str
    job: str
    epoch: int
    job_epoch: int


class AliasEpochs:
    """Alias epochs over ``view`` (the jobs' mappings, the output's epochs) and ``catalog``."""

    def __init__(self, view: SubjectView, catalog: Catalog) -> None:
        self.view = view
        self.catalog = catalog

    def attempt(
        self, chain: AliasChain, kind: str, selector: pb.EpochSelector
    ) -> tuple[AliasTarget | None, str]:
        """The target, or None and what it waits for."""
        name = chain.alias.name
        if kind == "latest":
            return self.latest(chain)
        if kind == "at_least":
            if selector.at_least < 0:
                raise BadSelector(f"at_least must be >= 0, got {selector.at_least}")
            newest, why = self.latest(chain)
            if newest is not None and newest.epoch >= selector.at_least:
                return newest, ""
            return None, why or f"alias {name!r} has no queryable epoch >= {selector.at_least} yet"
        if kind == "aligned_with":
            epoch, why = self.aligned(chain, selector.aligned_with)
            if epoch is None:
                return None, why
            return self.exact(chain, epoch)
        if selector.exact < 0:
            raise BadSelector(f"exact epoch must be >= 0, got {selector.exact}")
        return self.exact(chain, selector.exact)

    def exact(self, chain: AliasChain, epoch: int) -> tuple[AliasTarget | None, str]:
        name = chain.alias.name
        segment = chain.answering(epoch)
        if segment is None:
            swap = chain.pending
            assert swap is not None
            return None, (
                f"epoch {epoch} of alias {name!r} is after the swap epoch {swap.epoch} of swap {swap.id} "
                f"({swap.old!r} -> {swap.new!r}), which is {swap.state}: not decided yet"
            )
        self.require_followed(chain, segment, epoch)
        job_epoch = self.role(chain, segment.job).epoch_of(epoch)
        if job_epoch is None:
            return None, (
                f"job {segment.job!r} (answering epoch {epoch} of alias {name!r}) did not read "
                f"epoch {epoch} of {chain.alias.input!r} yet"
            )
        return AliasTarget(name, segment.job, epoch, job_epoch), ""

    def latest(self, chain: AliasChain) -> tuple[AliasTarget | None, str]:
        """The newest alias epoch whose job has ingested it (None: none yet)."""
        name = chain.alias.name
        for index in range(len(chain.segments) - 1, -1, -1):
            segment = chain.segments[index]
            if index == len(chain.segments) - 1:
                self.require_followed(chain, segment, None)
            try:
                progress = self.catalog.get(segment.job).progress
            except JobNotFound:
                continue
            source = self.source(chain, segment.job)
            if progress.empty or source is None:
                continue
            read = [j for j in source.mapping if j <= progress.newest]
            if not read:
                continue
            epoch = source.mapping[max(read)]
            end = segment.until
            if index == len(chain.segments) - 1 and chain.pending is not None:
                end = chain.pending.epoch
            if end is not None:
                epoch = min(epoch, end)
            if segment.after is not None and epoch <= segment.after:
                continue  # the new job has not passed the swap epoch yet: the old one answers
            job_epoch = source.source_epoch_of(epoch)
            if job_epoch is None or job_epoch < progress.oldest:
                continue
            return AliasTarget(name, segment.job, epoch, job_epoch), ""
        return None, f"alias {name!r} has no queryable epoch yet"

    def aligned(self, chain: AliasChain, aligned: pb.AlignedWith) -> tuple[int | None, str]:
        """The alias epoch aligned with epoch ``aligned.epoch`` of job ``aligned.job``.

        Through the input (the job reads it aligned, or writes it: the same input
        epoch) or the output subject (the job reads it aligned: the input epoch whose
        output it read, from the old job's batch or after a swap's handover).
        """
        name, other, epoch = chain.alias.name, aligned.job, aligned.epoch
        if not other or epoch < 0:
            raise BadSelector(f"aligned_with needs a job and an epoch >= 0, got {other!r} and {epoch}")
        alias = chain.alias
        subjects = [aligned.subject] if aligned.subject else [alias.input, alias.subject]
        for topic in subjects:
            source = self.view.source(topic, other)
            writer = self.view.writer(topic)
            writes = topic == alias.input and writer is not None and writer.writer == other
            if source is None and not writes:
                continue
            role = Role(other, topic, writes, source if not writes else None)
            subject_epoch = role.subject_epoch(epoch)
            if subject_epoch is None:
                return None, f"job {other!r} did not read its epoch {epoch} from subject {topic!r} yet"
            if topic == alias.input:
                return subject_epoch, ""
            if topic == alias.subject:
                return self.input_of_output(chain, subject_epoch)
        raise NoSuchEpoch(
            f"job {other!r} neither reads nor writes the input {alias.input!r} of alias {name!r}, "
            f"nor reads its output {alias.subject!r} aligned"
        )

    def input_of_output(self, chain: AliasChain, output: int) -> tuple[int | None, str]:
        """The input epoch whose output is output epoch ``output`` of the alias's subject."""
        record = self.view.epoch(chain.alias.subject, output)
        if record is None:
            return None, f"output epoch {output} of {chain.alias.subject!r} is not registered yet"
        segment = chain.segment_of(record.writer)
        if segment is None:
            raise NoSuchEpoch(
                f"output epoch {output} of {chain.alias.subject!r} was written by {record.writer!r}, "
                f"which is none of alias {chain.alias.name!r}'s jobs"
            )
        input_epoch = segment.input_of_output(output)
        if input_epoch is not None:
            return input_epoch, ""
        if segment.swap is not None:
            return None, f"swap {segment.swap} to {segment.job!r} is not done yet"
        # A first job that wrote the output from its start: its batch n wrote output epoch n.
        input_epoch = self.role(chain, segment.job).subject_epoch(output)
        if input_epoch is None:
            return None, f"job {segment.job!r}'s batch {output} is not in its mapping yet"
        return input_epoch, ""

    def require_followed(self, chain: AliasChain, segment: Segment, epoch: int | None) -> None:
        """JobNotFound, naming the alias, when this daemon does not follow ``segment``'s job."""
        try:
            self.catalog.get(segment.job)
        except JobNotFound:
            which = "its newest epochs" if epoch is None else f"its epoch {epoch}"
            raise JobNotFound(
                f"alias {chain.alias.name!r} is answered ({which}) by job {segment.job!r}, "
                "which this daemon does not follow",
                metadata={"job": segment.job},
            ) from None

    def source(self, chain: AliasChain, job: str) -> SubjectSourceRecord | None:
        return self.view.source(chain.alias.input, job)

    def role(self, chain: AliasChain, job: str) -> Role:
        source = self.source(chain, job)
        if source is None:
            raise NoSuchEpoch(
                f"job {job!r} of alias {chain.alias.name!r} does not read its input {chain.alias.input!r}"
            )
        return Role(job, chain.alias.input, False, source)

    def newest(self, chain: AliasChain) -> AliasTarget | None:
        """The target of a ``latest`` read of the alias now; None: nothing queryable yet."""
        return self.latest(chain)[0]

    def alias_epoch(self, chain: AliasChain, segment: Segment, job_epoch: int) -> int | None:
        """The alias epoch that ``segment``'s job answers with its epoch ``job_epoch``; None if
        it answers none with it (another job answers that input epoch, or nobody yet)."""
        source = self.source(chain, segment.job)
        epoch = None if source is None else source.mapping.get(job_epoch)
        if epoch is None or chain.answering(epoch) != segment:
            return None
        return epoch

    def followed(self, chain: AliasChain) -> list[Segment]:
        """The segments whose job this daemon follows, oldest first."""
        found = []
        for segment in chain.segments:
            try:
                self.catalog.get(segment.job)
            except JobNotFound:
                continue
            found.append(segment)
        return found
