"""Retrying transient storage faults: exponential backoff with full jitter, bounded.

A call is tried up to ``attempts`` times and never past ``deadline`` seconds from
its first try. Between tries it waits a random time in ``[0, min(cap, base * 2**n)]``
(full jitter: clients that failed together do not retry together).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry one storage request."""

    attempts: int = 6
    base: float = 0.05
    cap: float = 2.0
    deadline: float = 20.0

    def delays(self, rng: random.Random) -> list[float]:
        """The waits before tries 2..attempts (each drawn once per call)."""
        return [rng.uniform(0.0, min(self.cap, self.base * 2**n)) for n in range(self.attempts - 1)]

    def covering(self, timeout: float) -> RetryPolicy:
        """This policy for requests that may each run ``timeout`` seconds: the deadline
        is at least twice the timeout, so a request that timed out is tried again
        (a deadline shorter than the timeout would give up after the first)."""
        return replace(self, deadline=max(self.deadline, 2 * timeout))


NO_RETRY = RetryPolicy(attempts=1)


def with_retries(
    call: Callable[[], T],
    transient: Callable[[BaseException], bool],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[BaseException], None] = lambda _: None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> T:
    """``call()``, repeated while it raises a transient error and the policy allows.

    Raises:
        the last error: when it is not transient, or tries or time ran out.
    """
    started = clock()
    delays = policy.delays(rng or random.Random())
    for delay in [*delays, None]:
        try:
            return call()
        except Exception as error:
            if delay is None or not transient(error) or clock() + delay - started > policy.deadline:
                raise
            on_retry(error)
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
