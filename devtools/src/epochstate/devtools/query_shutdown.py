"""Stopping a streaming query between batches, so that the stop aborts nothing.

``StreamingQuery.stop()`` interrupts the query's thread wherever it is. Inside
a batch that aborts the batch's write (the aligned sink then registers no epoch
for it), and inside a Python ``foreachBatch`` function it fails the function's
Py4J call. PySpark 4.0 then tells "stopped" from "failed" by matching the
Py4J error's message with a regular expression whose ``(.|\\r\\n|\\r|\\n)*``
recurses once per character (SPARK-48717): a message carrying a Java stack
trace (a few thousand characters) overflows the thread's stack, and the query's
thread dies with a ``StackOverflowError``. Between batches the thread only waits
for its next trigger or asks its sources for offsets, and a stop there is clean.
"""

from __future__ import annotations

import threading
import time
from typing import Any

POLL_SECONDS = 0.05


def drain(query: Any, timeout: float) -> str | None:
    """Wait until ``query`` has processed everything its sources have now.

    Its inputs must have stopped growing (else this waits the whole ``timeout``).
    Returns None once the query found nothing new (it then waits for its next
    trigger), else why not: it failed (the first line of its error), or
    ``timeout`` seconds passed.
    """
    if not query.isActive:
        return None
    failure: list[str] = []
    done = threading.Event()

    def wait() -> None:
        try:
            query.processAllAvailable()
        except Exception as error:  # the query's failure, StreamingQueryException
            failure.append(str(error).splitlines()[0] if str(error) else type(error).__name__)
        finally:
            done.set()

    # processAllAvailable takes no timeout; the thread ends when the query stops.
    threading.Thread(target=wait, name=f"drain-{query.name}", daemon=True).start()
    if not done.wait(timeout):
        return f"still busy after {timeout:g} s"
    return failure[0] if failure else None


def stop_between_batches(query: Any, timeout: float) -> None:
    """Stop ``query`` while no trigger runs (waiting up to ``timeout`` seconds for such a moment).

    For a query whose input keeps growing, after each batch the thread waits
    for the next trigger; the stop falls into that wait unless the next trigger
    starts in the same few milliseconds. A query that is never idle for
    ``timeout`` seconds is stopped anyway.
    """
    deadline = time.monotonic() + timeout
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    query.stop()
