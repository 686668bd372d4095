"""The two chained jobs of the demo, as Spark streaming queries.

job 1, ``hot-issues``: issue comments joined with the generated issues, counted
per issue (its state: issue -> ``groupState {comments, pr}``); every batch's
new counts go to the subject ``hot-issues`` through the aligned sink, so batch
``n`` is subject epoch ``n``.

job 2, ``pr-hotness``: the subject read aligned (one batch per subject epoch)
together with the pull-request comments; per pull request it keeps the newest
comment count of each of its issues and its own comment count (its state), and
emits the hotness: all comments on the pull request and on its issues.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochstate.devtools.chain_demo.workload import ISSUE_COMMENTS, PR_COMMENTS, Workload

FORMAT = "epochstate-kafka"
HOT_ISSUES = "hot-issues"
PR_HOTNESS = "pr-hotness"
HOT_ISSUE_SCHEMA = "issue int, pr int, comments long"
HOTNESS_SCHEMA = "pr int, issue_comments long, pr_comments long, hotness long"


@dataclass(frozen=True)
class Wiring:
    """Where the jobs find the broker and ZooKeeper, and where their checkpoints go."""

    bootstrap: str
    zookeeper: str
    comments: Path  # the comment writer's directory
    checkpoints: Path
    trigger_seconds: float

    def checkpoint(self, job: str) -> str:
        return str(self.checkpoints / job)


def _comments(spark: Any, wiring: Wiring, topic: str, column: str) -> Any:
    """The comments of ``topic`` (a directory of JSON files), a column ``column`` of ids."""
    return spark.readStream.schema(f"{column} int").json(str(wiring.comments / topic))


def count_comments(key: tuple[int], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """applyInPandasWithState: an issue's comments so far (its state) and its pull request.

    Emits the issue's new count once per batch in which it got comments (the
    Python sink takes append mode only, which a plain aggregation cannot give
    without a watermark).
    """
    import pandas as pd  # type: ignore[import-untyped]

    (issue,) = key
    comments, pr = state.get if state.exists else (0, -1)
    for frame in frames:
        comments += len(frame)
        pr = int(frame["pr"].iloc[0])
    state.update((comments, pr))
    yield pd.DataFrame({"issue": [issue], "pr": [pr], "comments": [comments]})


def start_hot_issues(spark: Any, wiring: Wiring, workload: Workload) -> Any:
    """Job 1: comments per issue, each batch's changes written to the subject as JSON."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    hot = (
        _comments(spark, wiring, ISSUE_COMMENTS, "issue")
        .join(workload.issue_table(spark), "issue")
        .groupBy("issue")
        .applyInPandasWithState(
            count_comments, HOT_ISSUE_SCHEMA, "comments long, pr int", "append", GroupStateTimeout.NoTimeout
        )
    )
    return (
        hot.select(
            F.col("issue").cast("string").alias("key"),
            F.to_json(F.struct("issue", "pr", "comments")).alias("value"),
        )
        .writeStream.format(FORMAT)
        .outputMode("append")
        .queryName(HOT_ISSUES)
        .trigger(processingTime=f"{wiring.trigger_seconds} seconds")
        .option("topic", HOT_ISSUES)
        .option("bootstrap", wiring.bootstrap)
        .option("zookeeper", wiring.zookeeper)
        .option("checkpointLocation", wiring.checkpoint(HOT_ISSUES))
        .start()
    )


def hotness(key: tuple[int], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """applyInPandasWithState: fold hot-issue counts and pull-request comments into one pull request.

    Rows with ``issue >= 0`` carry an issue's newest comment count (counts only
    grow, so the largest seen is the newest); rows with ``issue = -1`` are one
    comment on the pull request itself.
    """
    import pandas as pd

    (pr,) = key
    issues: dict[str, int] = json.loads(state.get[0]) if state.exists else {}
    own = int(state.get[1]) if state.exists else 0
    for frame in frames:
        for issue, comments in zip(frame["issue"], frame["comments"], strict=True):
            if issue < 0:
                own += int(comments)
            else:
                issues[str(issue)] = max(issues.get(str(issue), 0), int(comments))
    state.update((json.dumps(issues, sort_keys=True), own))
    on_issues = sum(issues.values())
    yield pd.DataFrame(
        {"pr": [pr], "issue_comments": [on_issues], "pr_comments": [own], "hotness": [on_issues + own]}
    )


def start_pr_hotness(spark: Any, wiring: Wiring, sink: Callable[[Any, int], None]) -> Any:
    """Job 2: the subject, aligned, with the pull-request comments -> hotness per pull request."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    hot = (
        spark.readStream.format(FORMAT)
        .option("topic", HOT_ISSUES)
        .option("bootstrap", wiring.bootstrap)
        .option("zookeeper", wiring.zookeeper)
        .option("job", PR_HOTNESS)
        .option("checkpointLocation", wiring.checkpoint(PR_HOTNESS))
        .load()
        .select(F.from_json(F.col("value").cast("string"), HOT_ISSUE_SCHEMA).alias("h"))
        .select("h.pr", "h.issue", "h.comments")
    )
    own = _comments(spark, wiring, PR_COMMENTS, "pr").select(
        "pr", F.lit(-1).alias("issue"), F.lit(1).cast("long").alias("comments")
    )
    return (
        hot.unionByName(own)
        .groupBy("pr")
        .applyInPandasWithState(
            hotness, HOTNESS_SCHEMA, "issues string, pr_comments long", "update", GroupStateTimeout.NoTimeout
        )
        .writeStream.foreachBatch(sink)
        .outputMode("update")
        .queryName(PR_HOTNESS)
        # Twice as often as job 1, so that it catches up after a slow batch.
        .trigger(processingTime=f"{wiring.trigger_seconds / 2} seconds")
        .option("checkpointLocation", wiring.checkpoint(PR_HOTNESS))
        .start()
    )
