"""Where a demo's components write their logs: one directory of named files.

A demo starts ZooKeeper, a Kafka broker, the daemon and Spark; each of them
logs, and Spark's Python workers print (the aligned source's and sink's Python
logging, librdkafka's log of their Kafka clients). All of that goes to files
here, so the terminal tells only the demo's own story, and the demo names the
files once, where someone looking into a problem reads them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

# A record at this level or above in the demo process is a fault: it also reaches the terminal.
TERMINAL_LEVEL = logging.ERROR


@dataclass(frozen=True)
class LogFiles:
    """The log files of one demo run, all in ``directory``."""

    directory: Path

    @property
    def spark(self) -> Path:
        """Spark's log4j log (the driver and, in local mode, the executor)."""
        return self.directory / "spark.log"

    @property
    def spark_console(self) -> Path:
        """What the Spark JVM and its Python workers print outside log4j: the workers' Python
        logging and their Kafka clients' librdkafka log, the JVM's own notices."""
        return self.directory / "spark-console.log"

    @property
    def daemon(self) -> Path:
        return self.directory / "daemon.log"

    @property
    def zookeeper(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def kafka_broker(self) -> Path:
        return self.directory / "kafka-broker.log"

    @property
    def demo(self) -> Path:
        """The demo process's own Python logging (kazoo, gRPC, py4j, librdkafka of its own clients)."""
        return self.directory / "demo.log"

    def fresh(self) -> LogFiles:
        """Create the directory and empty the files of an earlier run there."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in self.directory.glob("*.log"):
            path.unlink()
        return self

    def names(self, *paths: Path) -> str:
        """``directory/`` and the names of ``paths``, for the one line that tells where the logs are."""
        return f"{self.directory}/ ({', '.join(p.name for p in paths)})"

    def route_python_logging(self) -> None:
        """Send this process's Python logging to :attr:`demo`; errors also to the terminal.

        Without a handler, Python prints every warning of every library (kazoo's
        reconnects, for one) on stderr; those are chatter. An error is not: it
        goes to stderr as well.
        """
        to_file = logging.FileHandler(self.demo, encoding="utf-8")
        to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        to_terminal = logging.StreamHandler()
        to_terminal.setLevel(TERMINAL_LEVEL)
        to_terminal.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.setLevel(logging.INFO)
        root.addHandler(to_file)
        root.addHandler(to_terminal)
