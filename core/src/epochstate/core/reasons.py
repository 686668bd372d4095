"""The stable error reasons of the v1 API: what a failed call's ``google.rpc.ErrorInfo`` says.

A call that fails on purpose ends with a gRPC status whose details hold one
``google.rpc.ErrorInfo`` with ``domain`` :data:`DOMAIN` and ``reason`` one of the
strings below, readable from any gRPC client (``grpc_status.rpc_status.from_call``
in Python, ``status.FromError`` in Go, ``@grpc/grpc-js`` with
``google-protobuf``'s ``Status``). The status code stays the coarse class; the
reason says which of the errors sharing a code it was, so a caller never has to
read the message (which is for people and may change).

The contract: reasons are part of v1 and only ever added, never renamed, reused or
removed; each names one meaning and always travels with the same status code. A
client must treat a reason it does not know by its status code. The table
:data:`REASONS` documents each one (what it means, what a caller should do); the
same table is in the comments of ``proto/src/epochstate/v1/epochstate.proto``. The
daemon sends each error with its reason's code, read from this table
(``daemon/server/status.py``); ``tests/test_error_reasons.py`` fails when the
client's table of exceptions or the proto drift from it.

``ErrorInfo.metadata`` may carry details, strings under lowerCamelCase keys:
``job``, ``operatorId`` and ``store`` (JOB_NOT_FOUND, STORE_NOT_FOUND); ``job``,
``epoch`` (the one asked for), ``oldestEpoch`` and ``newestEpoch`` (the queryable
range, when there is one) for an exact read's EPOCH_NOT_READY and EPOCH_RETIRED.
Keys may be added; the reason alone decides what an error is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DOMAIN: Final = "epochstate.dev"
"""``ErrorInfo.domain`` of every error the daemon sends: the reasons below are ours."""


@dataclass(frozen=True)
class Reason:
    """One documented reason: its wire string, its status code's name, what it means, what to do."""

    name: str
    code: str
    meaning: str
    action: str


REASONS: dict[str, Reason] = {}
"""Every reason of the v1 contract by its wire string, in the order they were added."""


def _reason(name: str, code: str, meaning: str, action: str) -> str:
    if name in REASONS:
        raise ValueError(f"reason {name} is defined twice")
    REASONS[name] = Reason(name, code, meaning, action)
    return name


