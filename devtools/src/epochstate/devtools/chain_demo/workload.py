"""The workload of van Kaam's experiments (§6.1): issues of pull requests, comments on both.

Issues are generated up front, each belonging to one pull request; comments on
issues and on pull requests arrive as two streams of JSON files (file sources
keep the demo to one Python stream reader: the aligned one). Like the thesis's
generators, comments prefer recent issues and pull requests (a Pareto
distribution over age), and a seed makes every run write the same comments.
"""

from __future__ import annotations

import json
import math
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ISSUE_COMMENTS = "issue-comments"
PR_COMMENTS = "pr-comments"


@dataclass(frozen=True)
class Workload:
    """``issues`` issues, issue ``i`` belonging to pull request ``i % pull_requests``."""

    issues: int = 24
    pull_requests: int = 6
    comments_per_second: float = 20.0
    seed: int = 61

    def pull_request_of(self, issue: int) -> int:
        return issue % self.pull_requests

    def issues_of(self, pull_request: int) -> list[int]:
        return [i for i in range(self.issues) if self.pull_request_of(i) == pull_request]

    def issue_table(self, spark: Any) -> Any:
        """The generated issues as a static DataFrame ``issue int, pr int``."""
        return spark.createDataFrame(
            [(i, self.pull_request_of(i)) for i in range(self.issues)], "issue int, pr int"
        )


def recent(rng: random.Random, count: int) -> int:
    """One of ``0..count-1``, the newest (highest) most likely: age follows a Pareto law."""
    age = math.floor(rng.paretovariate(1.2)) - 1
    return max(0, count - 1 - age % count)


class CommentWriter(threading.Thread):
    """Writes comments at the workload's rate until stopped, a JSON file per topic every half second.

    ``<directory>/issue-comments/`` gets ``{"issue": id}`` rows and
    ``<directory>/pr-comments/`` ``{"pr": id}`` rows; two comments in three are
    on issues. Files appear whole (written under a hidden name, then renamed).
    """

    def __init__(self, directory: Path, workload: Workload, flush_seconds: float = 0.5) -> None:
        super().__init__(name="comment-writer", daemon=True)
        self.directories = {topic: directory / topic for topic in (ISSUE_COMMENTS, PR_COMMENTS)}
        for path in self.directories.values():
            path.mkdir(parents=True, exist_ok=True)
        self._workload = workload
        self._flush_seconds = flush_seconds
        self._stopped = threading.Event()
        self.written = {ISSUE_COMMENTS: 0, PR_COMMENTS: 0}

    def run(self) -> None:
        rng = random.Random(self._workload.seed)
        per_file = max(1, round(self._workload.comments_per_second * self._flush_seconds))
        files = 0
        while not self._stopped.wait(self._flush_seconds):
            rows: dict[str, list[str]] = {ISSUE_COMMENTS: [], PR_COMMENTS: []}
            for _ in range(per_file):
                if rng.random() < 2 / 3:
                    rows[ISSUE_COMMENTS].append(json.dumps({"issue": recent(rng, self._workload.issues)}))
                else:
                    rows[PR_COMMENTS].append(json.dumps({"pr": recent(rng, self._workload.pull_requests)}))
            for topic, lines in rows.items():
                if lines:
                    hidden = self.directories[topic] / f".{files:06d}.json"
                    hidden.write_text("\n".join(lines) + "\n")
                    hidden.rename(self.directories[topic] / f"{files:06d}.json")
                    self.written[topic] += len(lines)
            files += 1

    def stop(self) -> None:
        self._stopped.set()
        self.join()
