"""A streaming aggregation run through a Spark Connect session, its epochs reported by the listener.

Run as ``python -m tests.spark_plugin.connect_job TARGET ROOT``: a local Spark
Connect server (``SparkSession.builder.remote("local[2]")``, the server the pyspark
wheel ships) runs the query with :func:`epochstate.spark_plugin.attach` listening,
reporting to the daemon at ``TARGET``; Spark's state reader, through the same
Connect session, writes what each epoch holds to ``ROOT/oracle.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from epochstate.devtools.jvm_options import small_jvm_conf
from epochstate.devtools.python_workers import worker_python

EPOCHS = 3


def main(target: str, root: Path) -> None:
    os.environ["TZ"] = "UTC"
    os.environ["PYSPARK_PYTHON"] = worker_python()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from epochstate.spark_plugin import attach

    jvm: dict[str, bool | float | int | str | None] = {**small_jvm_conf()}
    spark = (
        SparkSession.builder.remote("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config(map=jvm)
        .getOrCreate()
    )
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        assert isinstance(spark, ConnectSession), f"not a Spark Connect session: {type(spark)}"
        source, checkpoint = root / "in", root / "cp"
        source.mkdir(parents=True)
        attach(spark, target, checkpoints={"orders": str(checkpoint)})
        query = (
            spark.readStream.schema("user string, amount long")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .groupBy("user")
            .agg(F.count("*").alias("orders"), F.sum("amount").alias("spent"))
            .writeStream.queryName("orders")
            .format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        for batch in range(EPOCHS):
            rows = (
                json.dumps({"user": f"u{i % 5}", "amount": batch * 10 + i}) for i in range(batch, batch + 6)
            )
            (source / f"{batch}.json").write_text("\n".join(rows))
            query.processAllAvailable()
        query.stop()
        oracle = {
            epoch: sorted(
                [r.key.user, *r.value, r.partition_id]
                for r in spark.read.format("statestore")
                .option("batchId", epoch)
                .load(str(checkpoint))
                .collect()
            )
            for epoch in range(EPOCHS)
        }
        (root / "oracle.json").write_text(json.dumps(oracle))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