JOB_NOT_FOUND: Final = _reason(
    "JOB_NOT_FOUND",
    "NOT_FOUND",
    "The daemon follows no job of that name.",
    "Check the name (ListJobs), or ask the daemon that follows the job; FollowJob starts following it.",
)
STORE_NOT_FOUND: Final = _reason(
    "STORE_NOT_FOUND",
    "NOT_FOUND",
    "The job has no state store with that operator id and store name, or none at the epoch read"
    " (a transformWithState variable outside the runs that declare it).",
    "Pick a store DescribeJob lists; a store new in the query appears with its first epoch.",
)
BAD_KEY: Final = _reason(
    "BAD_KEY",
    "INVALID_ARGUMENT",
    "A key (or scan bound) does not match the store's key schema.",
    "Build the key from DescribeJob's key schema, for the epoch read; do not retry unchanged.",
)
BAD_SELECTOR: Final = _reason(
    "BAD_SELECTOR",
    "INVALID_ARGUMENT",
    "The EpochSelector is malformed (a negative epoch, an empty position, a bad job name).",
    "Fix the selector; do not retry unchanged.",
)
BAD_REQUEST: Final = _reason(
    "BAD_REQUEST",
    "INVALID_ARGUMENT",
    "The request is malformed apart from its key and selector (a missing name, a limit, "
    "a page token, a wait, a subject name, a retention to keep, a checkpoint that cannot be followed).",
    "Fix the request; the message names the field. Do not retry unchanged.",
)
EPOCH_NOT_READY: Final = _reason(
    "EPOCH_NOT_READY",
    "FAILED_PRECONDITION",
    "The epoch has not committed yet, or is committed but not ingested yet (the read did not wait).",
    "Retry later, or read with wait=true (or at_least) and a deadline.",
)
NO_SUCH_EPOCH: Final = _reason(
    "NO_SUCH_EPOCH",
    "FAILED_PRECONDITION",
    "No epoch can ever satisfy the selector: the job reads none of the named partitions, "
    "the jobs share no subject (or several, and none was named), the epoch was never aligned, "
    "or aligned_with reached a daemon without ZooKeeper.",
    "Change the selector; retrying cannot succeed.",
)
EPOCH_WAIT_TIMED_OUT: Final = _reason(
    "EPOCH_WAIT_TIMED_OUT",
    "DEADLINE_EXCEEDED",
    "The read waited for its epoch, and the epoch did not become queryable before the deadline.",
    "Retry with a longer deadline; check that the job is running (ListEpochs, WatchEpochs).",
)
EPOCH_RETIRED: Final = _reason(
    "EPOCH_RETIRED",
    "OUT_OF_RANGE",
    "The epoch (or the alignment entry naming it) is older than retention and is gone for good.",
    "Read a newer epoch: the message gives the queryable range (ListEpochs too).",
)
EPOCH_UNAVAILABLE: Final = _reason(
    "EPOCH_UNAVAILABLE",
    "DATA_LOSS",
    "The epoch committed, but its state files in the checkpoint cannot be read (damaged or purged).",
    "Read another epoch; an operator must look at the checkpoint (DescribeJob lists the problems).",
)
SHUTTING_DOWN: Final = _reason(
    "SHUTTING_DOWN",
    "UNAVAILABLE",
    "The daemon is shutting down.",
    "Retry with back-off, on this daemon once restarted or on another replica.",
)
REGISTRY_UNAVAILABLE: Final = _reason(
    "REGISTRY_UNAVAILABLE",
    "UNAVAILABLE",
    "The daemon could not reach ZooKeeper in time.",
    "Retry with back-off; the call is safe to repeat.",
)
CORRUPT_REGISTRY_RECORD: Final = _reason(
    "CORRUPT_REGISTRY_RECORD",
    "DATA_LOSS",
    "A ZooKeeper node of the registry does not hold the record its path promises.",
    "Do not retry; an operator must repair or delete the node the message names.",
)
SUBJECT_NOT_FOUND: Final = _reason(
    "SUBJECT_NOT_FOUND",
    "NOT_FOUND",
    "No epoch or source of that subject (Kafka topic) was ever registered.",
    "Check the topic name; a subject appears once an aligned sink or source used it.",
)
SOURCE_NOT_FOUND: Final = _reason(
    "SOURCE_NOT_FOUND",
    "NOT_FOUND",
    "The subject has no source of that job (it never ran with the zookeeper and job options).",
    "Check the job name (AlignmentAdmin.Status lists the sources).",
)
COMMAND_REFUSED: Final = _reason(
    "COMMAND_REFUSED",
    "FAILED_PRECONDITION",
    "The alignment command does not apply to the source's state (Align before ready, at a "
    "passed epoch, CatchUp while aligned), or the source refused it.",
    "Read the source's state (AlignmentAdmin.Status), then issue the command that applies.",
)
COMMAND_NOT_ANSWERED: Final = _reason(
    "COMMAND_NOT_ANSWERED",
    "DEADLINE_EXCEEDED",
    "The source did not carry the alignment command out in time (its query may be stopped or busy).",
    "The command stays issued: watch AlignmentAdmin.Status, or wait again; do not issue it twice.",
)
NO_ZOOKEEPER: Final = _reason(
    "NO_ZOOKEEPER",
    "FAILED_PRECONDITION",
    "The daemon runs without ZooKeeper, so it has no subjects to align or prune.",
    "Send the call to a daemon started with --zookeeper.",
)
INTERNAL: Final = _reason(
    "INTERNAL",
    "INTERNAL",
    "The daemon failed on purpose but has no more precise reason (a damaged store, a bug).",
    "Do not retry blindly; report it with the daemon's log.",
)
STORE_DAMAGED: Final = _reason(
    "STORE_DAMAGED",
    "DATA_LOSS",
    "The daemon's own store (its local RocksDB) cannot be read: a file is damaged or unreadable.",
    "Do not retry on this daemon; read from another replica. An operator must look at the daemon's "
    "log; deleting its store directory makes it re-ingest the retained epochs from the checkpoints.",
)
TOO_MANY_CALLS: Final = _reason(
    "TOO_MANY_CALLS",
    "RESOURCE_EXHAUSTED",
    "The daemon already serves as many calls of this kind (unary reads, waiting reads, streams, "
    "reports, admin) as it is configured to; the call was refused at once, before any work.",
    "Retry with back-off or on another replica; hold fewer streams or waiting reads open at once "
    "(the metadata names the kind and its limit).",
)
RESPONSE_TOO_LARGE: Final = _reason(
    "RESPONSE_TOO_LARGE",
    "RESOURCE_EXHAUSTED",
    "The answer would be larger than the daemon's response size limit.",
    "Ask for fewer keys per MultiGet, or a smaller Scan page (limit); do not retry unchanged.",
)
NOT_AUTHENTICATED: Final = _reason(
    "NOT_AUTHENTICATED",
    "UNAUTHENTICATED",
    "The daemon requires an identity and the call carried none it accepts: no client certificate "
    "and no bearer token, an unknown token, or a token sent over plaintext TCP.",
    "Connect with a client certificate the daemon's client CA signed, or send the token of an "
    "identity (TLS or the Unix socket only); do not retry unchanged.",
)
ROLE_MISSING: Final = _reason(
    "ROLE_MISSING",
    "PERMISSION_DENIED",
    "The caller's identity does not have the role the method needs (read, report or admin); "
    "the metadata names the identity and the role.",
    "Call with an identity that has the role, or have an operator add the role to auth.roles.",
)
CHECKPOINT_NOT_ALLOWED: Final = _reason(
    "CHECKPOINT_NOT_ALLOWED",
    "PERMISSION_DENIED",
    "The checkpoint location to follow is not under one of the daemon's auth.checkpoint_roots, "
    "so the daemon will not read it (it would read any path it can reach for the caller).",
    "Use a checkpoint under a configured root, or have an operator add the root.",
)
INCARNATION_CHANGED: Final = _reason(
    "INCARNATION_CHANGED",
    "FAILED_PRECONDITION",
    "The read is pinned to a query (StoreRef.query_id, a Scan page token, a WatchEpochs stream) that "
    "the job's checkpoint no longer holds: it was deleted and recreated, so the job's epochs now "
    "belong to another query and restart at 0. Metadata: job, requestedQueryId, currentQueryId "
    "(empty while the new query is not followed yet).",
    "The old query's answers stay as given but no new ones come; read again unpinned (or pinned to "
    "currentQueryId) and expect other epochs.",
)
CALL_CANCELLED: Final = _reason(
    "CALL_CANCELLED",
    "CANCELLED",
    "The caller cancelled the call (or its connection ended) while the read waited for its epoch; "
    "the daemon stopped waiting and freed the call's slot at once.",
    "Nothing: the caller is gone. A client sees CANCELLED from its own library, not this reason.",
)
JOB_DEFINED: Final = _reason(
    "JOB_DEFINED",
    "ALREADY_EXISTS",
    "The group already has a job of that name (JobsAdmin.AddJob), or, for a report naming a "
    "checkpoint (ReportEpoch), has it with another checkpoint: a report never changes a defined job.",
    "Pick another name, or remove the job first (an admin); JobsStatus shows its definition.",
)
JOB_NOT_DEFINED: Final = _reason(
    "JOB_NOT_DEFINED",
    "NOT_FOUND",
    "The group has no job of that name (JobsAdmin.RemoveJob, PauseJob, ResumeJob, RestartJob).",
    "Check the name (JobsAdmin.JobsStatus lists the group's jobs).",
)
DEFINITION_CHANGED: Final = _reason(
    "DEFINITION_CHANGED",
    "ABORTED",
    "The job's definition changed since the version the caller read (expected_version): "
    "another admin came first.",
    "Read the job again (JobsStatus), decide again, and repeat the call with the new version.",
)
NO_GROUP: Final = _reason(
    "NO_GROUP",
    "FAILED_PRECONDITION",
    "The daemon is not a member of a group (started without --group), so it has no group jobs to manage.",
    "Send the call to a daemon started with --group (and --zookeeper).",
)
PARTITION_NOT_HELD: Final = _reason(
    "PARTITION_NOT_HELD",
    "FAILED_PRECONDITION",
    "The daemon holds only some Spark partitions of the job (the shards a group assigned it) and "
    'the key falls in another one, so it can say nothing about it (never "absent"). Metadata: '
    'job, partition (the key\'s), heldPartitions (e.g. "0-3, 8").',
    "Read through the routed client, or ask a replica of the key's shard (Routing.Locate).",
)
BAD_RANGE: Final = _reason(
    "BAD_RANGE",
    "INVALID_ARGUMENT",
    "The epoch range of History or Changes is malformed: a negative from_epoch, a to_epoch before "
    "from_epoch, or to_epoch together with follow.",
    "Fix the range; do not retry unchanged.",
)
SWAP_NOT_FOUND: Final = _reason(
    "SWAP_NOT_FOUND",
    "NOT_FOUND",
    "The output subject has no hot-swap (none was ever planned on it).",
    "Check the subject name; AlignmentAdmin.SwapStatus lists the swaps.",
)
JOBS_NOT_ALIGNED: Final = _reason(
    "JOBS_NOT_ALIGNED",
    "FAILED_PRECONDITION",
    "A hot-swap needs both jobs to read one input subject aligned, and the old job to be the one "
    "writing the output subject; they do not (the message says which part is missing).",
    "Align both jobs on the shared input (AlignmentAdmin.CatchUp, Align), then plan again.",
)
SWAP_EPOCH_PASSED: Final = _reason(
    "SWAP_EPOCH_PASSED",
    "FAILED_PRECONDITION",
    "The swap epoch is too early: a job has already read past the epoch in which it must prepare "
    "(two epochs before the swap epoch). Metadata: earliestEpoch, the earliest swap epoch possible now.",
    "Plan again without an epoch (the earliest one) or at earliestEpoch or later.",
)
NEW_TOO_FAR_BEHIND: Final = _reason(
    "NEW_TOO_FAR_BEHIND",
    "FAILED_PRECONDITION",
    "The hot-swap was aborted: the new job did not reach the swap's prepare epoch before the "
    "swap's deadline, so the old job kept the output subject.",
    "Let the new job catch up (its aligned epochs close to the old job's), then plan again.",
)
SWAP_IN_FLIGHT: Final = _reason(
    "SWAP_IN_FLIGHT",
    "FAILED_PRECONDITION",
    "Another hot-swap of the output subject is planned, prepared or committed and not done yet: "
    "a subject has at most one swap in flight.",
    "Wait for it to end (SwapStatus), or abort it if it is not committed yet, then plan again.",
)
SWAP_COMMITTED: Final = _reason(
    "SWAP_COMMITTED",
    "FAILED_PRECONDITION",
    "The hot-swap is committed (or done): it can no longer be aborted; it completes once both jobs "
    "run past the swap epoch.",
    "Nothing to undo; to go back, plan a swap from the new job to the old one after this one is done.",
)
ALIAS_NOT_FOUND: Final = _reason(
    "ALIAS_NOT_FOUND",
    "NOT_FOUND",
    "No alias (logical job name) of that name is defined in ZooKeeper.",
    "Check the name; `epochstate alias list` lists the aliases, `epochstate alias set` defines one.",
)
AMBIGUOUS_NAME: Final = _reason(
    "AMBIGUOUS_NAME",
    "FAILED_PRECONDITION",
    "The name is both a job and an alias (logical job name), so a read cannot tell which is meant; "
    "or an alias is to be defined under the name of a job. Metadata: job.",
    "Delete the alias or give it another name (`epochstate alias delete`); jobs and aliases share one "
    "namespace.",
)
