"""Failing over between replicas: the first answer of any, within one deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from epochstate.client.client import _FIRST_BACKOFF, _MAX_BACKOFF
from epochstate.client.errors import Unavailable, error_info, from_rpc_error
from epochstate.client.routing import Replicas
from epochstate.core import reasons

T = TypeVar("T")

# An attempt on one replica gets this share of the time left (at least MIN_ATTEMPT
# seconds) when another could answer: a silent replica must leave time for the others.
ATTEMPT_SHARE = 1 / 3
MIN_ATTEMPT = 0.5
# Answers that another replica may not give: it may still follow the job, hold the epoch
# or the key's partition (a shard moved: the location is asked again), have a free slot,
# or a store it can read.
_ELSEWHERE = frozenset(
    {
        reasons.JOB_NOT_FOUND,
        reasons.EPOCH_NOT_READY,
        reasons.EPOCH_RETIRED,
        reasons.EPOCH_WAIT_TIMED_OUT,
        reasons.TOO_MANY_CALLS,
        reasons.STORE_DAMAGED,
        reasons.PARTITION_NOT_HELD,
    }
)


def first_answer(
    candidates: Callable[[int, float], list[str]],
    attempt: Callable[[str, float], T],
    seconds: float,
    replicas: Replicas,
    *,
    waits: bool,
) -> T:
    """``attempt(address, seconds)`` on each of ``candidates(round, seconds left)`` until
    one answers, all within ``seconds``.

    An unreachable address (UNAVAILABLE, or no answer within its share of the
    time) is marked and the next one tried; so is one that answers a reason
    another replica may not (:data:`_ELSEWHERE`: it does not follow the job,
    hold the epoch or the key's partition, have a free slot or a readable
    store), whose error is
    raised when no other answers. After each round the next
    asks ``candidates`` again (``round`` > 0: locate afresh), with back-off,
    until the deadline. ``waits``: the read may wait at the daemon, so each
    attempt gets all the time left.

    When the deadline comes, the error raised is the most telling one of any
    round (a replica's own answer, then an unreachable one's), even when the
    last round had no time left to try anyone: a read that waited in vain for
    its epoch ends DEADLINE_EXCEEDED, not "unavailable".
    """
    deadline = time.monotonic() + seconds
    backoff = _FIRST_BACKOFF
    last: grpc.RpcError | None = None
    answered_elsewhere: grpc.RpcError | None = None
    # The errors of any round, for the deadline: a replica's own answer says more than
    # another's silence, whichever round each came in.
    answer: grpc.RpcError | None = None
    silence: grpc.RpcError | None = None
    round_ = 0
    while True:
        addresses = candidates(round_, max(0.0, deadline - time.monotonic()))
        for index, address in enumerate(addresses):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            seconds = remaining
            if not waits and index < len(addresses) - 1:
                seconds = min(remaining, max(MIN_ATTEMPT, remaining * ATTEMPT_SHARE))
            try:
                result = attempt(address, seconds)
            except grpc.RpcError as error:
                code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
                info = error_info(error)
                reason = "" if info is None else info.reason
                if reason in _ELSEWHERE:
                    answered_elsewhere = error
                    continue
                unreachable = code == grpc.StatusCode.UNAVAILABLE and reason != reasons.REGISTRY_UNAVAILABLE
                silent = code == grpc.StatusCode.DEADLINE_EXCEEDED and not reason and seconds < remaining
                if not (unreachable or silent or code == grpc.StatusCode.UNAVAILABLE):
                    raise from_rpc_error(error) from None
                if unreachable or silent:
                    replicas.failed(address)
                last = error
                continue
            replicas.answered(address)
            return result
        if answered_elsewhere is not None and last is None:
            raise from_rpc_error(answered_elsewhere) from None
        answer, silence = answered_elsewhere or answer, last or silence
        remaining = deadline - time.monotonic()
        if remaining <= backoff:
            telling = answer or silence
            if telling is not None:
                raise from_rpc_error(telling) from None
            raise Unavailable("no daemon serving the read answered before the deadline")
        time.sleep(backoff)
        backoff = min(backoff * 2, _MAX_BACKOFF)
        round_ += 1
        last = answered_elsewhere = None
