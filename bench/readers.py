"""Reader threads for the soak: each loops over rounds of reads until stopped, counting reads and errors."""

from __future__ import annotations

import random
import threading
from collections import Counter

from epochstate.client import EpochStateClient
from epochstate.core.errors import EpochStateError


class ReaderThreads:
    """``count`` threads, thread ``i`` running :meth:`round` with its own client and a
    ``random.Random(i)`` until :meth:`stop`; a round returns how many reads it made. An
    error counts under its class name, and that thread pauses half a second."""

    def __init__(self, target: str, count: int) -> None:
        self.target = target
        self.reads = 0
        self.errors: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(count)]

    def round(self, client: EpochStateClient, rng: random.Random, thread: int) -> int:
        raise NotImplementedError

    def start(self) -> ReaderThreads:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)

    def _run(self, thread: int) -> None:
        rng = random.Random(thread)
        with EpochStateClient(self.target, timeout=60) as client:
            while not self._stop.is_set():
                try:
                    done = self.round(client, rng, thread)
                except EpochStateError as error:
                    with self._lock:
                        self.errors[type(error).__name__] += 1
                    self._stop.wait(0.5)
                    continue
                with self._lock:
                    self.reads += done
                if done == 0:  # nothing to read yet
                    self._stop.wait(0.5)
