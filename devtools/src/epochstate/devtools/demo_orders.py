"""The demo's orders: JSON files written at a steady rate until the demo stops them.

A file source rather than Spark's ``rate`` source, because a file source runs
dry: once the writer stops, the job processes what is there and then waits
between batches, where it can be stopped without cutting a batch off. A
``rate`` source always has the next second's rows, and on a busy machine its
batches run back to back, so a stop always lands inside one.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

USERS = ("alice", "bob", "carol", "dave", "erin")
SCHEMA = "user string, amount long"


def order(number: int) -> dict[str, object]:
    """Order ``number``: the users take turns, amounts cycle through 0..96."""
    return {"user": USERS[number % len(USERS)], "amount": number % 97}


class OrderWriter(threading.Thread):
    """Writes ``rows_per_second`` orders a second into ``directory``, a file every ``flush_seconds``.

    Files appear whole (written under a hidden name, then renamed), so the job
    never reads half a file.
    """

    def __init__(self, directory: Path, rows_per_second: int, flush_seconds: float = 0.5) -> None:
        super().__init__(name="order-writer", daemon=True)
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._per_file = max(1, round(rows_per_second * flush_seconds))
        self._flush_seconds = flush_seconds
        self._stopped = threading.Event()
        self.written = 0

    def run(self) -> None:
        files = 0
        while not self._stopped.wait(self._flush_seconds):
            rows = range(self.written, self.written + self._per_file)
            hidden = self.directory / f".{files:06d}.json"
            hidden.write_text("".join(json.dumps(order(n)) + "\n" for n in rows))
            hidden.rename(self.directory / f"{files:06d}.json")
            self.written += self._per_file
            files += 1

    def stop(self) -> None:
        """Stop writing; returns once the last file is complete."""
        self._stopped.set()
        self.join()
