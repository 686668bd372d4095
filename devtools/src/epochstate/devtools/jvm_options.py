"""JVM options for the short-lived, small JVMs of demos and tests.

A local Spark job of a few batches spends most of its CPU compiling its code with the
JIT's optimising tier and running parallel garbage collectors, work that pays back only
in a JVM that runs for long. On the test workloads, the JIT's first tier and the serial
collector halve the CPU a Spark JVM uses (28 s against 14 s for a six-batch aggregation
and its state reads, on 2 cores). Production jobs keep their own settings.
"""

from __future__ import annotations

SMALL_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def with_small_jvm(options: str | None) -> str:
    """``options`` (a ``spark.driver.extraJavaOptions`` string) after :data:`SMALL_JVM_OPTIONS`;
    a later option of the same name wins, as in any java command line."""
    return " ".join(filter(None, [*SMALL_JVM_OPTIONS, options]))
